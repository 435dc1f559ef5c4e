//! Apache Iceberg for Outflow, on iceberg-rust: a sink that writes Arrow batches to Iceberg
//! tables, and AddFiles, which registers existing Parquet files into a table.
//!
//! The modules every Outflow sink crate has, with the same meaning:
//! - [`options`]: what users write ([`IcebergSinkOptions`], [`CatalogConfig`],
//!   [`TableCreateOptions`]), serde types whose field docs are the user docs; [`builder`]:
//!   their builders, validating in `build()`.
//! - [`schema`]: between the Iceberg schema and Outflow's schema model.
//! - [`sink`]: [`IcebergSink`], the write loop: Parquet data files, one commit per flush, or
//!   staged files for a committer ([`TwoPhaseSink`](outflow_core::TwoPhaseSink)).
//! - [`admin`]: creating tables, dispositions, schema evolution, and [`IcebergPreparer`].
//! - [`client`]: the catalog ([`IcebergCatalog`]: SQL on SQLite, in-memory, REST), Outflow's
//!   atomic commit path on each, and the classification of iceberg-rust's errors.
//!
//! And Iceberg's own: [`writer`] (a table's data files), [`commit`] (snapshots with
//! idempotent commit ids, overwrite, schema commits), [`loads`] (the record of the source
//! files each commit loaded, for exactly-once reruns), [`manifest`] (a fast writer of the
//! manifests appends make, and merging them), [`maintenance`] (expiring snapshots,
//! removing orphan files, rewriting a table's manifests), [`staged`] (the committer of a two-phase write, [`IcebergCommitter`]),
//! `upsert` (change data applied by key: equality deletes beside the data files),
//! [`partition`] (partition and sort fields as users write them) and [`add_files`] ([`AddFiles`]: existing Parquet files registered from their
//! footers, evolving the schema).
#![deny(missing_docs)]

pub mod add_files;
pub mod admin;
pub mod builder;
pub mod client;
pub mod commit;
pub mod loads;
pub mod maintenance;
pub mod manifest;
pub mod offsets;
pub mod options;
pub mod partition;
mod rest_auth;
pub mod schema;
pub mod sink;
pub mod staged;
mod upsert;
mod vended;
pub mod writer;

pub use add_files::{AddFiles, AddFilesOptions, AddFilesResult};
pub use admin::{IcebergPreparer, table_row_count};
pub use builder::{IcebergSinkOptionsBuilder, TableCreateOptionsBuilder};
pub use client::IcebergCatalog;
pub use options::{CatalogConfig, IcebergSinkOptions, TableCreateOptions};
pub use partition::{PartitionField, SortField};
pub use sink::{IcebergSink, PendingCommit};
pub use staged::{IcebergCommitter, Recording, StagedFiles, commit_staged};
