//! Google Cloud Bigtable sink for Outflow.
//!
//! - [`TableCreateOptions`]: the column families of a table the sink creates, each with an
//!   optional [`GcRule`] and a [`ValueType`] (raw, or an Int64 aggregate).
//! - [`BigtableSink`]: writes Arrow rows as MutateRows entries, after creating or
//!   reconciling each destination table (add-only); built with [`BigtableSinkBuilder`].
//! - [`BigtableClient`]: the connection, with [`BigtableClient::ensure_table`] (what
//!   `outflow bigtable ensure-table` runs), [`BigtableClient::plan_table`],
//!   [`BigtableClient::describe_table`] and [`BigtableClient::read_rows`].
//!
//! A family declared without a GC rule keeps every cell version forever, which is
//! Bigtable's default. An at-least-once sink retries: a retried `SetCell` with the write
//! time or the server's clock adds a new version each time, and a retried `AddToCell`
//! counts its input twice. Outflow sends explicit timestamps by default (so a retried
//! entry rewrites the same cells) and never retries `AddToCell` or server-time entries; a
//! GC rule such as `{max_versions: 1}` bounds what duplicates can still pile up.
#![deny(missing_docs)]

pub mod admin;
mod batch;
mod builder;
mod client;
mod mutation;
mod options;
pub mod read;
pub mod sink;

pub use admin::{ExistingFamily, TableDescription};
pub use batch::Batching;
pub use builder::BigtableSinkBuilder;
pub use client::{BigtableClient, BigtableConnection, EMULATOR_HOST_VAR};
pub use mutation::{CellTimestamp, Column, ColumnMapping, RowKey};
pub use options::{ColumnFamily, GcRule, TableCreateOptions, TableCreateOptionsBuilder, ValueType};
pub use read::{Cell, Row};
pub use sink::BigtableSink;
