//! Apache Iceberg for Outflow, on iceberg-rust: a sink that writes Arrow batches to Iceberg
//! tables, and AddFiles, which registers existing Parquet files into a table.
//!
//! - [`IcebergSink`] writes batches as Parquet data files and commits once per flush, with
//!   dispositions, partitioning, schema evolution and dynamic destinations
//!   ([`IcebergSinkOptions`]).
//! - [`catalog`]: SQL-on-SQLite (the embedded default), in-memory and REST catalogs, and the
//!   atomic commit path Outflow uses on each.
//! - [`commit`]: snapshots with idempotent commit ids, overwrite, schema commits.
//! - [`staged`]: data files written by many writers and committed once by one committer,
//!   the two halves of a distributed write (DataFusion, Ballista).
//! - [`add_files`]: [`AddFiles`] registers existing Parquet files into a table, evolving its
//!   schema, with metrics and partition values from their footers.
#![deny(missing_docs)]

mod error;

pub mod add_files;
pub mod catalog;
pub mod commit;
pub mod convert;
pub mod options;
pub mod partition;
pub mod sink;
pub mod staged;

pub use add_files::{AddFiles, AddFilesOptions, AddFilesResult};
pub use catalog::{CatalogConfig, IcebergCatalog};
pub use options::{IcebergSinkOptions, IcebergSinkOptionsBuilder};
pub use partition::{PartitionField, SortField};
pub use sink::{IcebergDestinations, IcebergSink, PendingCommit};
pub use staged::{StagedFiles, commit_staged};
