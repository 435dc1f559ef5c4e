//! Google Cloud Bigtable for Outflow: a sink that writes Arrow rows as MutateRows entries,
//! after creating or reconciling each destination table (add-only).
//!
//! The modules every Outflow sink crate has, with the same meaning:
//! - [`options`]: what users write ([`BigtableSinkOptions`], [`TableCreateOptions`] with its
//!   [`ColumnFamily`]s, [`GcRule`]s and [`ValueType`]s), serde types whose field docs are
//!   the user docs; [`builder`]: their builders, validating in `build()`.
//! - [`schema`]: Arrow rows to Bigtable's model: row keys, families and qualifiers,
//!   timestamps and value encodings ([`RowKey`], [`ColumnMapping`], [`CellTimestamp`]).
//! - [`sink`]: [`BigtableSink`], the write loop: batched MutateRows with bounded requests in
//!   flight, retrying only what is safe to send twice.
//! - [`admin`]: creating and reconciling tables ([`BigtableClient::ensure_table`], what
//!   `outflow bigtable ensure-table` runs) and [`BigtablePreparer`].
//! - [`client`]: the connection ([`BigtableClient`]) and what the service's codes mean for
//!   retrying.
//!
//! And Bigtable's own: [`batch`] (requests under the entry, byte and mutation limits) and
//! [`read`] (ReadRows, for checks).
//!
//! A family declared without a GC rule keeps every cell version forever, which is
//! Bigtable's default. An at-least-once sink retries: a retried `SetCell` with the write
//! time or the server's clock adds a new version each time, and a retried `AddToCell`
//! counts its input twice. Outflow sends explicit timestamps by default (so a retried
//! entry rewrites the same cells) and never retries `AddToCell` or server-time entries; a
//! GC rule such as `{max_versions: 1}` bounds what duplicates can still pile up.
#![deny(missing_docs)]

pub mod admin;
pub mod batch;
pub mod builder;
pub mod client;
pub mod loads;
mod offsets;
pub mod options;
pub mod read;
pub mod schema;
pub mod sink;

pub use admin::{BigtablePreparer, ExistingFamily, TableDescription};
pub use batch::Batching;
pub use builder::{BigtableSinkOptionsBuilder, TableCreateOptionsBuilder};
pub use client::{BigtableClient, BigtableConnection, EMULATOR_HOST_VAR};
pub use options::{
    BigtableSinkOptions, ChangeDelete, Changes, ColumnFamily, GcRule, TableCreateOptions, ValueType,
};
pub use read::{Cell, Row};
pub use schema::{CellTimestamp, Column, ColumnMapping, RowKey};
pub use sink::{BigtableCommitter, BigtableSink, NothingToCommit};
