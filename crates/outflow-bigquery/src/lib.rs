//! Google BigQuery for Outflow: a sink that writes Arrow batches through the Storage Write
//! API, on the official `google-cloud-bigquery` (gRPC) and `google-cloud-bigquery-v2`
//! (REST) crates.
//!
//! The modules every Outflow sink crate has, with the same meaning:
//! - [`options`]: what users write ([`BigQuerySinkOptions`], [`ConnectionOptions`],
//!   [`TimePartitioning`]...), serde types whose field docs are the user docs; [`builder`]:
//!   [`BigQuerySinkOptionsBuilder`], validating in `build()`.
//! - [`schema`]: BigQuery's JSON schema format ([`TableSchema`]) and the type mapping
//!   between Arrow, Outflow's schema model and BigQuery ([`schema::types`]).
//! - [`sink`]: [`BigQuerySink`], the write loop: exactly once (committed or pending streams
//!   with offsets) or at least once (the default stream), dispositions, schema updates
//!   decided by the shared planner, dynamic destinations and failed records; a
//!   [`Checkpoint`] resumes a writer.
//! - [`admin`]: tables.insert/get/patch, truncation by copy job, [`ensure_table`] (what
//!   `outflow bigquery ensure-table` runs) and [`BigQueryPreparer`].
//! - [`client`]: the service clients and what their errors mean for retrying.
//!
//! And BigQuery's own: [`commit`] (the committer of a two-phase write:
//! [`BigQueryCommitter`] commits every writer's pending streams together), [`loads`] and
//! [`offsets`] (what a table holds of source files and of streaming jobs' offsets), [`stream`] (one
//! table's write stream: offsets, retries, finalize and commit), [`request`] and [`rows`]
//! (rows into AppendRows requests under the limits), [`changes`] (change data: upserts and
//! deletes by primary key, as protobuf rows on the default stream) and [`table_ref`] (table
//! names).
//!
//! `docs/bigquery.md` describes options, guarantees, the type table, limits and emulators.
#![deny(missing_docs)]

pub mod admin;
pub mod builder;
pub mod changes;
pub mod client;
pub mod commit;
pub mod loads;
pub mod offsets;
pub mod options;
pub mod request;
pub mod rows;
pub mod schema;
pub mod sink;
pub mod stream;
pub mod table_ref;

pub use admin::BigQueryPreparer;
pub use admin::ensure::{EnsureTable, EnsureTableReport, ensure_table};
pub use builder::BigQuerySinkOptionsBuilder;
pub use commit::{BigQueryCommitter, PendingStream};
pub use options::{
    BigQuerySinkOptions, ConnectionOptions, Credentials, PartitionType, StreamType, TimePartitioning,
    WriteMethod,
};
pub use schema::{FieldMode, FieldType, TableField, TableSchema};
pub use sink::{BigQuerySink, Checkpoint, StreamCheckpoint};
pub use table_ref::TableRef;
