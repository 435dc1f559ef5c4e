//! Table maintenance: work on a table's metadata and files that no write does on its own.
//!
//! - [`compact()`]: rewrites small data files into files of the target size (see
//!   [`mod@compact`]).
//! - [`rewrite_manifests`]: merges small manifests into fewer (see [`manifests`]).
//! - [`expire_snapshots`]: removes old snapshots from the history and deletes the files
//!   only they referenced (see [`expire`]).
//! - [`remove_orphans`]: deletes files under the table's location that no snapshot
//!   references (see [`orphans`]).

pub mod compact;
pub mod expire;
pub mod manifests;
pub mod orphans;

pub use compact::{CompactOptions, CompactReport, compact};
pub use expire::{ExpireSnapshotsOptions, ExpireSnapshotsReport, expire_snapshots};
pub use manifests::{RewriteManifestsOptions, RewriteManifestsReport, rewrite_manifests};
pub use orphans::{RemoveOrphansOptions, RemoveOrphansReport, remove_orphans};

use iceberg::spec::ManifestFile;
use iceberg::table::Table;
use outflow_core::Result;

use crate::client::IcebergResultExt;
use crate::schema::table_name;

/// One snapshot's manifest list and the manifests it names.
pub(crate) struct SnapshotManifests {
    pub(crate) snapshot_id: i64,
    pub(crate) manifest_list: String,
    pub(crate) manifests: Vec<ManifestFile>,
}

/// Every snapshot of `table` with its manifests, read from the manifest lists.
pub(crate) async fn manifests_of(table: &Table) -> Result<Vec<SnapshotManifests>> {
    let name = table_name(table.identifier());
    let mut out = Vec::new();
    for snapshot in table.metadata().snapshots() {
        let list = table
            .manifest_list_reader(snapshot)
            .load()
            .await
            .doing(format_args!(
                "reading the manifest list of snapshot {} of {name}",
                snapshot.snapshot_id()
            ))?;
        out.push(SnapshotManifests {
            snapshot_id: snapshot.snapshot_id(),
            manifest_list: snapshot.manifest_list().to_string(),
            manifests: list.consume_entries().into_iter().collect(),
        });
    }
    Ok(out)
}
