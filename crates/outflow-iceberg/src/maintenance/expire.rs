//! [`expire_snapshots`]: removes old snapshots from a table's history, then deletes the
//! manifest lists, manifests, data and delete files that only they referenced.
//!
//! Which snapshots stay, after Iceberg's `ExpireSnapshots`: the head of every branch and
//! tag (the current snapshot among them); the `retain_last` most recent snapshots of every
//! branch's history; every snapshot newer than `older_than`. The others go, in one metadata
//! commit (`RemoveSnapshots`) that requires the table and its main branch to be as read, so
//! a writer committing meanwhile makes the expiry plan again.
//!
//! Files are deleted after the commit, and only files no remaining snapshot can reach: a
//! manifest goes when no remaining manifest list names it, a data or delete file when no
//! remaining manifest holds it as added or existing (a file a remaining manifest marks
//! deleted is gone from every remaining snapshot). A file that cannot be deleted is listed
//! in the report, not an error: the commit already happened, and the file is an orphan
//! that `remove-orphans` or a rerun of the deletion can take.

use std::collections::{BTreeMap, HashSet};

use iceberg::TableIdent;
use iceberg::spec::{SnapshotReference, TableMetadata};
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};
use outflow_core::{Error, Result, RetryPolicy};
use serde::Serialize;

use super::manifests_of;
use crate::client::{IcebergCatalog, IcebergResultExt};
use crate::schema::{parse_table_ident, table_name};

/// Iceberg's default for `history.expire.max-snapshot-age-ms`: 5 days.
pub const DEFAULT_MAX_AGE_MS: i64 = 5 * 24 * 3600 * 1000;

/// What [`expire_snapshots`] removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpireSnapshotsOptions {
    /// Snapshots committed before this time (milliseconds since the epoch) may go.
    pub older_than_ms: i64,
    /// The most recent snapshots of each branch's history that stay whatever their age (at
    /// least 1: a branch's head always stays).
    pub retain_last: usize,
    /// Plan and report, commit and delete nothing.
    pub dry_run: bool,
}

impl ExpireSnapshotsOptions {
    /// Iceberg's defaults: older than 5 days before `now_ms`, keeping the last one.
    pub fn defaults(now_ms: i64) -> Self {
        ExpireSnapshotsOptions {
            older_than_ms: now_ms - DEFAULT_MAX_AGE_MS,
            retain_last: 1,
            dry_run: false,
        }
    }
}

/// What [`expire_snapshots`] did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExpireSnapshotsReport {
    /// The table.
    pub table: String,
    /// The snapshots removed from the history, oldest first.
    pub expired: Vec<i64>,
    /// How many snapshots stay.
    pub kept: usize,
    /// Files only the expired snapshots referenced, deleted (in a dry run: to delete), by
    /// kind: `manifest_lists`, `manifests`, `data_files`, `delete_files`.
    pub deleted: BTreeMap<String, usize>,
    /// Files that could not be deleted, each with why.
    pub not_deleted: Vec<String>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// One snapshot as the expiry plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotView {
    /// Its id.
    pub id: i64,
    /// Its parent's id.
    pub parent: Option<i64>,
    /// When it was committed, in milliseconds since the epoch.
    pub timestamp_ms: i64,
}

/// A branch or tag: its name, head, and whether it is a branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefView {
    /// The ref's name (`main`, a tag's name...).
    pub name: String,
    /// The snapshot it points at.
    pub snapshot_id: i64,
    /// A branch (its history counts for `retain_last`), or a tag (only its snapshot).
    pub is_branch: bool,
}

/// The snapshots to expire, oldest first: see the module docs for which stay. Pure, so the
/// rules are tested without a table.
pub fn plan_expiry(
    snapshots: &[SnapshotView],
    refs: &[RefView],
    options: &ExpireSnapshotsOptions,
) -> Vec<i64> {
    let by_id: BTreeMap<i64, &SnapshotView> = snapshots.iter().map(|s| (s.id, s)).collect();
    let mut keep: HashSet<i64> = HashSet::new();
    for r in refs {
        keep.insert(r.snapshot_id);
        if !r.is_branch {
            continue;
        }
        let history = std::iter::successors(by_id.get(&r.snapshot_id).copied(), |s| {
            s.parent.and_then(|p| by_id.get(&p).copied())
        });
        keep.extend(history.take(options.retain_last.max(1)).map(|s| s.id));
    }
    let mut expire: Vec<&SnapshotView> = snapshots
        .iter()
        .filter(|s| !keep.contains(&s.id) && s.timestamp_ms < options.older_than_ms)
        .collect();
    expire.sort_by_key(|s| (s.timestamp_ms, s.id));
    expire.into_iter().map(|s| s.id).collect()
}

/// Expires `table`'s old snapshots and deletes what only they referenced; see the module
/// docs.
pub async fn expire_snapshots(
    catalog: &IcebergCatalog,
    table: &str,
    options: &ExpireSnapshotsOptions,
    retry: &RetryPolicy,
) -> Result<ExpireSnapshotsReport> {
    if options.retain_last == 0 {
        return Err(Error::invalid_config("retain_last", "must be at least 1"));
    }
    let ident = parse_table_ident(table)?;
    let what = &format!("expiring snapshots of {}", table_name(&ident));
    let ident = &ident;
    // A lost race (a writer committed meanwhile) plans again on the new state.
    let (report, table, unreachable) = retry
        .retry_within(what, retry.deadline(), |limit| {
            catalog.attempt_within(what, limit, expire_once(catalog, ident, options))
        })
        .await?;
    let mut report = report;
    if !options.dry_run {
        let io = table.file_io();
        for path in unreachable {
            if let Err(e) = io.delete(&path).await {
                report.not_deleted.push(format!("{path}: {e}"));
            }
        }
        if !report.not_deleted.is_empty() {
            tracing::warn!(table = %report.table, files = report.not_deleted.len(), "could not delete some files of expired snapshots");
        }
    }
    Ok(report)
}

/// One attempt: the plan, the commit (unless a dry run), and the files to delete.
async fn expire_once(
    catalog: &IcebergCatalog,
    ident: &TableIdent,
    options: &ExpireSnapshotsOptions,
) -> Result<(ExpireSnapshotsReport, Table, Vec<String>)> {
    let name = table_name(ident);
    let table = catalog.require_table(ident).await?;
    let metadata = table.metadata();
    let snapshots: Vec<SnapshotView> = metadata
        .snapshots()
        .map(|s| SnapshotView {
            id: s.snapshot_id(),
            parent: s.parent_snapshot_id(),
            timestamp_ms: s.timestamp_ms(),
        })
        .collect();
    let refs = refs_of(metadata)?;
    let expire = plan_expiry(&snapshots, &refs, options);
    let mut report = ExpireSnapshotsReport {
        table: name.clone(),
        kept: snapshots.len() - expire.len(),
        dry_run: options.dry_run,
        ..Default::default()
    };
    if expire.is_empty() {
        return Ok((report, table, Vec::new()));
    }
    let expired: HashSet<i64> = expire.iter().copied().collect();
    let (gone, kinds) = unreachable_files(&table, &expired).await?;
    report.deleted = kinds;
    report.expired = expire.clone();
    if options.dry_run {
        return Ok((report, table, gone));
    }
    let mut requirements = vec![TableRequirement::UuidMatch {
        uuid: metadata.uuid(),
    }];
    requirements.extend(
        refs.iter()
            .filter(|r| r.is_branch)
            .map(|r| TableRequirement::RefSnapshotIdMatch {
                r#ref: r.name.clone(),
                snapshot_id: Some(r.snapshot_id),
            }),
    );
    let updates = vec![TableUpdate::RemoveSnapshots {
        snapshot_ids: expire.clone(),
    }];
    catalog.commit(&table, requirements, updates).await?;
    tracing::info!(table = %name, expired = expire.len(), "expired snapshots");
    Ok((report, table, gone))
}

/// The table's branches and tags. iceberg-rust names refs only one at a time, so they are
/// read from the metadata's own JSON form.
fn refs_of(metadata: &TableMetadata) -> Result<Vec<RefView>> {
    let json =
        serde_json::to_value(metadata).map_err(|e| Error::internal(format!("reading table refs: {e}")))?;
    let Some(refs) = json.get("refs").and_then(|r| r.as_object()) else {
        return Ok(Vec::new());
    };
    refs.iter()
        .map(|(name, value)| {
            let r: SnapshotReference = serde_json::from_value(value.clone())
                .map_err(|e| Error::internal(format!("reading table ref {name}: {e}")))?;
            Ok(RefView {
                name: name.clone(),
                snapshot_id: r.snapshot_id,
                is_branch: r.is_branch(),
            })
        })
        .collect()
}

/// The files only the `expired` snapshots reach, and how many of each kind.
async fn unreachable_files(
    table: &Table,
    expired: &HashSet<i64>,
) -> Result<(Vec<String>, BTreeMap<String, usize>)> {
    let io = table.file_io();
    // Manifests named by each side's manifest lists.
    let mut lists_gone = Vec::new();
    let mut kept_manifests = BTreeMap::new();
    let mut expired_manifests = BTreeMap::new();
    for snapshot in manifests_of(table).await? {
        let gone = expired.contains(&snapshot.snapshot_id);
        if gone {
            lists_gone.push(snapshot.manifest_list);
        }
        for manifest in snapshot.manifests {
            if gone {
                expired_manifests.insert(manifest.manifest_path.clone(), manifest);
            } else {
                kept_manifests.insert(manifest.manifest_path.clone(), manifest);
            }
        }
    }
    let manifests_gone: Vec<_> = expired_manifests
        .into_iter()
        .filter(|(path, _)| !kept_manifests.contains_key(path))
        .collect();
    // Files the remaining manifests hold live.
    let mut live = HashSet::new();
    for (path, manifest) in &kept_manifests {
        let loaded = manifest
            .load_manifest(io)
            .await
            .doing(format_args!("reading manifest {path}"))?;
        for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
            live.insert(entry.data_file().file_path().to_string());
        }
    }
    let mut files = BTreeMap::new();
    for (path, manifest) in &manifests_gone {
        let loaded = manifest
            .load_manifest(io)
            .await
            .doing(format_args!("reading manifest {path}"))?;
        for entry in loaded.entries() {
            let file = entry.data_file();
            if !live.contains(file.file_path()) {
                let kind = match file.content_type() {
                    iceberg::spec::DataContentType::Data => "data_files",
                    _ => "delete_files",
                };
                files.insert(file.file_path().to_string(), kind);
            }
        }
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    kinds.insert("manifest_lists".into(), lists_gone.len());
    kinds.insert("manifests".into(), manifests_gone.len());
    for kind in ["data_files", "delete_files"] {
        kinds.insert(kind.into(), files.values().filter(|k| **k == kind).count());
    }
    // Data first, then the metadata that names it, so an interrupted deletion never
    // leaves a manifest pointing at nothing that a later run could not walk.
    let mut paths: Vec<String> = files.into_keys().collect();
    paths.extend(manifests_gone.into_iter().map(|(path, _)| path));
    paths.extend(lists_gone);
    Ok((paths, kinds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(n: i64) -> Vec<SnapshotView> {
        (1..=n)
            .map(|id| SnapshotView {
                id,
                parent: (id > 1).then_some(id - 1),
                timestamp_ms: id * 1000,
            })
            .collect()
    }

    fn branch(name: &str, id: i64) -> RefView {
        RefView {
            name: name.into(),
            snapshot_id: id,
            is_branch: true,
        }
    }

    fn options(older_than_ms: i64, retain_last: usize) -> ExpireSnapshotsOptions {
        ExpireSnapshotsOptions {
            older_than_ms,
            retain_last,
            dry_run: false,
        }
    }

    #[test]
    fn old_snapshots_go_and_the_last_ones_stay() {
        let snapshots = history(5);
        let main = [branch("main", 5)];
        assert_eq!(plan_expiry(&snapshots, &main, &options(10_000, 1)), [1, 2, 3, 4]);
        assert_eq!(plan_expiry(&snapshots, &main, &options(10_000, 2)), [1, 2, 3]);
        // Younger than the cut: stays whatever retain_last says.
        assert_eq!(plan_expiry(&snapshots, &main, &options(3_000, 1)), [1, 2]);
        // The head always stays, even asked to keep none.
        assert_eq!(plan_expiry(&snapshots, &main, &options(10_000, 0)), [1, 2, 3, 4]);
    }

    #[test]
    fn tags_and_branches_keep_what_they_point_at() {
        let mut snapshots = history(5);
        // A branch off 2, two snapshots long.
        snapshots.push(SnapshotView {
            id: 6,
            parent: Some(2),
            timestamp_ms: 2500,
        });
        snapshots.push(SnapshotView {
            id: 7,
            parent: Some(6),
            timestamp_ms: 2600,
        });
        let refs = [
            branch("main", 5),
            branch("audit", 7),
            RefView {
                name: "v1".into(),
                snapshot_id: 1,
                is_branch: false,
            },
        ];
        assert_eq!(plan_expiry(&snapshots, &refs, &options(10_000, 1)), [2, 6, 3, 4]);
        assert_eq!(plan_expiry(&snapshots, &refs, &options(10_000, 2)), [2, 3]);
    }

    #[test]
    fn snapshots_no_ref_reaches_go_when_old() {
        // 3 was rolled back: main is at 2, and 3 hangs off it.
        let snapshots = history(3);
        let refs = [branch("main", 2)];
        assert_eq!(plan_expiry(&snapshots, &refs, &options(10_000, 1)), [1, 3]);
        assert_eq!(plan_expiry(&snapshots, &refs, &options(2_500, 1)), [1]);
    }
}
