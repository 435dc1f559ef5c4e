//! Table maintenance: work on a table's metadata and files that no write does on its own.
//!
//! - [`rewrite_manifests`]: merges small manifests into fewer (see [`manifests`]).
//! - [`expire_snapshots`]: removes old snapshots from the history and deletes the files
//!   only they referenced (see [`expire`]).

pub mod expire;
pub mod manifests;

pub use expire::{ExpireSnapshotsOptions, ExpireSnapshotsReport, expire_snapshots};
pub use manifests::{RewriteManifestsOptions, RewriteManifestsReport, rewrite_manifests};
