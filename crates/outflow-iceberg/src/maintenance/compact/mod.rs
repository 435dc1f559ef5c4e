//! [`compact`] rewrites a table's small data files into files of the target size, after
//! Iceberg's `RewriteDataFiles` with its bin-packing strategy.
//!
//! The plan ([`plan_compaction`], pure) takes the live data files of the current snapshot
//! that are smaller than the minimum size, groups them by partition spec and partition
//! value, and packs each partition's files into groups of at most the group size; a group
//! is rewritten when it has enough files, or holds more than one file and at least a target
//! file's worth of bytes. Each group is read with the delete files that apply to it applied
//! (the scan planner says which): position deletes by iceberg-rust's reader, equality
//! deletes by Outflow through a set of keys (`equality`), and written again as files of the
//! target size in the same partition.
//!
//! All groups go into one `replace` snapshot: the rewritten files are marked deleted in the
//! manifests that held them, the new ones added. Writers may commit meanwhile. At commit
//! the table is read again: a group one of whose files is no longer live is given up (its
//! new files deleted), and the rest is committed on top of the new snapshot. A delete file
//! committed meanwhile gives up every group, since the rewritten rows would hide it. The
//! snapshot carries a commit id, so an attempt whose answer was lost is recognized.
//!
//! The parts: [`plan`] (pure: which files go together), `rewrite` (reading and writing a
//! group), `equality` (applying equality deletes) and `commit` (the replace snapshot on top
//! of the table as it is at commit).

mod commit;
mod equality;
pub mod plan;
mod rewrite;

pub use plan::{CompactSettings, FileInfo, PlannedGroup, commit_parts, plan_compaction};

use std::collections::HashMap;

use iceberg::scan::FileScanTask;
use iceberg::spec::{FormatVersion, Struct};
use iceberg::table::Table;
use outflow_core::{Error, ErrorKind, Result, RetryPolicy};
use serde::Serialize;

use crate::client::IcebergCatalog;
use crate::commit::find_commit;
use crate::options::DEFAULT_TARGET_FILE_SIZE;
use crate::schema::{parse_table_ident, table_name};
use commit::{WrittenGroup, commit_once};
use plan::matches_partitions;
use rewrite::{rewrite_group, scan_tasks, sort_columns};

/// The table property of the data files' target size, read when no target is given.
pub const TARGET_FILE_SIZE_PROPERTY: &str = "write.target-file-size-bytes";

/// What [`compact`] does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactOptions {
    /// The size of the files written; default: the table's `write.target-file-size-bytes`,
    /// else 512 MiB.
    pub target_file_size_bytes: Option<u64>,
    /// Files smaller than this are rewritten; default: three quarters of the target.
    pub min_file_size_bytes: Option<u64>,
    /// A group of fewer files is left alone unless it holds a target file's worth of bytes.
    pub min_input_files: usize,
    /// At most this many input bytes per group.
    pub max_group_bytes: u64,
    /// Only partitions whose values include every `field=value` here (values as in the
    /// partition's path, such as `day=2026-11-30`).
    pub partitions: Vec<(String, String)>,
    /// Sort each group's rows by the table's sort order (identity fields of top-level
    /// columns); a group is then held in memory whole, so bound it with `max_group_bytes`.
    pub sort: bool,
    /// Files with at least this many delete files applying to them are rewritten whatever
    /// their size (Iceberg's `delete-file-threshold`), so that the deletes of a table taking
    /// changes are applied to its data; `None`: only small files are.
    pub delete_file_threshold: Option<usize>,
    /// Partial progress: commit after every part of at most this many input bytes (one
    /// snapshot each), so a long compaction keeps what it did; `None`: one snapshot.
    pub max_commit_bytes: Option<u64>,
    /// Plan and report, write and commit nothing.
    pub dry_run: bool,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            target_file_size_bytes: None,
            min_file_size_bytes: None,
            min_input_files: 5,
            max_group_bytes: 100 * 1024 * 1024 * 1024,
            partitions: Vec::new(),
            sort: false,
            delete_file_threshold: None,
            max_commit_bytes: None,
            dry_run: false,
        }
    }
}

/// What [`compact`] did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CompactReport {
    /// The table.
    pub table: String,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// Live data files before.
    pub data_files_before: usize,
    /// Live data files after (in a dry run: at most this many).
    pub data_files_after: usize,
    /// The groups, in plan order.
    pub groups: Vec<GroupReport>,
    /// The new snapshot (the last, with partial progress); none in a dry run or when
    /// nothing was rewritten.
    pub snapshot_id: Option<i64>,
    /// Every snapshot committed, in order: one, or one per part with partial progress.
    pub snapshot_ids: Vec<i64>,
}

/// One group of a [`CompactReport`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GroupReport {
    /// The partition spec.
    pub spec_id: i32,
    /// The partition, as a path.
    pub partition: String,
    /// Files rewritten.
    pub input_files: usize,
    /// Their bytes.
    pub input_bytes: u64,
    /// Their rows, as the manifests count them (before deletes).
    pub input_records: u64,
    /// The delete files applying to them, counted once per file they apply to.
    pub delete_files: usize,
    /// Files written (in a dry run: the estimate).
    pub output_files: usize,
    /// Rows written, after deletes; none in a dry run.
    pub output_records: Option<u64>,
    /// Why the group was not committed, when it was not.
    pub given_up: Option<String>,
}

/// Rewrites `table`'s small data files into files of the target size; see the module docs.
/// The same as [`Compaction::plan`], [`Compaction::rewrite`] and [`Rewritten::commit`] in
/// turn.
pub async fn compact(
    catalog: &IcebergCatalog,
    table: &str,
    options: &CompactOptions,
    retry: &RetryPolicy,
) -> Result<CompactReport> {
    let planned = Compaction::plan(catalog, table, options).await?;
    if options.dry_run || planned.groups.is_empty() {
        return Ok(planned.report);
    }
    let Some(max_bytes) = options.max_commit_bytes else {
        return planned.rewrite().await?.commit(catalog, retry).await;
    };
    // Partial progress: one snapshot per part, each kept whatever happens to the next.
    let mut report = CompactReport {
        groups: Vec::new(),
        ..planned.report.clone()
    };
    for part in planned.split(max_bytes) {
        let done = match part.rewrite().await {
            Ok(rewritten) => rewritten.commit(catalog, retry).await,
            Err(e) => Err(e),
        };
        let done = match done {
            Ok(done) => done,
            Err(e) if report.snapshot_ids.is_empty() => return Err(e),
            Err(e) => {
                let ids: Vec<String> = report.snapshot_ids.iter().map(i64::to_string).collect();
                return Err(e.with_context("committed before this failure", ids.join(", ")));
            }
        };
        report.groups.extend(done.groups);
        report.snapshot_ids.extend(done.snapshot_ids);
        report.snapshot_id = done.snapshot_id.or(report.snapshot_id);
        report.data_files_after = done.data_files_after;
    }
    Ok(report)
}

/// A compaction planned on the table's current snapshot, nothing written yet.
pub struct Compaction {
    start: Table,
    planned_on: i64,
    live: Vec<LiveFile>,
    /// The scan's task of each live file, by path: it carries the deletes to apply.
    tasks: HashMap<String, FileScanTask>,
    groups: Vec<PlannedGroup>,
    settings: CompactSettings,
    sort: bool,
    report: CompactReport,
}

impl Compaction {
    /// Plans the compaction of `table` (`namespace.name`) on its current snapshot.
    pub async fn plan(catalog: &IcebergCatalog, table: &str, options: &CompactOptions) -> Result<Compaction> {
        let ident = parse_table_ident(table)?;
        let name = table_name(&ident);
        let start = catalog.require_table(&ident).await?;
        let mut report = CompactReport {
            table: name.clone(),
            dry_run: options.dry_run,
            ..Default::default()
        };
        let metadata = start.metadata();
        if metadata.format_version() == FormatVersion::V3 {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("table {name} is format v3; Outflow writes v1 and v2 tables"),
            ));
        }
        let settings = settings_of(&start, options)?;
        if options.sort {
            sort_columns(&start)?;
        }
        let planned_on = metadata.current_snapshot().map_or(-1, |s| s.snapshot_id());
        let mut live = live_data_files(&start).await?;
        let tasks = if live.is_empty() {
            HashMap::new()
        } else {
            scan_tasks(&start, planned_on).await?
        };
        for file in &mut live {
            file.info.deletes = tasks.get(&file.info.path).map_or(0, |t| t.deletes.len());
        }
        report.data_files_before = live.len();
        let infos: Vec<FileInfo> = live.iter().map(|f| f.info.clone()).collect();
        let groups: Vec<PlannedGroup> = plan_compaction(&infos, &settings)
            .into_iter()
            .filter(|g| matches_partitions(&g.partition, &options.partitions))
            .collect();
        report.groups = groups
            .iter()
            .map(|g| GroupReport {
                spec_id: g.spec_id,
                partition: g.partition.clone(),
                input_files: g.files.len(),
                input_bytes: g.bytes,
                input_records: g.files.iter().map(|&i| infos[i].records).sum(),
                delete_files: g.files.iter().map(|&i| infos[i].deletes).sum(),
                output_files: g.bytes.div_ceil(settings.target_bytes).max(1) as usize,
                output_records: None,
                given_up: None,
            })
            .collect();
        let rewritten: usize = groups.iter().map(|g| g.files.len()).sum();
        let estimated: usize = report.groups.iter().map(|g| g.output_files).sum();
        report.data_files_after = live.len() - rewritten + estimated;
        // Only the tasks of the files to rewrite are kept.
        let wanted: std::collections::HashSet<&str> = groups
            .iter()
            .flat_map(|g| g.files.iter().map(|&i| live[i].info.path.as_str()))
            .collect();
        let tasks = tasks
            .into_iter()
            .filter(|(path, _)| wanted.contains(path.as_str()))
            .collect();
        Ok(Compaction {
            start,
            planned_on,
            live,
            tasks,
            groups,
            settings,
            sort: options.sort,
            report,
        })
    }

    /// What the plan would do (the report of a dry run).
    pub fn report(&self) -> &CompactReport {
        &self.report
    }

    /// The plan in parts of at most `max_bytes` input bytes each (a group larger than that
    /// is a part of its own), to rewrite and commit one after the other.
    pub fn split(self, max_bytes: u64) -> Vec<Compaction> {
        let sizes: Vec<u64> = self.groups.iter().map(|g| g.bytes).collect();
        commit_parts(&sizes, max_bytes)
            .into_iter()
            .map(|part| {
                let groups = self.groups[part.clone()].to_vec();
                let tasks = groups
                    .iter()
                    .flat_map(|g| g.files.iter())
                    .filter_map(|&i| {
                        let path = &self.live[i].info.path;
                        self.tasks.get(path).map(|t| (path.clone(), t.clone()))
                    })
                    .collect();
                Compaction {
                    start: self.start.clone(),
                    planned_on: self.planned_on,
                    live: self.live.clone(),
                    tasks,
                    groups,
                    settings: self.settings,
                    sort: self.sort,
                    report: CompactReport {
                        groups: self.report.groups[part].to_vec(),
                        ..self.report.clone()
                    },
                }
            })
            .collect()
    }

    /// Reads every group and writes its rows again, committing nothing. On an error the
    /// files written so far are deleted.
    pub async fn rewrite(self) -> Result<Rewritten> {
        let Compaction {
            start,
            planned_on,
            live,
            mut tasks,
            groups,
            settings,
            sort,
            mut report,
        } = self;
        let name = table_name(start.identifier());
        let attempt = uuid::Uuid::new_v4();
        let names = crate::writer::FileNames::new(&format!("compact-{attempt}"));
        let mut written: Vec<WrittenGroup> = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            let inputs: Vec<&LiveFile> = group.files.iter().map(|&i| &live[i]).collect();
            let group_tasks: Result<Vec<FileScanTask>> = inputs
                .iter()
                .map(|f| {
                    tasks.remove(&f.info.path).ok_or_else(|| {
                        Error::internal(format!("{name}: the scan did not plan {}", f.info.path))
                    })
                })
                .collect();
            let files =
                match rewrite_group(&start, group, &inputs, group_tasks, &settings, sort, &names).await {
                    Ok(files) => files,
                    Err(e) => {
                        let paths = written.iter().flat_map(|w| w.files.iter().map(|f| f.file_path()));
                        delete_files(start.file_io(), paths).await;
                        return Err(e);
                    }
                };
            report.groups[g].output_files = files.len();
            report.groups[g].output_records = Some(files.iter().map(|f| f.record_count()).sum());
            written.push(WrittenGroup {
                index: g,
                spec_id: group.spec_id,
                inputs: inputs.iter().map(|f| f.info.path.clone()).collect(),
                files,
            });
        }
        Ok(Rewritten {
            start,
            planned_on,
            written,
            commit_id: format!("compact:{attempt}"),
            report,
        })
    }
}

/// A compaction whose groups are written, waiting for its commit.
pub struct Rewritten {
    start: Table,
    planned_on: i64,
    written: Vec<WrittenGroup>,
    commit_id: String,
    report: CompactReport,
}

impl Rewritten {
    /// What was written so far (no snapshot yet).
    pub fn report(&self) -> &CompactReport {
        &self.report
    }

    /// The data files written, not yet in the table.
    pub fn written_files(&self) -> Vec<String> {
        self.written
            .iter()
            .flat_map(|w| w.files.iter().map(|f| f.file_path().to_string()))
            .collect()
    }

    /// Commits the groups on top of the table as it is now: a group whose files another
    /// commit removed is given up (its files deleted), the rest goes into one snapshot. A
    /// failed commit deletes the new files, unless the table may hold them (an answer lost
    /// after the catalog committed): then the error names them.
    pub async fn commit(self, catalog: &IcebergCatalog, retry: &RetryPolicy) -> Result<CompactReport> {
        let Rewritten {
            start,
            planned_on,
            written,
            commit_id,
            mut report,
        } = self;
        let ident = start.identifier().clone();
        let name = table_name(&ident);
        let io = start.file_io();
        let what = &format!("committing the compaction of {name}");
        let outcome = retry
            .retry_within(what, retry.deadline(), |limit| {
                catalog.attempt_within(
                    what,
                    limit,
                    commit_once(catalog, &ident, planned_on, &written, &commit_id),
                )
            })
            .await;
        let committed = match outcome {
            Ok(committed) => committed,
            Err(e) => {
                let held = match catalog.require_table(&ident).await {
                    Ok(table) => find_commit(&table, &commit_id).is_some(),
                    Err(_) => true,
                };
                let paths: Vec<String> = written
                    .iter()
                    .flat_map(|w| w.files.iter().map(|f| f.file_path().to_string()))
                    .collect();
                if held {
                    return Err(e.with_context("data files written", paths.join(", ")));
                }
                delete_files(io, paths.iter().map(String::as_str)).await;
                return Err(e);
            }
        };
        let mut after = committed.live_at_commit;
        for w in &written {
            match committed.given_up.get(&w.index) {
                Some(reason) => {
                    report.groups[w.index].given_up = Some(reason.clone());
                    delete_files(io, w.files.iter().map(|f| f.file_path())).await;
                }
                None => after = after - w.inputs.len() + w.files.len(),
            }
        }
        report.data_files_after = after;
        report.snapshot_id = committed.snapshot_id;
        report.snapshot_ids = committed.snapshot_id.into_iter().collect();
        tracing::info!(table = %name, snapshot_id = ?committed.snapshot_id, groups = written.len(), "compacted");
        Ok(report)
    }

    /// Deletes the files written, committing nothing.
    pub async fn abort(self) {
        let paths = self.written_files();
        delete_files(self.start.file_io(), paths.iter().map(String::as_str)).await;
    }
}

fn settings_of(table: &Table, options: &CompactOptions) -> Result<CompactSettings> {
    let target_bytes = match options.target_file_size_bytes {
        Some(bytes) => bytes,
        None => match table.metadata().properties().get(TARGET_FILE_SIZE_PROPERTY) {
            Some(value) => value.parse().map_err(|_| {
                Error::invalid_config(
                    TARGET_FILE_SIZE_PROPERTY,
                    format!("'{value}' is not a size in bytes"),
                )
            })?,
            None => DEFAULT_TARGET_FILE_SIZE,
        },
    };
    if target_bytes == 0 {
        return Err(Error::invalid_config(
            "target_file_size_bytes",
            "must be more than 0",
        ));
    }
    if options.max_group_bytes == 0 {
        return Err(Error::invalid_config("max_group_bytes", "must be more than 0"));
    }
    Ok(CompactSettings {
        target_bytes,
        min_file_bytes: options.min_file_size_bytes.unwrap_or(target_bytes / 4 * 3),
        min_input_files: options.min_input_files,
        max_group_bytes: options.max_group_bytes,
        delete_file_threshold: options.delete_file_threshold,
    })
}

/// A live data file of the current snapshot and what its manifest says of it.
#[derive(Clone)]
struct LiveFile {
    pub(super) info: FileInfo,
    pub(super) partition: Struct,
}

/// The live data files of `table`'s current snapshot. Files of a spec that no longer binds
/// to the current schema are left out: they cannot be written again.
async fn live_data_files(table: &Table) -> Result<Vec<LiveFile>> {
    let metadata = table.metadata();
    let schema = metadata.current_schema();
    let mut out = Vec::new();
    for (spec_id, file) in crate::commit::live_data_files(table).await? {
        let Some(spec) = metadata.partition_spec_by_id(spec_id) else {
            continue;
        };
        if spec.partition_type(schema).is_err() {
            continue;
        }
        out.push(LiveFile {
            info: FileInfo {
                path: file.file_path().to_string(),
                spec_id,
                partition: spec.partition_to_path(file.partition(), schema.clone()),
                bytes: file.file_size_in_bytes(),
                records: file.record_count(),
                deletes: 0,
            },
            partition: file.partition().clone(),
        });
    }
    Ok(out)
}

/// Deletes `paths`, best effort: what cannot be deleted is an orphan for `remove-orphans`.
pub(super) async fn delete_files<'a>(io: &iceberg::io::FileIO, paths: impl IntoIterator<Item = &'a str>) {
    for path in paths {
        if let Err(e) = io.delete(path).await {
            tracing::warn!(path, error = %e, "could not delete a file of a compaction that was not committed");
        }
    }
}
