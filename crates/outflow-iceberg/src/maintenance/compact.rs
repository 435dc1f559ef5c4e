//! [`compact`] rewrites a table's small data files into files of the target size, after
//! Iceberg's `RewriteDataFiles` with its bin-packing strategy.
//!
//! The plan ([`plan_compaction`], pure) takes the live data files of the current snapshot
//! that are smaller than the minimum size, groups them by partition spec and partition
//! value, and packs each partition's files into groups of at most the group size; a group
//! is rewritten when it has enough files, or holds more than one file and at least a target
//! file's worth of bytes. Each group is read through iceberg-rust's reader, so the delete
//! files that apply to it (position and equality deletes) are applied, and written again as
//! files of the target size in the same partition.
//!
//! All groups go into one `replace` snapshot: the rewritten files are marked deleted in the
//! manifests that held them, the new ones added. Writers may commit meanwhile. At commit
//! the table is read again: a group one of whose files is no longer live is given up (its
//! new files deleted), and the rest is committed on top of the new snapshot. A delete file
//! committed meanwhile gives up every group, since the rewritten rows would hide it. The
//! snapshot carries a commit id, so an attempt whose answer was lost is recognized.

use std::collections::{BTreeMap, HashMap, HashSet};

use arrow_array::RecordBatch;
use arrow_ord::sort::{SortColumn, lexsort_to_indices};
use arrow_schema::{ArrowError, SortOptions};
use futures::{StreamExt, TryStreamExt};
use iceberg::Runtime;
use iceberg::TableIdent;
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::scan::FileScanTask;
use iceberg::spec::{
    DataFile, FormatVersion, ManifestContentType, ManifestFile, ManifestWriterBuilder, NullOrder, Operation,
    PartitionKey, PartitionSpecRef, SchemaRef, SnapshotSummaryCollector, SortDirection, Struct, Transform,
};
use iceberg::table::Table;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use outflow_core::{Error, ErrorKind, Result, RetryPolicy};
use serde::Serialize;

use crate::client::{IcebergCatalog, IcebergResultExt};
use crate::commit::{
    COMMIT_ID_KEY, NewSnapshot, current_manifests, find_commit, finish_snapshot, main_history,
    new_snapshot_id,
};
use crate::manifest::AppendManifest;
use crate::options::{DEFAULT_COMPRESSION_LEVEL, DEFAULT_TARGET_FILE_SIZE};
use crate::schema::{parse_table_ident, table_name};
use crate::writer::data_files;

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
            max_commit_bytes: None,
            dry_run: false,
        }
    }
}

/// The sizes a plan is made with, all given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactSettings {
    /// The size of the files written.
    pub target_bytes: u64,
    /// Files smaller than this are candidates.
    pub min_file_bytes: u64,
    /// See [`CompactOptions::min_input_files`].
    pub min_input_files: usize,
    /// See [`CompactOptions::max_group_bytes`].
    pub max_group_bytes: u64,
}

/// A live data file, as the plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileInfo {
    /// Its path.
    pub path: String,
    /// The partition spec it was written for.
    pub spec_id: i32,
    /// Its partition, as a path (`region=eu/day=2026-11-30`; empty when unpartitioned).
    pub partition: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its rows.
    pub records: u64,
}

/// Files to rewrite together: all of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedGroup {
    /// The partition spec.
    pub spec_id: i32,
    /// The partition, as a path.
    pub partition: String,
    /// Indexes of the files, into the plan's input.
    pub files: Vec<usize>,
    /// Their bytes.
    pub bytes: u64,
}

/// Groups `files` for rewriting; see the module docs. Files are packed largest first, so a
/// partition's groups come out even.
pub fn plan_compaction(files: &[FileInfo], settings: &CompactSettings) -> Vec<PlannedGroup> {
    let mut partitions: BTreeMap<(i32, &str), Vec<usize>> = BTreeMap::new();
    for (i, file) in files.iter().enumerate() {
        if file.bytes < settings.min_file_bytes {
            partitions
                .entry((file.spec_id, &file.partition))
                .or_default()
                .push(i);
        }
    }
    let mut groups = Vec::new();
    for ((spec_id, partition), mut members) in partitions {
        members.sort_by_key(|&i| (std::cmp::Reverse(files[i].bytes), i));
        // First fit into groups of at most max_group_bytes.
        let mut bins: Vec<PlannedGroup> = Vec::new();
        for i in members {
            let bytes = files[i].bytes;
            match bins
                .iter_mut()
                .find(|b| b.bytes + bytes <= settings.max_group_bytes)
            {
                Some(bin) => {
                    bin.files.push(i);
                    bin.bytes += bytes;
                }
                None => bins.push(PlannedGroup {
                    spec_id,
                    partition: partition.to_string(),
                    files: vec![i],
                    bytes,
                }),
            }
        }
        groups.extend(bins.into_iter().filter(|b| {
            b.files.len() >= settings.min_input_files.max(2)
                || (b.files.len() > 1 && b.bytes >= settings.target_bytes)
        }));
    }
    for group in &mut groups {
        group.files.sort_unstable();
    }
    groups
}

/// Consecutive runs of groups (of these input sizes) of at most `max_bytes` each; a group
/// larger than that is a run of its own.
pub fn commit_parts(sizes: &[u64], max_bytes: u64) -> Vec<std::ops::Range<usize>> {
    let mut parts: Vec<(std::ops::Range<usize>, u64)> = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        match parts.last_mut() {
            Some((range, bytes)) if *bytes + size <= max_bytes => {
                range.end = i + 1;
                *bytes += size;
            }
            _ => parts.push((i..i + 1, size)),
        }
    }
    parts.into_iter().map(|(range, _)| range).collect()
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
        let live = live_data_files(&start).await?;
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
                output_files: g.bytes.div_ceil(settings.target_bytes).max(1) as usize,
                output_records: None,
                given_up: None,
            })
            .collect();
        let rewritten: usize = groups.iter().map(|g| g.files.len()).sum();
        let estimated: usize = report.groups.iter().map(|g| g.output_files).sum();
        report.data_files_after = live.len() - rewritten + estimated;
        Ok(Compaction {
            start,
            planned_on,
            live,
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
            .map(|part| Compaction {
                start: self.start.clone(),
                planned_on: self.planned_on,
                live: self.live.clone(),
                groups: self.groups[part.clone()].to_vec(),
                settings: self.settings,
                sort: self.sort,
                report: CompactReport {
                    groups: self.report.groups[part].to_vec(),
                    ..self.report.clone()
                },
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
            groups,
            settings,
            sort,
            mut report,
        } = self;
        let name = table_name(start.identifier());
        let mut tasks = if groups.is_empty() {
            HashMap::new()
        } else {
            scan_tasks(&start, planned_on).await?
        };
        let attempt = uuid::Uuid::new_v4();
        let names = crate::writer::file_names(&format!("compact-{attempt}"));
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
    })
}

/// Whether a partition path holds every `field=value` of `wanted`.
fn matches_partitions(partition: &str, wanted: &[(String, String)]) -> bool {
    wanted.iter().all(|(field, value)| {
        partition
            .split('/')
            .any(|part| part.split_once('=') == Some((field.as_str(), value.as_str())))
    })
}

/// A live data file of the current snapshot and what its manifest says of it.
#[derive(Clone)]
struct LiveFile {
    info: FileInfo,
    partition: Struct,
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
            },
            partition: file.partition().clone(),
        });
    }
    Ok(out)
}

/// Scan tasks of every live data file of snapshot `snapshot_id`, by path: each carries the
/// delete files that apply to it.
async fn scan_tasks(table: &Table, snapshot_id: i64) -> Result<HashMap<String, FileScanTask>> {
    let name = table_name(table.identifier());
    let scan = table
        .scan()
        .snapshot_id(snapshot_id)
        .select_all()
        .build()
        .doing(format_args!("planning a scan of {name}"))?;
    let tasks: Vec<FileScanTask> = scan
        .plan_files()
        .await
        .doing(format_args!("planning a scan of {name}"))?
        .try_collect()
        .await
        .doing(format_args!("planning a scan of {name}"))?;
    Ok(tasks.into_iter().map(|t| (t.data_file_path.clone(), t)).collect())
}

/// Reads `group`'s files, their deletes applied, and writes their rows again as files of the
/// target size in the same partition; the new files, or an error naming the file that
/// failed (what was written so far is deleted).
async fn rewrite_group(
    table: &Table,
    group: &PlannedGroup,
    inputs: &[&LiveFile],
    tasks: Result<Vec<FileScanTask>>,
    settings: &CompactSettings,
    sort: bool,
    names: &iceberg::writer::file_writer::location_generator::DefaultFileNameGenerator,
) -> Result<Vec<DataFile>> {
    let metadata = table.metadata();
    let name = table_name(table.identifier());
    let schema: SchemaRef = metadata.current_schema().clone();
    let spec: PartitionSpecRef = metadata
        .partition_spec_by_id(group.spec_id)
        .cloned()
        .ok_or_else(|| Error::internal(format!("{name}: unknown partition spec {}", group.spec_id)))?;
    let field_ids: Vec<i32> = schema.as_struct().fields().iter().map(|f| f.id).collect();
    let mut tasks = tasks?;
    for task in &mut tasks {
        // Rows come out in the current schema, whatever schema the file was written in.
        task.schema = schema.clone();
        task.project_field_ids = field_ids.clone();
    }
    let key = (!spec.is_unpartitioned())
        .then(|| PartitionKey::new(spec.as_ref().clone(), schema.clone(), inputs[0].partition.clone()));
    let builder = data_files(table, settings.target_bytes, DEFAULT_COMPRESSION_LEVEL, names)?;
    let mut writer = builder
        .build(key)
        .await
        .doing(format_args!("opening a data file of {name}"))?;
    let runtime = Runtime::try_current().doing("finding the runtime")?;
    let reader = ArrowReaderBuilder::new(table.file_io().clone(), runtime)
        .with_batch_size(READ_BATCH_ROWS)
        .build();
    let what = format!(
        "reading the {} files of {name} partition '{}' to rewrite them",
        tasks.len(),
        group.partition
    );
    let mut batches = reader
        .read(futures::stream::iter(tasks.into_iter().map(Ok)).boxed())
        .doing(&what)?
        .stream();
    let mut outcome = Ok(());
    if sort {
        // The whole group, sorted, then written in slices.
        outcome = async {
            let columns = sort_columns(table)?;
            let read: Vec<RecordBatch> = batches.try_collect().await.doing(&what)?;
            let Some(first) = read.first() else {
                return Ok(());
            };
            let all = arrow_select::concat::concat_batches(&first.schema(), &read)
                .map_err(|e| Error::internal(format!("joining the rows of {name}: {e}")))?;
            drop(read);
            let sorted = sort_batch(&all, &columns)
                .map_err(|e| Error::internal(format!("sorting the rows of {name}: {e}")))?;
            drop(all);
            let mut offset = 0;
            while offset < sorted.num_rows() {
                let length = SORTED_SLICE_ROWS.min(sorted.num_rows() - offset);
                writer
                    .write(sorted.slice(offset, length))
                    .await
                    .doing(format_args!("writing to {name}"))?;
                offset += length;
            }
            Ok(())
        }
        .await;
    } else {
        // Decoding runs in a task of its own, so that it overlaps with encoding (the two
        // costly parts) on another core; two batches in flight bound the memory.
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let reading = tokio::spawn(async move {
            while let Some(batch) = batches.next().await {
                let failed = batch.is_err();
                if tx.send(batch).await.is_err() || failed {
                    break;
                }
            }
        });
        while let Some(batch) = rx.recv().await {
            let written = match batch.doing(&what) {
                Ok(batch) => writer.write(batch).await.doing(format_args!("writing to {name}")),
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                outcome = Err(e);
                break;
            }
        }
        drop(rx);
        reading.abort();
    }
    let files = writer
        .close()
        .await
        .doing(format_args!("closing data files of {name}"));
    match (outcome, files) {
        (Ok(()), Ok(files)) => Ok(files),
        (Err(e), Ok(files)) => {
            delete_files(table.file_io(), files.iter().map(|f| f.file_path())).await;
            Err(e)
        }
        (Err(e), Err(_)) | (Ok(()), Err(e)) => Err(e),
    }
}

/// Rows per batch read: larger than parquet-rs's default (1,024), since every batch costs
/// the reader and the writer a fixed amount on top of its rows.
const READ_BATCH_ROWS: usize = 8 * 1024;

/// Rows per write of a sorted group.
const SORTED_SLICE_ROWS: usize = 64 * 1024;

/// The table's sort order as columns of its current schema: (column index, descending,
/// nulls first). Identity fields of top-level columns only.
fn sort_columns(table: &Table) -> Result<Vec<(usize, bool, bool)>> {
    let metadata = table.metadata();
    let name = table_name(table.identifier());
    let order = metadata.default_sort_order();
    if order.is_unsorted() {
        return Err(Error::invalid_config(
            "sort",
            format!("table {name} has no sort order to sort by"),
        ));
    }
    let fields = metadata.current_schema().as_struct().fields();
    order
        .fields
        .iter()
        .map(|field| {
            let column = fields.iter().position(|f| f.id == field.source_id);
            match (column, field.transform) {
                (Some(column), Transform::Identity) => Ok((
                    column,
                    field.direction == SortDirection::Descending,
                    field.null_order == NullOrder::First,
                )),
                _ => Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "the sort order of {name} sorts by {} of field {}; compaction sorts by \
                         identity fields of top-level columns only",
                        field.transform, field.source_id
                    ),
                )),
            }
        })
        .collect()
}

/// `batch`'s rows in the order `columns` say.
fn sort_batch(
    batch: &RecordBatch,
    columns: &[(usize, bool, bool)],
) -> std::result::Result<RecordBatch, ArrowError> {
    let keys: Vec<SortColumn> = columns
        .iter()
        .map(|&(column, descending, nulls_first)| SortColumn {
            values: batch.column(column).clone(),
            options: Some(SortOptions {
                descending,
                nulls_first,
            }),
        })
        .collect();
    let order = lexsort_to_indices(&keys, None)?;
    arrow_select::take::take_record_batch(batch, &order)
}

/// A group read and written again, waiting for the commit.
struct WrittenGroup {
    /// Its place in the plan.
    index: usize,
    spec_id: i32,
    inputs: Vec<String>,
    files: Vec<DataFile>,
}

/// How the commit went.
struct Committed {
    snapshot_id: Option<i64>,
    /// Groups given up, by plan index, with the reason.
    given_up: HashMap<usize, String>,
    /// Live data files when the commit was made, before it.
    live_at_commit: usize,
}

/// One attempt at committing `written` on top of the table as it is now; see the module
/// docs.
async fn commit_once(
    catalog: &IcebergCatalog,
    ident: &TableIdent,
    planned_on: i64,
    written: &[WrittenGroup],
    commit_id: &str,
) -> Result<Committed> {
    let table = catalog.require_table(ident).await?;
    let name = table_name(ident);
    let metadata = table.metadata();
    let io = table.file_io();
    let manifests = current_manifests(&table).await?;
    let current_id = metadata.current_snapshot().map(|s| s.snapshot_id());

    // What changed since the plan.
    let mut given_up = HashMap::new();
    let live: HashSet<String> = crate::commit::live_data_files(&table)
        .await?
        .into_iter()
        .map(|(_, file)| file.file_path().to_string())
        .collect();
    let live_at_commit = live.len();
    if current_id != Some(planned_on) {
        let since: Vec<_> = main_history(&table)
            .take_while(|s| s.snapshot_id() != planned_on)
            .collect();
        if let Some(found) = since.iter().find(|s| {
            s.summary()
                .additional_properties
                .get(COMMIT_ID_KEY)
                .map(String::as_str)
                == Some(commit_id)
        }) {
            return Ok(Committed {
                snapshot_id: Some(found.snapshot_id()),
                given_up,
                live_at_commit,
            });
        }
        let deletes_added = since.iter().any(|s| {
            let added = |key: &str| {
                s.summary()
                    .additional_properties
                    .get(key)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            added("added-delete-files") > 0
                || added("added-position-deletes") > 0
                || added("added-equality-deletes") > 0
        });
        for w in written {
            let reason = if deletes_added {
                Some("delete files were committed while the group was rewritten".to_string())
            } else {
                w.inputs
                    .iter()
                    .find(|p| !live.contains(p.as_str()))
                    .map(|p| format!("{p} was removed while the group was rewritten"))
            };
            if let Some(reason) = reason {
                given_up.insert(w.index, reason);
            }
        }
    }
    let kept: Vec<&WrittenGroup> = written
        .iter()
        .filter(|w| !given_up.contains_key(&w.index))
        .collect();
    if kept.is_empty() {
        return Ok(Committed {
            snapshot_id: None,
            given_up,
            live_at_commit,
        });
    }
    let replaced: HashSet<&str> = kept
        .iter()
        .flat_map(|w| w.inputs.iter().map(String::as_str))
        .collect();
    let schema = metadata.current_schema();
    let version = metadata.format_version();
    let snapshot_id = new_snapshot_id(metadata);
    let attempt = uuid::Uuid::new_v4();
    let dir = format!("{}/metadata", metadata.location().trim_end_matches('/'));
    let mut paths = Vec::new();
    let mut path = || {
        let p = format!("{dir}/{attempt}-c{}.avro", paths.len());
        paths.push(p.clone());
        p
    };
    let mut summary = SnapshotSummaryCollector::default();
    let mut out: Vec<ManifestFile> = Vec::new();
    let mut removed = (0u64, 0u64, 0u64);
    let mut failure = None;

    // The new files, one manifest per spec.
    let mut by_spec: BTreeMap<i32, Vec<&DataFile>> = BTreeMap::new();
    for w in &kept {
        by_spec.entry(w.spec_id).or_default().extend(w.files.iter());
    }
    for (spec_id, files) in by_spec {
        let spec = spec_of(&table, spec_id)?;
        for file in &files {
            summary.add_file(file, schema.clone(), spec.clone());
        }
        let manifest_path = path();
        let written = write_added(&table, snapshot_id, &spec, &files, &manifest_path).await;
        match written {
            Ok(manifest) => out.push(manifest),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    // The manifests that held rewritten files: those entries deleted, the others existing.
    if failure.is_none() {
        for manifest in manifests {
            if manifest.content != ManifestContentType::Data {
                out.push(manifest);
                continue;
            }
            let loaded = match manifest.load_manifest(io).await {
                Ok(loaded) => loaded,
                Err(e) => {
                    failure = Some(crate::client::from_iceberg(
                        e,
                        format_args!("reading manifest {}", manifest.manifest_path),
                    ));
                    break;
                }
            };
            if !loaded
                .entries()
                .iter()
                .any(|e| e.is_alive() && replaced.contains(e.file_path()))
            {
                out.push(manifest);
                continue;
            }
            let spec = spec_of(&table, manifest.partition_spec_id)?;
            let manifest_path = path();
            let rewritten = async {
                let output = io
                    .new_output(&manifest_path)
                    .doing(format_args!("writing manifest {manifest_path}"))?;
                let builder = ManifestWriterBuilder::new(
                    output,
                    Some(snapshot_id),
                    schema.clone(),
                    spec.as_ref().clone(),
                );
                let mut writer = match version {
                    FormatVersion::V1 => builder.build_v1(),
                    _ => builder.build_v2_data(),
                };
                for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
                    let file = entry.data_file();
                    // Inherited from the manifest when it was read: present for every
                    // committed entry.
                    let (Some(sequence), Some(added_by)) = (entry.sequence_number(), entry.snapshot_id())
                    else {
                        return Err(Error::new(
                            ErrorKind::InvalidInput,
                            format!(
                                "{}: the entry for {} has no sequence number or snapshot",
                                manifest.manifest_path,
                                file.file_path()
                            ),
                        ));
                    };
                    if replaced.contains(file.file_path()) {
                        summary.remove_file(file, schema.clone(), spec.clone());
                        removed.0 += 1;
                        removed.1 += file.record_count();
                        removed.2 += file.file_size_in_bytes();
                        writer
                            .add_delete_file(file.clone(), sequence, entry.file_sequence_number)
                            .doing("marking a rewritten file deleted")?;
                    } else {
                        writer
                            .add_existing_file(file.clone(), added_by, sequence, entry.file_sequence_number)
                            .doing("carrying a file into a rewritten manifest")?;
                    }
                }
                writer
                    .write_manifest_file()
                    .await
                    .doing(format_args!("writing manifest {manifest_path}"))
            }
            .await;
            match rewritten {
                Ok(manifest) => out.push(manifest),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
    }
    if let Some(e) = failure {
        delete_files(io, paths.iter().map(String::as_str)).await;
        return Err(e);
    }

    let added: Vec<&DataFile> = kept.iter().flat_map(|w| w.files.iter()).collect();
    let mut properties = summary.build();
    totals(
        &mut properties,
        metadata.current_snapshot().map(|s| s.summary()),
        (
            added.len() as u64,
            added.iter().map(|f| f.record_count()).sum(),
            added.iter().map(|f| f.file_size_in_bytes()).sum(),
        ),
        removed,
    );
    properties.insert(COMMIT_ID_KEY.to_string(), commit_id.to_string());
    let built = finish_snapshot(
        &table,
        NewSnapshot {
            snapshot_id,
            attempt,
            manifests: out,
            operation: Operation::Replace,
            properties,
        },
        paths,
    )
    .await?;
    if let Err(err) = catalog.commit(&table, built.requirements, built.updates).await {
        if err.kind() == ErrorKind::Conflict {
            delete_files(io, built.written.iter().map(String::as_str)).await;
        }
        return Err(err.with_context("table", name));
    }
    Ok(Committed {
        snapshot_id: Some(snapshot_id),
        given_up,
        live_at_commit,
    })
}

fn spec_of(table: &Table, spec_id: i32) -> Result<PartitionSpecRef> {
    table
        .metadata()
        .partition_spec_by_id(spec_id)
        .cloned()
        .ok_or_else(|| {
            Error::internal(format!(
                "{}: unknown partition spec {spec_id}",
                table_name(table.identifier())
            ))
        })
}

/// Writes a manifest of `files` added by snapshot `snapshot_id`: Outflow's writer where it
/// covers the spec, else iceberg-rust's.
async fn write_added(
    table: &Table,
    snapshot_id: i64,
    spec: &PartitionSpecRef,
    files: &[&DataFile],
    path: &str,
) -> Result<ManifestFile> {
    let metadata = table.metadata();
    let io = table.file_io();
    let schema = metadata.current_schema();
    let output = io
        .new_output(path)
        .doing(format_args!("writing manifest {path}"))?;
    if let Some(mut manifest) = AppendManifest::new(metadata.format_version(), snapshot_id, schema, spec)? {
        for file in files {
            manifest.add_file(file)?;
        }
        let (bytes, entry) = manifest.finish(path.to_string());
        let wrote = output.write(bytes.into()).await;
        wrote.doing(format_args!("writing manifest {path}"))?;
        return Ok(entry);
    }
    let builder =
        ManifestWriterBuilder::new(output, Some(snapshot_id), schema.clone(), spec.as_ref().clone());
    let mut writer = match metadata.format_version() {
        FormatVersion::V1 => builder.build_v1(),
        _ => builder.build_v2_data(),
    };
    for file in files {
        writer
            .add_file((*file).clone(), -1)
            .doing(format_args!("adding {} to a manifest", file.file_path()))?;
    }
    writer
        .write_manifest_file()
        .await
        .doing(format_args!("writing manifest {path}"))
}

/// Sets the `total-*` summary keys from the parent's and the (files, records, bytes) added
/// and removed; delete file totals carry over.
fn totals(
    properties: &mut HashMap<String, String>,
    parent: Option<&iceberg::spec::Summary>,
    added: (u64, u64, u64),
    removed: (u64, u64, u64),
) {
    let parent_total = |key: &str| -> Option<u64> {
        parent?
            .additional_properties
            .get(key)
            .and_then(|v| v.parse().ok())
    };
    for (key, add, remove) in [
        ("total-data-files", added.0, removed.0),
        ("total-records", added.1, removed.1),
        ("total-files-size", added.2, removed.2),
    ] {
        if let Some(total) = parent_total(key) {
            properties.insert(key.to_string(), (total + add).saturating_sub(remove).to_string());
        }
    }
    for key in [
        "total-delete-files",
        "total-position-deletes",
        "total-equality-deletes",
    ] {
        if let Some(total) = parent_total(key) {
            properties.insert(key.to_string(), total.to_string());
        }
    }
}

/// Deletes `paths`, best effort: what cannot be deleted is an orphan for `remove-orphans`.
async fn delete_files<'a>(io: &iceberg::io::FileIO, paths: impl IntoIterator<Item = &'a str>) {
    for path in paths {
        if let Err(e) = io.delete(path).await {
            tracing::warn!(path, error = %e, "could not delete a file of a compaction that was not committed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(partition: &str, bytes: u64) -> FileInfo {
        FileInfo {
            path: format!("{partition}-{bytes}"),
            spec_id: 0,
            partition: partition.to_string(),
            bytes,
            records: 1,
        }
    }

    fn settings(min_input_files: usize, max_group_bytes: u64) -> CompactSettings {
        CompactSettings {
            target_bytes: 100,
            min_file_bytes: 75,
            min_input_files,
            max_group_bytes,
        }
    }

    fn shape(groups: &[PlannedGroup]) -> Vec<(&str, Vec<usize>)> {
        groups
            .iter()
            .map(|g| (g.partition.as_str(), g.files.clone()))
            .collect()
    }

    #[test]
    fn small_files_group_by_partition_and_large_ones_stay() {
        let files = vec![
            file("a", 10),
            file("b", 10),
            file("a", 80),
            file("a", 20),
            file("b", 10),
            file("a", 30),
        ];
        assert_eq!(
            shape(&plan_compaction(&files, &settings(2, 1000))),
            [("a", vec![0, 3, 5]), ("b", vec![1, 4])]
        );
    }

    #[test]
    fn too_few_files_stay_unless_they_fill_a_target_file() {
        let few = vec![file("a", 10), file("a", 10)];
        assert_eq!(plan_compaction(&few, &settings(5, 1000)), []);
        let full = vec![file("a", 60), file("a", 50)];
        assert_eq!(
            shape(&plan_compaction(&full, &settings(5, 1000))),
            [("a", vec![0, 1])]
        );
        // One file alone is never rewritten.
        assert_eq!(plan_compaction(&[file("a", 10)], &settings(1, 1000)), []);
    }

    #[test]
    fn groups_are_bounded_in_bytes() {
        let files: Vec<FileInfo> = (0..6).map(|_| file("a", 50)).collect();
        let groups = plan_compaction(&files, &settings(2, 100));
        assert_eq!(groups.len(), 3);
        assert!(groups.iter().all(|g| g.bytes == 100 && g.files.len() == 2));
    }

    #[test]
    fn files_of_different_specs_never_share_a_group() {
        let mut other = file("a", 10);
        other.spec_id = 1;
        let files = vec![file("a", 10), other.clone(), file("a", 10), other];
        let groups = plan_compaction(&files, &settings(2, 1000));
        assert_eq!(
            groups
                .iter()
                .map(|g| (g.spec_id, g.files.clone()))
                .collect::<Vec<_>>(),
            [(0, vec![0, 2]), (1, vec![1, 3])]
        );
    }

    #[test]
    fn partial_progress_commits_runs_of_groups_up_to_the_size() {
        assert_eq!(commit_parts(&[40, 40, 40, 10], 100), [0..2, 2..4]);
        assert_eq!(commit_parts(&[150, 10, 10], 100), [0..1, 1..3]);
        assert_eq!(commit_parts(&[5, 5, 5], 5), [0..1, 1..2, 2..3]);
        assert_eq!(commit_parts(&[], 5), Vec::<std::ops::Range<usize>>::new());
    }

    #[test]
    fn partition_filters_match_path_segments() {
        let wanted = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let path = "region=eu/day=2026-11-30";
        assert!(matches_partitions(path, &[]));
        assert!(matches_partitions(path, &wanted(&[("day", "2026-11-30")])));
        assert!(matches_partitions(
            path,
            &wanted(&[("region", "eu"), ("day", "2026-11-30")])
        ));
        assert!(!matches_partitions(path, &wanted(&[("region", "e")])));
        assert!(!matches_partitions(
            path,
            &wanted(&[("day", "2026-11-30"), ("region", "us")])
        ));
    }
}
