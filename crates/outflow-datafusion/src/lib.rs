//! Outflow sinks as Apache DataFusion tables.
//!
//! [`SinkTable`] registers an Outflow destination with a DataFusion `SessionContext`, so
//! that `INSERT INTO <table> SELECT ...` (SQL) or `DataFrame::write_table` writes through an
//! Outflow sink, with all of its dispositions, evolution config and options:
//!
//! ```no_run
//! # async fn example() -> datafusion::error::Result<()> {
//! use std::sync::Arc;
//! use datafusion::arrow::datatypes::{DataType, Field, Schema};
//! use datafusion::prelude::SessionContext;
//! use outflow_core::Sink;
//! use outflow_datafusion::SinkTable;
//!
//! let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
//! let table = SinkTable::new(schema, || async {
//!     // Build any Outflow sink here (Iceberg, BigQuery, Bigtable): one per statement.
//!     # let sink: Box<dyn Sink> = unimplemented!();
//!     Ok(sink)
//! });
//! let ctx = SessionContext::new();
//! ctx.register_table("events", Arc::new(table.clone()))?;
//! ctx.sql("INSERT INTO events SELECT value FROM generate_series(1, 100)").await?
//!     .collect().await?;                       // one row: the count written
//! let result = table.last_result();             // rows per destination, failed records
//! # Ok(()) }
//! ```
//!
//! # What a statement does
//!
//! Each statement opens a fresh sink from the table's factory, writes every batch of the
//! query's output to it, and closes it: for Iceberg that is exactly one commit per
//! statement, carrying the sink's deterministic commit id. When the query fails midway, or
//! the sink refuses a batch, the sink is dropped without being closed, so nothing is
//! committed (Iceberg data files already written stay unreferenced, as after any failed
//! Iceberg write) and the statement returns the error.
//!
//! The statement's result is DataFusion's usual single `count` row: the rows the sink
//! wrote. Records the sink rejected are not lost in a log line: the statement's
//! [`WriteResult`] (rows, bytes and files per destination, and every failed record with its
//! reason) is kept and read with [`SinkTable::last_result`], and is appended, one JSON line
//! per failed record, to the table's dead-letter file when one is set
//! ([`SinkTable::with_dead_letter`]).
//!
//! # Two ways to build a table
//!
//! - [`SinkTable::new`] takes a closure that opens any [`Sink`](outflow_core::Sink), yours
//!   included. DataFusion hands the table one stream of batches (its `DataSinkExec`), and
//!   the sink parallelizes inside (the Iceberg sink's `writers_per_table`, the service
//!   sinks' requests in flight). It runs in this process only.
//! - [`SinkTable::from_spec`] takes a [`SinkSpec`] (the `sink:` section of a job file). Each
//!   input partition gets a sink of its own ([`exec::SinkWriterExec`]), with its own
//!   batching and retries; one commit node ([`exec::SinkCommitExec`]) then commits once per
//!   statement through the sink's committer: for Iceberg, one snapshot holding every
//!   writer's data files; for BigQuery, one BatchCommitWriteStreams of every writer's
//!   pending streams. Its answer has
//!   `count` (rows written) and `failed` (rows rejected). The plan serializes through
//!   [`codec`], so the same statement runs on a Ballista cluster (`outflow-ballista`).

pub mod codec;
pub mod exec;
mod statement;
mod table;

pub use codec::{OutflowLogicalCodec, OutflowPhysicalCodec};
pub use outflow_sinks::SinkSpec;
pub use table::{OpenSink, SinkTable};
