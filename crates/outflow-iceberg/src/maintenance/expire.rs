//! [`expire_snapshots`]: removes old snapshots from a table's history, then deletes the
//! manifest lists, manifests, data and delete files that only they referenced.
//!
//! Which snapshots stay, after Iceberg's `ExpireSnapshots` (`RemoveSnapshots` in Java):
//! - A tag or a branch other than `main` whose head is older than its `max-ref-age-ms`
//!   (else the table's `history.expire.max-ref-age-ms`; by default refs never expire) is
//!   removed first.
//! - The head of every remaining branch and tag stays (the current snapshot among them).
//! - Along each remaining branch's history, snapshots stay while fewer than its
//!   `min-snapshots-to-keep` are kept, or while they are younger than its
//!   `max-snapshot-age-ms`; the branch's own values come first, then the options', then the
//!   table's `history.expire.min-snapshots-to-keep` and `history.expire.max-snapshot-age-ms`
//!   (1 and 5 days by default). The first snapshot past both ends the branch's run.
//! - A snapshot no remaining ref reaches stays while younger than the table-wide age.
//!
//! The others go in one metadata commit (`RemoveSnapshotRef` for the expired refs, then
//! `RemoveSnapshots`) that requires every branch and expired ref to be where it was read,
//! so a writer committing meanwhile makes the plan again.
//!
//! Files are deleted after the commit, and only files no remaining snapshot can reach: a
//! manifest goes when no remaining manifest list names it, a data or delete file when no
//! remaining manifest holds it as added or existing (a file a remaining manifest marks
//! deleted is gone from every remaining snapshot). A file that cannot be deleted is listed
//! in the report, not an error: the commit already happened, and the file is an orphan
//! that `remove-orphans` or a rerun of the deletion can take.

use std::collections::{BTreeMap, HashMap, HashSet};

use iceberg::TableIdent;
use iceberg::spec::{MAIN_BRANCH, SnapshotReference, SnapshotRetention, TableMetadata};
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};
use outflow_core::{Error, Result, RetryPolicy};
use serde::Serialize;

use super::manifests_of;
use crate::client::{IcebergCatalog, IcebergResultExt};
use crate::schema::{parse_table_ident, table_name};

/// Iceberg's default for `history.expire.max-snapshot-age-ms`: 5 days.
pub const DEFAULT_MAX_AGE_MS: i64 = 5 * 24 * 3600 * 1000;
/// The table property of the age past which a branch's snapshots may go.
pub const MAX_SNAPSHOT_AGE_MS: &str = "history.expire.max-snapshot-age-ms";
/// The table property of how many snapshots of each branch always stay.
pub const MIN_SNAPSHOTS_TO_KEEP: &str = "history.expire.min-snapshots-to-keep";
/// The table property of the age past which a tag or branch other than `main` goes.
pub const MAX_REF_AGE_MS: &str = "history.expire.max-ref-age-ms";

/// What [`expire_snapshots`] removes. What is left open comes from the table's properties,
/// then Iceberg's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpireSnapshotsOptions {
    /// The time ages are measured from, in milliseconds since the epoch.
    pub now_ms: i64,
    /// Snapshots committed before this time may go; default: `now_ms` less the table's
    /// `history.expire.max-snapshot-age-ms` (5 days).
    pub older_than_ms: Option<i64>,
    /// The most recent snapshots of each branch's history that stay whatever their age;
    /// default: the table's `history.expire.min-snapshots-to-keep` (1). A branch's head
    /// always stays.
    pub retain_last: Option<usize>,
    /// Plan and report, commit and delete nothing.
    pub dry_run: bool,
}

impl ExpireSnapshotsOptions {
    /// The table's own rules (or Iceberg's defaults), ages measured from `now_ms`.
    pub fn at(now_ms: i64) -> Self {
        ExpireSnapshotsOptions {
            now_ms,
            older_than_ms: None,
            retain_last: None,
            dry_run: false,
        }
    }
}

/// The table-wide rules of an expiry, every one given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpiryRules {
    /// See [`ExpireSnapshotsOptions::now_ms`].
    pub now_ms: i64,
    /// Snapshots before this may go, unless their branch says otherwise.
    pub older_than_ms: i64,
    /// Snapshots of each branch that stay, unless the branch says otherwise.
    pub retain_last: usize,
    /// Refs (but `main`) whose head is older than this go; `None`: never.
    pub max_ref_age_ms: Option<i64>,
}

impl ExpiryRules {
    /// The rules of `options`, completed from the table's `properties`.
    pub fn of(options: &ExpireSnapshotsOptions, properties: &HashMap<String, String>) -> Result<ExpiryRules> {
        let number = |key: &str| -> Result<Option<i64>> {
            properties
                .get(key)
                .map(|v| {
                    v.trim()
                        .parse::<i64>()
                        .ok()
                        .filter(|n| *n >= 0)
                        .ok_or_else(|| Error::invalid_config(key, format!("'{v}' is not a whole number")))
                })
                .transpose()
        };
        let older_than_ms = match options.older_than_ms {
            Some(at) => at,
            None => options.now_ms - number(MAX_SNAPSHOT_AGE_MS)?.unwrap_or(DEFAULT_MAX_AGE_MS),
        };
        let retain_last = match options.retain_last {
            Some(n) => n,
            None => number(MIN_SNAPSHOTS_TO_KEEP)?.unwrap_or(1) as usize,
        };
        Ok(ExpiryRules {
            now_ms: options.now_ms,
            older_than_ms,
            retain_last,
            max_ref_age_ms: number(MAX_REF_AGE_MS)?,
        })
    }
}

/// What [`expire_snapshots`] did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExpireSnapshotsReport {
    /// The table.
    pub table: String,
    /// The snapshots removed from the history, oldest first.
    pub expired: Vec<i64>,
    /// The tags and branches removed for their age.
    pub expired_refs: Vec<String>,
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

/// A branch or tag: its name, head, kind and retention.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefView {
    /// The ref's name (`main`, a tag's name...).
    pub name: String,
    /// The snapshot it points at.
    pub snapshot_id: i64,
    /// A branch (its history counts for `retain_last`), or a tag (only its snapshot).
    pub is_branch: bool,
    /// Its own `max-ref-age-ms`.
    pub max_ref_age_ms: Option<i64>,
    /// A branch's own `min-snapshots-to-keep`.
    pub min_snapshots_to_keep: Option<usize>,
    /// A branch's own `max-snapshot-age-ms`.
    pub max_snapshot_age_ms: Option<i64>,
}

/// What an expiry removes: refs first, then snapshots (oldest first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpiryPlan {
    /// The refs that go for their age.
    pub refs: Vec<String>,
    /// The snapshots that go.
    pub snapshots: Vec<i64>,
}

/// What to expire: see the module docs for the rules. Pure, so they are tested without a
/// table.
pub fn plan_expiry(snapshots: &[SnapshotView], refs: &[RefView], rules: &ExpiryRules) -> ExpiryPlan {
    let by_id: BTreeMap<i64, &SnapshotView> = snapshots.iter().map(|s| (s.id, s)).collect();
    let history = |head: i64| {
        std::iter::successors(by_id.get(&head).copied(), |s| {
            s.parent.and_then(|p| by_id.get(&p).copied())
        })
    };
    let mut plan = ExpiryPlan::default();
    let mut remaining = Vec::new();
    for r in refs {
        let max_age = r.max_ref_age_ms.or(rules.max_ref_age_ms);
        let head_time = by_id.get(&r.snapshot_id).map(|s| s.timestamp_ms);
        match (max_age, head_time) {
            (Some(age), Some(at)) if r.name != MAIN_BRANCH && rules.now_ms - at > age => {
                plan.refs.push(r.name.clone());
            }
            _ => remaining.push(r),
        }
    }
    let mut keep: HashSet<i64> = HashSet::new();
    let mut reachable: HashSet<i64> = HashSet::new();
    for r in &remaining {
        keep.insert(r.snapshot_id);
        reachable.insert(r.snapshot_id);
        if !r.is_branch {
            continue;
        }
        let min_keep = r.min_snapshots_to_keep.unwrap_or(rules.retain_last).max(1);
        let older_than = r
            .max_snapshot_age_ms
            .map_or(rules.older_than_ms, |age| rules.now_ms - age);
        let mut kept = 0;
        let mut cut = false;
        for s in history(r.snapshot_id) {
            reachable.insert(s.id);
            if !cut && (kept < min_keep || s.timestamp_ms >= older_than) {
                keep.insert(s.id);
                kept += 1;
            } else {
                cut = true;
            }
        }
    }
    let mut expire: Vec<&SnapshotView> = snapshots
        .iter()
        .filter(|s| {
            let unreferenced_and_young = !reachable.contains(&s.id) && s.timestamp_ms >= rules.older_than_ms;
            !keep.contains(&s.id) && !unreferenced_and_young
        })
        .collect();
    expire.sort_by_key(|s| (s.timestamp_ms, s.id));
    plan.snapshots = expire.into_iter().map(|s| s.id).collect();
    plan
}

/// Expires `table`'s old snapshots and deletes what only they referenced; see the module
/// docs.
pub async fn expire_snapshots(
    catalog: &IcebergCatalog,
    table: &str,
    options: &ExpireSnapshotsOptions,
    retry: &RetryPolicy,
) -> Result<ExpireSnapshotsReport> {
    if options.retain_last == Some(0) {
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
    let rules =
        ExpiryRules::of(options, metadata.properties()).map_err(|e| e.with_context("table", name.clone()))?;
    let plan = plan_expiry(&snapshots, &refs, &rules);
    let expire = plan.snapshots.clone();
    let mut report = ExpireSnapshotsReport {
        table: name.clone(),
        kept: snapshots.len() - expire.len(),
        expired_refs: plan.refs.clone(),
        dry_run: options.dry_run,
        ..Default::default()
    };
    if expire.is_empty() && plan.refs.is_empty() {
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
            .filter(|r| r.is_branch || plan.refs.contains(&r.name))
            .map(|r| TableRequirement::RefSnapshotIdMatch {
                r#ref: r.name.clone(),
                snapshot_id: Some(r.snapshot_id),
            }),
    );
    let mut updates: Vec<TableUpdate> = plan
        .refs
        .iter()
        .map(|name| TableUpdate::RemoveSnapshotRef {
            ref_name: name.clone(),
        })
        .collect();
    if !expire.is_empty() {
        updates.push(TableUpdate::RemoveSnapshots {
            snapshot_ids: expire.clone(),
        });
    }
    catalog.commit(&table, requirements, updates).await?;
    tracing::info!(table = %name, expired = expire.len(), refs = plan.refs.len(), "expired snapshots");
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
            let mut view = RefView {
                name: name.clone(),
                snapshot_id: r.snapshot_id,
                is_branch: r.is_branch(),
                ..RefView::default()
            };
            match r.retention {
                SnapshotRetention::Branch {
                    min_snapshots_to_keep,
                    max_snapshot_age_ms,
                    max_ref_age_ms,
                } => {
                    view.min_snapshots_to_keep = min_snapshots_to_keep.map(|n| n.max(0) as usize);
                    view.max_snapshot_age_ms = max_snapshot_age_ms;
                    view.max_ref_age_ms = max_ref_age_ms;
                }
                SnapshotRetention::Tag { max_ref_age_ms } => view.max_ref_age_ms = max_ref_age_ms,
            }
            Ok(view)
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
            ..RefView::default()
        }
    }

    fn tag(name: &str, id: i64) -> RefView {
        RefView {
            is_branch: false,
            ..branch(name, id)
        }
    }

    fn options(older_than_ms: i64, retain_last: usize) -> ExpiryRules {
        ExpiryRules {
            now_ms: 100_000,
            older_than_ms,
            retain_last,
            max_ref_age_ms: None,
        }
    }

    fn plan(snapshots: &[SnapshotView], refs: &[RefView], rules: &ExpiryRules) -> Vec<i64> {
        plan_expiry(snapshots, refs, rules).snapshots
    }

    #[test]
    fn old_snapshots_go_and_the_last_ones_stay() {
        let snapshots = history(5);
        let main = [branch("main", 5)];
        assert_eq!(plan(&snapshots, &main, &options(10_000, 1)), [1, 2, 3, 4]);
        assert_eq!(plan(&snapshots, &main, &options(10_000, 2)), [1, 2, 3]);
        // Younger than the cut: stays whatever retain_last says.
        assert_eq!(plan(&snapshots, &main, &options(3_000, 1)), [1, 2]);
        // The head always stays, even asked to keep none.
        assert_eq!(plan(&snapshots, &main, &options(10_000, 0)), [1, 2, 3, 4]);
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
        let refs = [branch("main", 5), branch("audit", 7), tag("v1", 1)];
        assert_eq!(plan(&snapshots, &refs, &options(10_000, 1)), [2, 6, 3, 4]);
        assert_eq!(plan(&snapshots, &refs, &options(10_000, 2)), [2, 3]);
    }

    #[test]
    fn snapshots_no_ref_reaches_go_when_old() {
        // 3 was rolled back: main is at 2, and 3 hangs off it.
        let snapshots = history(3);
        let refs = [branch("main", 2)];
        assert_eq!(plan(&snapshots, &refs, &options(10_000, 1)), [1, 3]);
        assert_eq!(plan(&snapshots, &refs, &options(2_500, 1)), [1]);
    }

    #[test]
    fn refs_past_their_age_go_and_take_their_snapshots_with_them() {
        let snapshots = history(5);
        let old_tag = RefView {
            max_ref_age_ms: Some(50_000),
            ..tag("v1", 1)
        };
        // now 100 s; snapshot 1 is from 1 s: 99 s old, past the tag's 50 s.
        let expired = plan_expiry(
            &snapshots,
            &[branch("main", 5), old_tag.clone()],
            &options(10_000, 1),
        );
        assert_eq!(expired.refs, ["v1"]);
        assert_eq!(expired.snapshots, [1, 2, 3, 4]);
        // The table-wide age applies to refs without one; main never goes.
        let rules = ExpiryRules {
            max_ref_age_ms: Some(1),
            ..options(10_000, 1)
        };
        let expired = plan_expiry(&snapshots, &[branch("main", 5), tag("v2", 3)], &rules);
        assert_eq!(
            (expired.refs, expired.snapshots),
            (vec!["v2".to_string()], vec![1, 2, 3, 4])
        );
        // A young enough tag stays.
        let young = RefView {
            max_ref_age_ms: Some(1_000_000),
            ..old_tag
        };
        assert_eq!(
            plan_expiry(&snapshots, &[branch("main", 5), young], &options(10_000, 1)).refs,
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_branch_keeps_what_its_own_retention_says() {
        let snapshots = history(5);
        let keeps_three = RefView {
            min_snapshots_to_keep: Some(3),
            ..branch("main", 5)
        };
        assert_eq!(plan(&snapshots, &[keeps_three], &options(10_000, 1)), [1, 2]);
        // Its own age: snapshots younger than 97 s before now (3, 4, 5) stay.
        let by_age = RefView {
            max_snapshot_age_ms: Some(97_000),
            ..branch("main", 5)
        };
        assert_eq!(plan(&snapshots, &[by_age], &options(10_000, 1)), [1, 2]);
    }

    #[test]
    fn rules_come_from_the_options_then_the_table() {
        let table = HashMap::from([
            (MAX_SNAPSHOT_AGE_MS.to_string(), "1000".to_string()),
            (MIN_SNAPSHOTS_TO_KEEP.to_string(), "4".to_string()),
            (MAX_REF_AGE_MS.to_string(), "86400000".to_string()),
        ]);
        let open = ExpireSnapshotsOptions::at(50_000);
        assert_eq!(
            ExpiryRules::of(&open, &table).unwrap(),
            ExpiryRules {
                now_ms: 50_000,
                older_than_ms: 49_000,
                retain_last: 4,
                max_ref_age_ms: Some(86_400_000),
            }
        );
        let given = ExpireSnapshotsOptions {
            older_than_ms: Some(10),
            retain_last: Some(2),
            ..open.clone()
        };
        let rules = ExpiryRules::of(&given, &table).unwrap();
        assert_eq!((rules.older_than_ms, rules.retain_last), (10, 2));
        let defaults = ExpiryRules::of(&open, &HashMap::new()).unwrap();
        assert_eq!(
            (
                defaults.older_than_ms,
                defaults.retain_last,
                defaults.max_ref_age_ms
            ),
            (50_000 - DEFAULT_MAX_AGE_MS, 1, None)
        );
        let bad = HashMap::from([(MIN_SNAPSHOTS_TO_KEEP.to_string(), "-1".to_string())]);
        let err = ExpiryRules::of(&open, &bad).unwrap_err();
        assert!(err.to_string().contains(MIN_SNAPSHOTS_TO_KEEP), "{err}");
    }
}
