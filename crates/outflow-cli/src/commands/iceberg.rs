//! `outflow iceberg ...`: Iceberg's own subcommands. `add-files` registers existing Parquet
//! files into a table with Outflow's AddFiles (see `docs/iceberg-add-files.md`).

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use outflow_core::{
    CreateDisposition, Error, IncompatibleSchemaHandling, Result, SchemaEvolutionConfig,
    SchemaEvolutionOption, UnverifiableFileHandling,
};
use outflow_iceberg::add_files::{AddFiles, AddFilesOptions, AddFilesResult, BatchWindow};
use outflow_iceberg::maintenance::{
    CompactOptions, CompactReport, ExpireSnapshotsOptions, ExpireSnapshotsReport, RemoveOrphansOptions,
    RemoveOrphansReport, RewriteManifestsOptions, RewriteManifestsReport, compact as compact_of,
    expire_snapshots as expire_snapshots_of, remove_orphans as remove_orphans_of,
    rewrite_manifests as rewrite_manifests_of,
};
use outflow_iceberg::{CatalogConfig, IcebergCatalog, TableCreateOptions};

use crate::exit::{ExitStatus, after_help};
use crate::output::document::document;
use crate::output::plan::painter;
use crate::output::{self, Style};

/// Examples for `outflow iceberg add-files --help`.
pub const ADD_FILES_HELP: &str = "\
Examples:
  outflow iceberg add-files --catalog-uri ./lake/catalog.db --warehouse ./lake/warehouse \\
      --table db.events --allow allow_field_addition,allow_type_promotion data/*.parquet
  find /data/events -name '*.parquet' | outflow iceberg add-files --catalog-uri ./lake/catalog.db \\
      --warehouse ./lake/warehouse --table db.events --partition-field 'day(ts)' \\
      --location-prefix /data/events -
  outflow iceberg add-files ... --dry-run        what would change, committing nothing
  outflow iceberg add-files ... --json           one JSON document on stdout

Files are inputs: one that cannot be registered (unreadable, not Parquet, incompatible,
partition values unknown) is listed with its reason and the command ends with exit code 3,
having committed the others (under --on-incompatible fail, the default, nothing of the
window holding incompatible files). Exit code 1 is a failure of the whole command (the
catalog, a commit).";

/// Footers read at once when `--max-concurrent-reads` is not given.
const DEFAULT_CONCURRENCY: usize = 32;
/// Inputs from which a progress bar is worth drawing.
const PROGRESS_FROM: usize = 100;

/// Iceberg subcommands.
#[derive(Debug, Subcommand)]
pub enum IcebergCommand {
    /// Register existing Parquet files into an Iceberg table (reading only their footers),
    /// evolving its schema as allowed; creates the table when missing.
    #[command(name = "add-files", after_help = after_help(ADD_FILES_HELP))]
    AddFiles(Box<AddFilesArgs>),
    /// Rewrite a table's small data files into files of the target size, per partition, in
    /// one replace snapshot (the same rows, their deletes applied; fewer files to read).
    #[command(after_help = after_help(COMPACT_HELP))]
    Compact(CompactArgs),
    /// Merge a table's small data manifests into fewer, in one replace snapshot (the same
    /// files and rows; fewer manifests for readers to open).
    #[command(name = "rewrite-manifests", after_help = after_help(REWRITE_MANIFESTS_HELP))]
    RewriteManifests(RewriteManifestsArgs),
    /// Remove old snapshots from a table's history and delete the files only they
    /// referenced (never the current snapshot, nor one a branch or tag points at).
    #[command(name = "expire-snapshots", after_help = after_help(EXPIRE_SNAPSHOTS_HELP))]
    ExpireSnapshots(ExpireSnapshotsArgs),
    /// Delete the files under a table's location that no snapshot references and that are
    /// older than a safety age (what failed writers left behind).
    #[command(name = "remove-orphans", after_help = after_help(REMOVE_ORPHANS_HELP))]
    RemoveOrphans(RemoveOrphansArgs),
}

/// Examples for `outflow iceberg compact --help`.
pub const COMPACT_HELP: &str = "\
Examples:
  outflow iceberg compact --catalog-uri ./lake/catalog.db --warehouse ./lake/warehouse \\
      --table db.events
  outflow iceberg compact ... --partition day=2026-11-30    one partition (values as in its path)
  outflow iceberg compact ... --dry-run                     the groups it would rewrite

Files smaller than --min-file-size-bytes (three quarters of the target) are rewritten,
per partition, when a partition has --min-input-files of them or a target file's worth.
Writers may keep committing: a group whose files another commit removed meanwhile is
given up, and the rest is committed on top.";

/// Arguments of `outflow iceberg compact`.
#[derive(Debug, Args)]
pub struct CompactArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: TableArgs,
    /// The size of the files written (default: the table's write.target-file-size-bytes,
    /// 512 MiB when unset).
    #[arg(long, value_name = "BYTES")]
    pub target_file_size_bytes: Option<u64>,
    /// Rewrite files smaller than this (default: three quarters of the target).
    #[arg(long, value_name = "BYTES")]
    pub min_file_size_bytes: Option<u64>,
    /// Leave a partition with fewer small files alone, unless they fill a target file.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub min_input_files: usize,
    /// At most this many input bytes per group of files rewritten together.
    #[arg(long, value_name = "BYTES", default_value_t = CompactOptions::default().max_group_bytes)]
    pub max_group_bytes: u64,
    /// Only partitions with this value (`field=value`, as in the partition's path); repeat
    /// for more fields.
    #[arg(long, value_name = "FIELD=VALUE", value_parser = partition_filter)]
    pub partition: Vec<(String, String)>,
    /// Sort each group's rows by the table's sort order (a group is then held in memory:
    /// bound it with --max-group-bytes).
    #[arg(long)]
    pub sort: bool,
    /// Also rewrite files that this many delete files apply to, whatever their size, so
    /// that their deletes are applied (default: only small files are rewritten).
    #[arg(long, value_name = "N")]
    pub delete_file_threshold: Option<usize>,
    /// Commit after every part of at most this many input bytes (one snapshot each), so a
    /// long compaction keeps its progress; default: one snapshot for all.
    #[arg(long, value_name = "BYTES")]
    pub max_commit_bytes: Option<u64>,
    /// Say which groups it would rewrite, writing nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

fn partition_filter(text: &str) -> std::result::Result<(String, String), String> {
    split_pair(text).ok_or_else(|| format!("'{text}' is not FIELD=VALUE"))
}

fn property(text: &str) -> std::result::Result<(String, String), String> {
    split_pair(text).ok_or_else(|| format!("'{text}' is not KEY=VALUE"))
}

fn split_pair(text: &str) -> Option<(String, String)> {
    text.split_once('=')
        .filter(|(key, _)| !key.trim().is_empty())
        .map(|(key, value)| (key.trim().to_string(), value.to_string()))
}

/// Runs `outflow iceberg compact`.
pub async fn execute_compact(args: CompactArgs) -> ExitStatus {
    let report = compact(&args).await;
    print_report("iceberg compact", report, args.json, compact_summary)
}

async fn compact(args: &CompactArgs) -> Result<CompactReport> {
    let (catalog, retry) = connect(&args.target.catalog).await?;
    let options = CompactOptions {
        target_file_size_bytes: args.target_file_size_bytes,
        min_file_size_bytes: args.min_file_size_bytes,
        min_input_files: args.min_input_files,
        max_group_bytes: args.max_group_bytes,
        partitions: args.partition.clone(),
        sort: args.sort,
        delete_file_threshold: args.delete_file_threshold,
        max_commit_bytes: args.max_commit_bytes,
        dry_run: args.dry_run,
    };
    compact_of(&catalog, &args.target.table, &options, &retry).await
}

/// "db.t: rewrote 500 files into 4 in 4 partitions (snapshot 123); 600 data files now 104".
fn compact_summary(report: &CompactReport) -> String {
    let table = &report.table;
    let done: Vec<_> = report.groups.iter().filter(|g| g.given_up.is_none()).collect();
    let inputs: usize = done.iter().map(|g| g.input_files).sum();
    let outputs: usize = done.iter().map(|g| g.output_files).sum();
    let partitions: std::collections::BTreeSet<_> = done.iter().map(|g| (g.spec_id, &g.partition)).collect();
    let (before, after) = (report.data_files_before, report.data_files_after);
    let mut out = if report.groups.is_empty() {
        format!("{table}: {before} data files, nothing to compact\n")
    } else if report.dry_run {
        format!(
            "{table}: would rewrite {inputs} files into about {outputs} in {} partitions; \
             {before} data files, about {after} after (dry run)\n",
            partitions.len()
        )
    } else {
        let snapshot = match report.snapshot_ids.as_slice() {
            [] => "no snapshot".to_string(),
            [id] => format!("snapshot {id}"),
            ids => format!("{} snapshots, the last {}", ids.len(), ids[ids.len() - 1]),
        };
        format!(
            "{table}: rewrote {inputs} files into {outputs} in {} partitions ({snapshot}); \
             {before} data files, {after} now\n",
            partitions.len()
        )
    };
    for group in report.groups.iter().filter(|g| g.given_up.is_some()) {
        let partition = if group.partition.is_empty() {
            "(unpartitioned)"
        } else {
            &group.partition
        };
        out.push_str(&format!(
            "  given up: {partition}: {}\n",
            group.given_up.as_deref().unwrap_or_default()
        ));
    }
    out
}

/// Examples for `outflow iceberg remove-orphans --help`.
pub const REMOVE_ORPHANS_HELP: &str = "\
Examples:
  outflow iceberg remove-orphans --catalog-uri ./lake/catalog.db --warehouse ./lake/warehouse \\
      --table db.events                              files older than 3 days
  outflow iceberg remove-orphans ... --dry-run      list them, delete nothing

A writer running now has files no snapshot references yet: keep --older-than longer than
any write takes. Tables on the local filesystem or in S3 (the store's settings as
--catalog-property KEY=VALUE, keys from the AWS environment variables).";

/// Arguments of `outflow iceberg remove-orphans`.
#[derive(Debug, Args)]
pub struct RemoveOrphansArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: TableArgs,
    /// Only files last modified longer ago than this go (`3d`, `12h`).
    #[arg(long, value_name = "AGE", default_value = "3d", value_parser = outflow_core::duration::parse)]
    pub older_than: Duration,
    /// List the orphans, delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs `outflow iceberg remove-orphans`.
pub async fn execute_remove_orphans(args: RemoveOrphansArgs) -> ExitStatus {
    let report = remove_orphans(&args).await;
    print_report("iceberg remove-orphans", report, args.json, orphans_summary)
}

async fn remove_orphans(args: &RemoveOrphansArgs) -> Result<RemoveOrphansReport> {
    let (catalog, retry) = connect(&args.target.catalog).await?;
    let options = RemoveOrphansOptions {
        older_than_ms: now_ms() - args.older_than.as_millis() as i64,
        dry_run: args.dry_run,
    };
    remove_orphans_of(&catalog, &args.target.table, &options, &retry).await
}

/// "db.t: deleted 2 orphan files of 14 (1 younger than the safety age kept)".
fn orphans_summary(report: &RemoveOrphansReport) -> String {
    let table = &report.table;
    let count = report.orphans.len() - report.not_deleted.len();
    let mut out = if report.dry_run {
        format!(
            "{table}: would delete {} orphan files of {} (dry run)\n",
            report.orphans.len(),
            report.files
        )
    } else {
        format!("{table}: deleted {count} orphan files of {}\n", report.files)
    };
    if report.too_young > 0 {
        out.push_str(&format!(
            "  kept {} younger than --older-than (a writer may still commit them)\n",
            report.too_young
        ));
    }
    if report.dry_run && !report.orphans.is_empty() {
        out.push_str(&format!("  {}\n", output::some_names(&report.orphans)));
    }
    for line in &report.not_deleted {
        out.push_str(&format!("  not deleted: {line}\n"));
    }
    out
}

/// The catalog a maintenance command works in, and the retry policy it works under.
async fn connect(args: &CatalogArgs) -> Result<(IcebergCatalog, outflow_core::RetryPolicy)> {
    let config = catalog(args)?;
    let retry = outflow_core::RetryPolicy::default();
    let catalog = IcebergCatalog::connect_with_retry(&config, &retry).await?;
    Ok((catalog, retry))
}

/// Now, in milliseconds since the epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Examples for `outflow iceberg expire-snapshots --help`.
pub const EXPIRE_SNAPSHOTS_HELP: &str = "\
Examples:
  outflow iceberg expire-snapshots --catalog-uri ./lake/catalog.db --warehouse ./lake/warehouse \\
      --table db.events                              older than 5 days, keeping the last one
  outflow iceberg expire-snapshots ... --older-than 1d --retain-last 10
  outflow iceberg expire-snapshots ... --dry-run      what it would expire and delete

Tags and branches (but main) older than their max-ref-age-ms go first. The snapshots kept
are the head of every remaining branch and tag, the --retain-last most recent of every
branch's history, and every snapshot newer than --older-than; a branch's own retention
settings come first, and the table's history.expire.* properties fill in what is not
given. Files only expired
snapshots referenced are deleted after the commit; one that cannot be deleted is listed,
and the command still succeeds (the snapshot is gone; the file is an orphan).";

/// Arguments of `outflow iceberg expire-snapshots`.
#[derive(Debug, Args)]
pub struct ExpireSnapshotsArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: TableArgs,
    /// Expire snapshots committed longer ago than this (`5d`, `12h`, `0s` for all; default:
    /// the table's history.expire.max-snapshot-age-ms, 5 days when unset).
    #[arg(long, value_name = "AGE", value_parser = outflow_core::duration::parse)]
    pub older_than: Option<Duration>,
    /// Keep this many of the most recent snapshots of each branch, whatever their age
    /// (default: the table's history.expire.min-snapshots-to-keep, 1 when unset).
    #[arg(long, value_name = "N")]
    pub retain_last: Option<usize>,
    /// Say what would be expired and deleted, changing nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs `outflow iceberg expire-snapshots`.
pub async fn execute_expire_snapshots(args: ExpireSnapshotsArgs) -> ExitStatus {
    let report = expire_snapshots(&args).await;
    print_report("iceberg expire-snapshots", report, args.json, expire_summary)
}

async fn expire_snapshots(args: &ExpireSnapshotsArgs) -> Result<ExpireSnapshotsReport> {
    let (catalog, retry) = connect(&args.target.catalog).await?;
    let now = now_ms();
    let options = ExpireSnapshotsOptions {
        now_ms: now,
        older_than_ms: args.older_than.map(|age| now - age.as_millis() as i64),
        retain_last: args.retain_last,
        dry_run: args.dry_run,
    };
    expire_snapshots_of(&catalog, &args.target.table, &options, &retry).await
}

/// "db.t: expired 3 snapshots (2 kept); deleted 3 manifest lists, 2 manifests, 4 data files".
fn expire_summary(report: &ExpireSnapshotsReport) -> String {
    let table = &report.table;
    if report.expired.is_empty() && report.expired_refs.is_empty() {
        return format!("{table}: nothing to expire ({} snapshots kept)\n", report.kept);
    }
    let files: Vec<String> = report
        .deleted
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(kind, n)| format!("{n} {}", kind.replace('_', " ")))
        .collect();
    let files = if files.is_empty() {
        "no files".to_string()
    } else {
        files.join(", ")
    };
    let mut out = if report.dry_run {
        format!(
            "{table}: would expire {} snapshots ({} kept) and delete {files} (dry run)\n",
            report.expired.len(),
            report.kept
        )
    } else {
        format!(
            "{table}: expired {} snapshots ({} kept); deleted {files}\n",
            report.expired.len(),
            report.kept
        )
    };
    if !report.expired_refs.is_empty() {
        let verb = if report.dry_run { "would remove" } else { "removed" };
        out.push_str(&format!(
            "  {verb} refs past their age: {}\n",
            report.expired_refs.join(", ")
        ));
    }
    if !report.expired_refs.is_empty() {
        let verb = if report.dry_run { "would remove" } else { "removed" };
        out.push_str(&format!(
            "  {verb} refs past their age: {}\n",
            report.expired_refs.join(", ")
        ));
    }
    for line in &report.not_deleted {
        out.push_str(&format!("  not deleted: {line}\n"));
    }
    out
}

/// Examples for `outflow iceberg rewrite-manifests --help`.
pub const REWRITE_MANIFESTS_HELP: &str = "\
Examples:
  outflow iceberg rewrite-manifests --catalog-uri ./lake/catalog.db --warehouse ./lake/warehouse \\
      --table db.events
  outflow iceberg rewrite-manifests ... --dry-run   how many manifests it would merge
  outflow iceberg rewrite-manifests ... --target-size-bytes 33554432 --json

Appends already merge small manifests past the table's commit.manifest.min-count-to-merge
(100 by default); this merges every run of small manifests now.";

/// Arguments of `outflow iceberg rewrite-manifests`.
#[derive(Debug, Args)]
pub struct RewriteManifestsArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: TableArgs,
    /// A merged manifest's size limit (default: the table's
    /// commit.manifest.target-size-bytes, 8 MiB when unset).
    #[arg(long, value_name = "BYTES")]
    pub target_size_bytes: Option<i64>,
    /// Say what would be merged, committing nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs `outflow iceberg rewrite-manifests`.
pub async fn execute_rewrite_manifests(args: RewriteManifestsArgs) -> ExitStatus {
    let report = rewrite_manifests(&args).await;
    print_report("iceberg rewrite-manifests", report, args.json, rewrite_summary)
}

/// A maintenance command's end: its report as JSON or as `summary` says, or its error.
fn print_report<R: serde::Serialize>(
    command: &str,
    report: Result<R>,
    json: bool,
    summary: fn(&R) -> String,
) -> ExitStatus {
    match report {
        Ok(report) => {
            if json {
                let report = serde_json::to_value(&report).expect("the report serializes");
                output::println(document(command, ExitStatus::Ok, report));
            } else {
                output::print(summary(&report));
            }
            ExitStatus::Ok
        }
        Err(err) => super::fail_command(command, &err, json),
    }
}

async fn rewrite_manifests(args: &RewriteManifestsArgs) -> Result<RewriteManifestsReport> {
    let (catalog, retry) = connect(&args.target.catalog).await?;
    let options = RewriteManifestsOptions {
        target_bytes: args.target_size_bytes,
        dry_run: args.dry_run,
    };
    rewrite_manifests_of(&catalog, &args.target.table, &options, &retry).await
}

/// "db.t: 12 data manifests merged into 2 (snapshot 123)".
fn rewrite_summary(report: &RewriteManifestsReport) -> String {
    let RewriteManifestsReport {
        table,
        manifests_before: before,
        manifests_after: after,
        ..
    } = report;
    match (report.dry_run, report.snapshot_id) {
        _ if before == after => format!("{table}: {before} data manifests, nothing to merge\n"),
        (true, _) => format!("{table}: would merge {before} data manifests into {after} (dry run)\n"),
        (false, Some(id)) => {
            format!("{table}: merged {before} data manifests into {after} in snapshot {id}\n")
        }
        (false, None) => format!("{table}: {before} data manifests\n"),
    }
}

impl IcebergCommand {
    /// Runs the subcommand.
    pub async fn execute(self) -> ExitStatus {
        match self {
            IcebergCommand::AddFiles(args) => execute_add_files(*args).await,
            IcebergCommand::Compact(args) => execute_compact(args).await,
            IcebergCommand::RewriteManifests(args) => execute_rewrite_manifests(args).await,
            IcebergCommand::ExpireSnapshots(args) => execute_expire_snapshots(args).await,
            IcebergCommand::RemoveOrphans(args) => execute_remove_orphans(args).await,
        }
    }
}

/// The table a maintenance command works on.
#[derive(Debug, Args)]
pub struct TableArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub catalog: CatalogArgs,
    /// The table.
    #[arg(long, value_name = "NAMESPACE.TABLE")]
    pub table: String,
}

/// The catalog flags of the Iceberg subcommands.
#[derive(Debug, Args)]
pub struct CatalogArgs {
    /// The catalog: a SQLite file (a path or `sqlite:///abs/catalog.db`, created if absent)
    /// or a REST catalog's `http(s)://` URI.
    #[arg(long, value_name = "URI")]
    pub catalog_uri: String,
    /// Where new tables go (a directory or `file://` URL; required for SQLite), or the
    /// warehouse to ask a REST catalog for.
    #[arg(long, value_name = "DIR")]
    pub warehouse: Option<String>,
    /// The catalog's name; other readers of the catalog must use the same.
    #[arg(long, value_name = "NAME", default_value = "outflow")]
    pub catalog_name: String,
    /// A catalog property (repeatable), such as the storage settings of an `s3://` or
    /// `gs://` warehouse or files: `s3.endpoint=http://127.0.0.1:8333`, `s3.region=...`,
    /// `s3.path-style-access=true`, `gcs.service.path=...`. Credentials are not taken here,
    /// where other users of the machine could read them: the store's credential chain
    /// supplies them (`AWS_ACCESS_KEY_ID` and profiles for S3; Application Default
    /// Credentials for GCS).
    #[arg(long = "catalog-property", value_name = "KEY=VALUE", value_parser = property)]
    pub catalog_properties: Vec<(String, String)>,
}

/// Arguments of `outflow iceberg add-files`.
#[derive(Debug, Args)]
pub struct AddFilesArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: TableArgs,
    /// Schema changes allowed (`schema_evolution.options`), comma-separated, spelled as in
    /// job files or short: allow_field_addition (field-addition), allow_field_relaxation
    /// (field-relaxation), allow_type_promotion (type-promotion). None: files must fit the
    /// table as it is.
    #[arg(long, value_name = "CHANGES", value_delimiter = ',')]
    pub allow: Vec<String>,
    /// A column that must stay required and hold no nulls (dotted path; repeatable).
    #[arg(long = "required-column", value_name = "PATH")]
    pub required_columns: Vec<String>,
    /// What incompatible files do: fail (commit nothing, list them all) or route_to_errors
    /// (commit the others).
    #[arg(long, value_name = "fail|route_to_errors")]
    pub on_incompatible: Option<String>,
    /// Files whose statistics cannot prove what a rule needs: reject or accept.
    #[arg(long, alias = "unverifiable", value_name = "reject|accept")]
    pub on_unverifiable: Option<String>,
    /// Whether a missing table may be created (from the union of the files' schemas).
    #[arg(
        long,
        value_name = "create_if_needed|create_never",
        default_value = "create_if_needed"
    )]
    pub create_disposition: String,
    /// A partition field of a table this creates: `region`, `day(ts)`, `bucket(16, id)`,
    /// `truncate(4, name)`, optionally `as NAME` (repeatable).
    #[arg(long = "partition-field", value_name = "EXPR")]
    pub partition_fields: Vec<String>,
    /// A sort field of a table this creates: `id desc nulls last` (repeatable).
    #[arg(long = "sort-field", value_name = "EXPR")]
    pub sort_fields: Vec<String>,
    /// A property of a table this creates (repeatable).
    #[arg(long = "table-property", value_name = "KEY=VALUE")]
    pub table_properties: Vec<String>,
    /// Where Hive-style partition directories start (`PREFIX/region=eu/ts_day=2026-11-29/f.parquet`);
    /// without it, partition values come from footer statistics.
    #[arg(long, value_name = "PATH")]
    pub location_prefix: Option<String>,
    /// Plan and commit per window of this many files (default: all files at once).
    #[arg(long, value_name = "N")]
    pub window: Option<usize>,
    /// At most this many files per manifest (default: one manifest per snapshot).
    #[arg(long, value_name = "N")]
    pub files_per_manifest: Option<usize>,
    /// Footers read at once.
    #[arg(long, alias = "concurrency", value_name = "N", default_value_t = DEFAULT_CONCURRENCY)]
    pub max_concurrent_reads: usize,
    /// Plan and check everything, commit nothing; reports each schema's changes and files.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Show no progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Parquet files: paths, `file://` URLs, or `s3://` or `gs://` URLs of objects, of prefixes ending
    /// in `/` (every `.parquet` object under it) or globs; `-` reads more, one per line,
    /// from stdin.
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<String>,
}

/// Runs `outflow iceberg add-files`.
pub async fn execute_add_files(args: AddFilesArgs) -> ExitStatus {
    let json = args.json;
    match add_files(args).await {
        Ok((result, status)) => {
            if json {
                let result = serde_json::to_value(&result).expect("the result serializes");
                output::println(document("iceberg add-files", status, result));
            } else {
                output::print(result.render_with(&painter(Style::for_stdout())));
            }
            status
        }
        Err(err) => super::fail_command("iceberg add-files", &err, json),
    }
}

async fn add_files(args: AddFilesArgs) -> Result<(AddFilesResult, ExitStatus)> {
    let options = options(&args)?;
    let files = inputs(&args.files)?;
    let bar = progress_bar(files.len(), args.quiet);
    let reporter = bar.clone();
    let adder = AddFiles::connect(options).await?.on_progress(move |p| {
        reporter.set_length(p.total as u64);
        reporter.set_position(p.read as u64);
    });
    let result = adder.run(&files).await;
    bar.finish_and_clear();
    let result = result?;
    // Files are the inputs: any not registered (listed with its reason) is exit 3, as
    // rejected records are for `run`; 1 is only an error of the whole command.
    let status = if result.rejected || !result.errors.is_empty() {
        ExitStatus::Rejected
    } else {
        ExitStatus::Ok
    };
    Ok((result, status))
}

/// The paths given, with `-` replaced by the lines of stdin (each line a path as it is,
/// spaces included; blank lines are skipped).
fn inputs(given: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for item in given {
        if item == "-" {
            for line in std::io::stdin().lock().lines() {
                let line =
                    line.map_err(|e| Error::invalid_input(format!("reading file names from stdin: {e}")))?;
                if !line.trim().is_empty() {
                    out.push(line);
                }
            }
        } else {
            out.push(item.clone());
        }
    }
    if out.is_empty() {
        return Err(Error::invalid_config("files", "no file was given"));
    }
    Ok(out)
}

fn catalog(args: &CatalogArgs) -> Result<CatalogConfig> {
    let uri = args.catalog_uri.trim();
    let mut properties = BTreeMap::new();
    for (key, value) in &args.catalog_properties {
        if outflow_store::StorageSettings::is_secret(key) || key == "token" || key == "credential" {
            return Err(Error::invalid_config(
                "--catalog-property",
                format!(
                    "{key} is a credential: give it in the environment (AWS_SECRET_ACCESS_KEY, ...) or a job file's ${{ENV}}, not on the command line"
                ),
            ));
        }
        properties.insert(key.clone(), value.clone());
    }
    if uri.starts_with("http://") || uri.starts_with("https://") {
        return Ok(CatalogConfig::Rest {
            uri: uri.to_string(),
            warehouse: args.warehouse.clone(),
            name: args.catalog_name.clone(),
            properties,
        });
    }
    let warehouse = args
        .warehouse
        .clone()
        .ok_or_else(|| Error::invalid_config("--warehouse", "is required with a SQLite catalog"))?;
    Ok(CatalogConfig::Sql {
        uri: uri.to_string(),
        warehouse,
        name: args.catalog_name.clone(),
        properties,
    })
}

fn evolution(args: &AddFilesArgs) -> Result<SchemaEvolutionConfig> {
    let mut builder = SchemaEvolutionConfig::builder();
    for name in args.allow.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let option: SchemaEvolutionOption = name
            .parse()
            .map_err(|e: Error| Error::invalid_config("--allow", e.message()))?;
        builder = builder.allow(option);
    }
    builder = builder.required_columns(args.required_columns.iter().cloned());
    if let Some(handling) = &args.on_incompatible {
        let handling: IncompatibleSchemaHandling = handling
            .parse()
            .map_err(|e: Error| Error::invalid_config("--on-incompatible", e.message()))?;
        builder = builder.on_incompatible(handling);
    }
    if let Some(handling) = &args.on_unverifiable {
        let handling: UnverifiableFileHandling = handling
            .parse()
            .map_err(|e: Error| Error::invalid_config("--on-unverifiable", e.message()))?;
        builder = builder.on_unverifiable(handling);
    }
    if args.dry_run {
        builder = builder.dry_run(true);
    }
    // A dry run, pinned columns or a handling without --allow mean "no evolution, but
    // check and report": the configuration's rule that such settings need an option is
    // about job files, where they would silently do nothing.
    if args.allow.is_empty()
        && (args.dry_run
            || !args.required_columns.is_empty()
            || args.on_incompatible.is_some()
            || args.on_unverifiable.is_some())
    {
        return Err(Error::invalid_config(
            "--allow",
            "--dry-run, --required-column, --on-incompatible and --on-unverifiable need at least one --allow change \
             (without one, files must fit the table as it is and there is nothing to plan)",
        ));
    }
    builder.build()
}

fn options(args: &AddFilesArgs) -> Result<AddFilesOptions> {
    let disposition: CreateDisposition = args
        .create_disposition
        .parse()
        .map_err(|e: Error| Error::invalid_config("--create-disposition", e.message()))?;
    let mut builder = AddFilesOptions::builder()
        .catalog(catalog(&args.target.catalog)?)
        .table(args.target.table.clone())
        .create_disposition(disposition)
        .schema_evolution(evolution(args)?)
        .max_concurrent_reads(args.max_concurrent_reads);
    let mut layout = TableCreateOptions::builder();
    for field in &args.partition_fields {
        layout = layout.partition_field(field.clone());
    }
    for field in &args.sort_fields {
        layout = layout.sort_field(field.clone());
    }
    for property in &args.table_properties {
        let (key, value) = property
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| {
                Error::invalid_config("--table-property", format!("{property:?} is not KEY=VALUE"))
            })?;
        layout = layout.property(key.trim(), value);
    }
    builder = builder.table_options(layout.build()?);
    if let Some(prefix) = &args.location_prefix {
        builder = builder.location_prefix(prefix.clone());
    }
    if let Some(n) = args.window {
        builder = builder.window(BatchWindow::Files(n));
    }
    if let Some(n) = args.files_per_manifest {
        builder = builder.files_per_manifest(n);
    }
    builder.build()
}

/// A bar counting footers read, drawn on stderr for long inputs when it is a terminal.
fn progress_bar(files: usize, quiet: bool) -> ProgressBar {
    let visible = !quiet && files >= PROGRESS_FROM && std::io::stderr().is_terminal();
    let target = if visible {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(files as u64), target);
    bar.set_style(
        ProgressStyle::with_template("{spinner} reading footers [{wide_bar}] {pos}/{len} ({eta})")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: IcebergCommand,
    }

    fn parse(args: &[&str]) -> AddFilesArgs {
        let mut all = vec!["iceberg", "add-files"];
        all.extend_from_slice(args);
        let IcebergCommand::AddFiles(args) = Cli::try_parse_from(all).unwrap().command else {
            panic!("add-files parses as add-files");
        };
        *args
    }

    #[test]
    fn flags_build_the_options() {
        let args = parse(&[
            "--catalog-uri",
            "sqlite:///tmp/c.db",
            "--warehouse",
            "/tmp/wh",
            "--table",
            "db.t",
            "--allow",
            "field-addition,type-promotion",
            "--required-column",
            "id",
            "--on-incompatible",
            "route-to-errors",
            "--on-unverifiable",
            "accept",
            "--partition-field",
            "day(ts)",
            "--partition-field",
            "bucket(16,id)",
            "--location-prefix",
            "/data",
            "--window",
            "100",
            "--dry-run",
            "a.parquet",
            "b.parquet",
        ]);
        let o = options(&args).unwrap();
        let e = &o.schema_evolution;
        assert!(
            e.allows(SchemaEvolutionOption::AllowFieldAddition)
                && e.allows(SchemaEvolutionOption::AllowTypePromotion)
        );
        assert_eq!(e.required_columns(), ["id"]);
        assert_eq!(e.on_incompatible(), IncompatibleSchemaHandling::RouteToErrors);
        assert_eq!(e.on_unverifiable(), UnverifiableFileHandling::Accept);
        assert!(e.dry_run());
        assert_eq!(o.table_options.partition_fields().len(), 2);
        assert_eq!(o.window, BatchWindow::Files(100));
        assert_eq!(o.location_prefix.as_deref(), Some("/data"));
        assert!(matches!(o.catalog, CatalogConfig::Sql { .. }));
        let rest = parse(&[
            "--catalog-uri",
            "http://127.0.0.1:8181",
            "--table",
            "db.t",
            "x.parquet",
        ]);
        assert!(matches!(
            options(&rest).unwrap().catalog,
            CatalogConfig::Rest { .. }
        ));
    }

    #[test]
    fn bad_flags_are_usage_errors_naming_the_flag() {
        let field = |args: &[&str]| {
            let err = options(&parse(args)).unwrap_err();
            assert_eq!(ExitStatus::of(&err), ExitStatus::Usage);
            err.context_value("field").map(str::to_string)
        };
        let base = ["--catalog-uri", "c.db", "--warehouse", "wh", "--table", "db.t"];
        let with = |extra: &[&'static str]| [&base[..], extra, &["f.parquet"]].concat();
        assert_eq!(field(&with(&["--allow", "teleport"])).as_deref(), Some("--allow"));
        assert_eq!(
            field(&with(&["--on-incompatible", "explode"])).as_deref(),
            Some("--on-incompatible")
        );
        assert_eq!(field(&with(&["--dry-run"])).as_deref(), Some("--allow"));
        assert_eq!(
            field(&with(&["--create-disposition", "maybe"])).as_deref(),
            Some("--create-disposition")
        );
        assert_eq!(
            field(&with(&["--table-property", "novalue"])).as_deref(),
            Some("--table-property")
        );
        assert_eq!(
            field(&["--catalog-uri", "c.db", "--table", "db.t", "f.parquet"]).as_deref(),
            Some("--warehouse")
        );
    }
}
