//! Google BigQuery for Outflow: a sink that writes Arrow batches through the Storage Write
//! API, on the official `google-cloud-bigquery` (gRPC) and `google-cloud-bigquery-v2`
//! (REST) crates.
//!
//! - [`BigQuerySink`] writes batches exactly once (committed or pending streams with
//!   offsets) or at least once (the default stream), with create and write dispositions,
//!   schema updates decided by the shared planner, dynamic destinations and failed records.
//!   [`BigQuerySink::preparer`] prepares tables for runners; [`Checkpoint`] resumes a writer.
//! - [`BigQuerySinkOptions`] (built by [`BigQuerySinkOptionsBuilder`], or read from a job
//!   file) holds every setting; [`TableSchema`] is BigQuery's JSON schema format.
//! - [`ensure_table`] creates or evolves a table from a schema file
//!   (`outflow bigquery ensure-table`).
//! - [`types`] is the Arrow to BigQuery type mapping; [`request`] cuts rows into requests.
//!
//! `docs/bigquery.md` describes options, guarantees, the type table, limits and emulators.
#![deny(missing_docs)]

pub mod admin;
pub mod builder;
pub mod client;
pub mod ensure;
pub mod options;
pub mod request;
pub mod rows;
pub mod schema;
pub mod sink;
pub mod stream;
pub mod table_ref;
pub mod types;

pub use builder::BigQuerySinkOptionsBuilder;
pub use ensure::{EnsureTable, EnsureTableReport, ensure_table};
pub use options::{
    BigQuerySinkOptions, ConnectionOptions, Credentials, PartitionType, StreamType, TimePartitioning,
    WriteMethod,
};
pub use schema::{FieldMode, FieldType, TableField, TableSchema};
pub use sink::{BigQueryPreparer, BigQuerySink, BigQuerySinkBuilder, Checkpoint, StreamCheckpoint};
pub use table_ref::TableRef;
