//! AddFiles: register existing Parquet files into an Iceberg table, evolving its schema.
//!
//! ```no_run
//! # async fn example() -> outflow_core::Result<()> {
//! use outflow_core::{SchemaEvolutionConfig, SchemaEvolutionOption};
//! use outflow_iceberg::CatalogConfig;
//! use outflow_iceberg::add_files::{AddFiles, AddFilesOptions};
//!
//! let options = AddFilesOptions::builder()
//!     .catalog(CatalogConfig::sqlite_in("./lake"))
//!     .table("analytics.events")
//!     .schema_evolution(
//!         SchemaEvolutionConfig::builder()
//!             .allow(SchemaEvolutionOption::AllowFieldAddition)
//!             .build()?,
//!     )
//!     .build()?;
//! let result = AddFiles::connect(options).await?.run(&["/data/events/a.parquet"]).await?;
//! println!("{}", result.render());
//! # Ok(())
//! # }
//! ```
//!
//! A run reads the footers of its files (only footers, many at a time), then, per window of
//! files:
//! 1. groups the files by schema (with the null evidence their statistics give) and plans
//!    the table's schema with the shared evolution planner;
//! 2. under `on_incompatible: fail`, stops there when any file is incompatible, listing
//!    every one; under `route_to_errors` the incompatible files become errors;
//! 3. creates the table (from the union of the schemas, with a name mapping) or makes at
//!    most one schema commit, which also keeps the name mapping current;
//! 4. builds a data file per compatible file, with metrics from its footer keyed by table
//!    field ids and its partition values (see `partition`);
//! 5. commits them in one snapshot whose summary carries a commit id derived from the
//!    files, so a rerun commits nothing new.
//!
//! Files already in the table are skipped, and a path given twice is handled once. A file
//! that cannot be read (missing, empty, not Parquet, truncated, corrupt) is an error for
//! that file, never a failure of the run. A dry run plans and checks everything and commits
//! nothing.

mod footer;
#[cfg(test)]
mod fuzz;
mod metrics;
mod objects;
mod options;
mod partition;
mod report;
mod schema;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use iceberg::io::FileIO;
use iceberg::spec::{DataFile, PartitionSpec, Schema as IcebergSchema};
use iceberg::table::Table;
use iceberg::{TableIdent, TableRequirement, TableUpdate};
use outflow_core::evolution::{EvolutionPlan, Verdict};
use outflow_core::schema::{InputSchema, NameMapping, Schema};
use outflow_core::{
    CreateDisposition, Error, ErrorKind, EvolutionPlanner, IncompatibleSchemaHandling, Result,
    SchemaEvolutionConfig,
};

pub use self::options::{AddFilesOptions, AddFilesOptionsBuilder, BatchWindow, DEFAULT_MAX_CONCURRENT_READS};
pub use self::report::{
    AddFilesResult, ChangeReport, CommittedSnapshot, FileError, FileErrorKind, SchemaReport, SkipReason,
    SkippedFile,
};

use self::footer::FileFacts;
use self::metrics::Resolved;
pub(crate) use self::metrics::written_data_file;
use self::objects::Objects;
use self::schema::ConvertedSchema;
pub(crate) use self::schema::SchemaCache;
use crate::admin::create_with_name_mapping;
use crate::client::IcebergCatalog;
use crate::client::IcebergResultExt;
use crate::commit::{
    CommitOutcome, DataCommit, SnapshotKind, commit_attempt, commit_id_for, commit_schema, find_commit,
    name_mapping, updated_name_mapping,
};
use crate::partition::partition_spec;
use crate::schema::{from_iceberg_schema, parse_table_ident, table_name, to_iceberg_schema};

/// How many times a window's schema change is re-planned after losing a race.
const SCHEMA_COMMIT_ATTEMPTS: usize = 5;

/// How far a run has got, reported after each footer read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Footers read so far.
    pub read: usize,
    /// Footers to read in all.
    pub total: usize,
}

type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// Registers existing Parquet files into an Iceberg table; see the module docs.
#[derive(Clone)]
pub struct AddFiles {
    catalog: IcebergCatalog,
    options: AddFilesOptions,
    progress: Option<ProgressFn>,
    objects: Arc<Objects>,
}

impl std::fmt::Debug for AddFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddFiles")
            .field("table", &self.options.table)
            .finish_non_exhaustive()
    }
}

impl AddFiles {
    /// Validates the options and connects to their catalog, its reads retried under the
    /// options' retry policy.
    pub async fn connect(options: AddFilesOptions) -> Result<AddFiles> {
        options.validate()?;
        let catalog = IcebergCatalog::connect_with_retry(&options.catalog, &options.retry).await?;
        AddFiles::with_catalog(catalog, options)
    }

    /// AddFiles on an already connected catalog (its `catalog` option is not used).
    pub fn with_catalog(catalog: IcebergCatalog, options: AddFilesOptions) -> Result<AddFiles> {
        options.validate()?;
        let objects = Arc::new(Objects::new(catalog.storage_settings().clone()));
        Ok(AddFiles {
            catalog,
            options,
            progress: None,
            objects,
        })
    }

    /// Calls `report` after each footer read (for progress bars).
    pub fn on_progress(mut self, report: impl Fn(Progress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(report));
        self
    }

    /// The options.
    pub fn options(&self) -> &AddFilesOptions {
        &self.options
    }

    /// Registers `files` (paths, or URLs such as `file:///data/a.parquet`). Problems with
    /// single files are reported in the result; an error means the run itself failed (the
    /// catalog is unreachable, the table is missing under `create_never`, a commit failed).
    pub async fn run<S: AsRef<str>>(&self, files: &[S]) -> Result<AddFilesResult> {
        let ident = parse_table_ident(&self.options.table)?;
        let name = table_name(&ident);
        let config = &self.options.schema_evolution;
        let mut run = Run {
            add: self,
            ident,
            name: name.clone(),
            table: None,
            registered: HashSet::new(),
            registered_at: None,
            given: HashMap::new(),
            result: AddFilesResult {
                table: name.clone(),
                dry_run: config.dry_run(),
                files_given: files.len(),
                ..AddFilesResult::default()
            },
            read: Arc::new(AtomicUsize::new(0)),
            total: 0,
        };
        run.table = self.catalog.load_table(&run.ident).await?;
        if run.table.is_none() && self.options.create_disposition == CreateDisposition::CreateNever {
            return Err(Error::not_found("table", &name).with_context("create_disposition", "create_never"));
        }
        if let Some(table) = &run.table {
            run.registered = registered_files(table).await?;
            run.registered_at = table.metadata().current_snapshot_id();
        }

        let (files, unlisted) = run.expand(files).await;
        run.result.files_given = files.len() + unlisted;
        // Distinct inputs in order, the first occurrence kept.
        let mut seen: HashMap<String, bool> = HashMap::new();
        let mut todo: Vec<Input> = Vec::new();
        for given in &files {
            let given = given.as_str();
            let location = match location(given) {
                Ok(l) => l,
                Err(reason) => {
                    run.result.errors.push(FileError {
                        path: given.to_string(),
                        kind: FileErrorKind::Unreadable,
                        reason,
                    });
                    continue;
                }
            };
            let key = comparable(&location).to_string();
            match seen.get_mut(&key) {
                Some(reported) => {
                    if !*reported {
                        *reported = true;
                        run.result.skipped.push(SkippedFile {
                            path: given.to_string(),
                            reason: SkipReason::DuplicateInput,
                        });
                    }
                    continue;
                }
                None => {
                    seen.insert(key.clone(), false);
                }
            }
            if run.registered.contains(&key) {
                run.result.skipped.push(SkippedFile {
                    path: given.to_string(),
                    reason: SkipReason::AlreadyRegistered,
                });
                continue;
            }
            run.given.insert(key, given.to_string());
            todo.push(Input {
                given: given.to_string(),
                location,
            });
        }
        run.total = todo.len();
        let size = match self.options.window {
            BatchWindow::All => todo.len().max(1),
            BatchWindow::Files(n) => n,
        };
        let windows: Vec<Vec<Input>> = todo.chunks(size).map(<[Input]>::to_vec).collect();
        let count = windows.len();
        for (index, window) in windows.into_iter().enumerate() {
            if run.result.rejected {
                run.result.skipped.extend(window.into_iter().map(|i| SkippedFile {
                    path: i.given,
                    reason: SkipReason::NotProcessed,
                }));
                continue;
            }
            tracing::info!(table = %name, window = index, of = count, files = window.len(), "adding files");
            run.window(index, window).await?;
        }
        Ok(run.result)
    }
}

/// One input file: as given, and where it is.
#[derive(Clone, Debug)]
struct Input {
    given: String,
    location: String,
}

/// Where a given path or URL is, as the table will record it.
///
/// Local files are recorded by their absolute path, verbatim and without a scheme: a path
/// is a path whatever it holds (spaces, `#`, `?`, `%`, newlines), and the scheme-less form
/// is the one every reader opens as it is written. iceberg-rust strips `file://` without
/// decoding, PyIceberg splits a `file://` location at `#` and `?`, and a `%20` means a
/// space to a URL parser but two digits to a file system. A `file:` URL is read as a URL
/// (percent escapes decoded) and recorded as its path; other URLs (`s3://...`) stay as
/// they are.
fn location(given: &str) -> std::result::Result<String, String> {
    if given.trim().is_empty() {
        return Err("the path is blank".into());
    }
    if given.starts_with("file:") {
        let url = url::Url::parse(given).map_err(|e| format!("{given:?} is not a valid URL: {e}"))?;
        let path = url
            .to_file_path()
            .map_err(|_| format!("{given:?} names no local file"))?;
        return path_location(&path);
    }
    if has_url_scheme(given) {
        return Ok(given.to_string());
    }
    let path = std::path::absolute(given).map_err(|e| format!("{given:?}: {e}"))?;
    path_location(&path)
}

fn path_location(path: &std::path::Path) -> std::result::Result<String, String> {
    path.to_str().map(str::to_string).ok_or_else(|| {
        format!(
            "{} is not valid UTF-8, which Iceberg locations must be",
            path.display()
        )
    })
}

/// Whether `given` starts with a URL scheme and `://` (`s3://`, `gs://`): a local path
/// never does unless its first directory's name ends in `:`, which is then read as a URL.
pub(crate) fn has_url_scheme(given: &str) -> bool {
    given.split_once("://").is_some_and(|(scheme, _)| {
        let mut chars = scheme.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// A location in a form where the spellings of one local file agree (`file:/a`,
/// `file:///a` and `/a` all give `/a`).
fn comparable(location: &str) -> &str {
    location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
        .unwrap_or(location)
}

/// The data files of the table's current snapshot, by [`comparable`] location.
async fn registered_files(table: &Table) -> Result<HashSet<String>> {
    Ok(crate::commit::live_data_files(table)
        .await?
        .iter()
        .map(|(_, file)| comparable(file.file_path()).to_string())
        .collect())
}

/// Files sharing one schema (and the same null evidence) within a window.
struct Group {
    /// The planner's input: the schema, with null counts summed over the files.
    input: InputSchema,
    /// The schema as converted from the first file's footer.
    converted: Arc<ConvertedSchema>,
    /// Indexes into the window's readable files.
    members: Vec<usize>,
}

impl Group {
    /// Why the files' field ids do not name `table`'s columns, or `None` when they do or the
    /// files carry none.
    fn id_mismatch(&self, table: &Schema) -> Option<String> {
        self.uses_ids()
            .then(|| ids_match(&self.input.schema, table))
            .flatten()
    }

    /// Whether the files carry field ids (otherwise none of their columns does).
    fn uses_ids(&self) -> bool {
        self.converted.uses_ids
    }

    /// Whether a file of schema `converted` with null evidence `nulls` plans as this
    /// group's files do.
    fn takes(&self, converted: &Arc<ConvertedSchema>, nulls: &BTreeMap<String, u64>) -> bool {
        (Arc::ptr_eq(&self.converted, converted) || self.input.schema == converted.schema)
            && same_null_evidence(&self.input.null_counts, nulls)
    }
}

/// A window's files grouped by what the planner weighs ([`Group::takes`]), null counts
/// summed, so thousands of files sharing a schema are planned as one input.
#[derive(Default)]
struct Grouping {
    groups: Vec<Group>,
    by_hash: HashMap<u64, Vec<usize>>,
}

impl Grouping {
    /// Puts file `i` in its group, moving its null counts there: the file keeps its leaves
    /// and a handle on its schema, which is all its data file needs.
    fn add(&mut self, i: usize, facts: &mut FileFacts) {
        let nulls = std::mem::take(&mut facts.schema.null_counts);
        let converted = &facts.schema.converted;
        let hash = evidence_hash(converted.hash, &nulls);
        let groups = &mut self.groups;
        let found = self
            .by_hash
            .get(&hash)
            .and_then(|gs| gs.iter().copied().find(|&g| groups[g].takes(converted, &nulls)));
        match found {
            Some(g) => {
                let group = &mut groups[g];
                group.members.push(i);
                for (path, n) in &nulls {
                    if let Some(sum) = group.input.null_counts.get_mut(path) {
                        *sum = sum.saturating_add(*n);
                    }
                }
            }
            None => {
                self.by_hash.entry(hash).or_default().push(groups.len());
                groups.push(Group {
                    input: InputSchema {
                        schema: converted.schema.clone(),
                        null_counts: nulls,
                    },
                    converted: converted.clone(),
                    members: vec![i],
                });
            }
        }
    }
}

/// Each group's files as given, which is how reports and errors name them.
fn given_paths(groups: &[Group], files: &[(Input, FileFacts)]) -> Vec<Vec<String>> {
    groups
        .iter()
        .map(|g| g.members.iter().map(|&m| files[m].0.given.clone()).collect())
        .collect()
}

/// Whether two files' null counts are the same evidence to the planner: the same columns
/// counted, each with no nulls in both or some in both.
fn same_null_evidence(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((pa, na), (pb, nb))| pa == pb && (*na == 0) == (*nb == 0))
}

/// A hash agreeing with [`Group::takes`], from the schema's hash and the null evidence.
fn evidence_hash(schema_hash: u64, nulls: &BTreeMap<String, u64>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    schema_hash.hash(&mut h);
    for (path, n) in nulls {
        path.hash(&mut h);
        (*n == 0).hash(&mut h);
    }
    h.finish()
}

/// State of one run.
struct Run<'a> {
    add: &'a AddFiles,
    ident: TableIdent,
    name: String,
    table: Option<Table>,
    /// Data files in the table, by comparable location.
    registered: HashSet<String>,
    /// The snapshot `registered` was read at (with this run's own commits added since).
    registered_at: Option<i64>,
    /// Each input as the caller gave it, by comparable location: how reports name files.
    given: HashMap<String, String>,
    result: AddFilesResult,
    read: Arc<AtomicUsize>,
    total: usize,
}

/// What planning a window decided.
struct Decision {
    /// The plan to report (the creation plan when the table was created).
    report: EvolutionPlan,
    /// Whether each group can be registered.
    compatible: Vec<bool>,
    /// When the table does not exist (a dry run that would create it): the schema and
    /// partition spec it would have.
    simulated: Option<(IcebergSchema, PartitionSpec)>,
}

/// Whether each of the plan's inputs can be registered.
fn compatibility(plan: &EvolutionPlan) -> Vec<bool> {
    plan.verdicts.iter().map(|v| v.verdict.is_compatible()).collect()
}

/// Whether `on_incompatible: fail` stops the run over these verdicts (one is incompatible).
fn fails_on_incompatible(config: &SchemaEvolutionConfig, compatible: &[bool]) -> bool {
    compatible.iter().any(|c| !*c) && config.on_incompatible() == IncompatibleSchemaHandling::Fail
}

/// What a window's data files are built against.
struct Target {
    schema: Arc<IcebergSchema>,
    spec: Arc<PartitionSpec>,
    /// `schema` in Outflow's model.
    current: Schema,
    /// The name mapping that files without field ids are resolved through.
    mapping: Option<NameMapping>,
    /// The `location_prefix` option as a location: where Hive partition directories start.
    prefix: Option<String>,
}

impl Run<'_> {
    /// The inputs with object prefixes and globs replaced by the objects they name; one
    /// that cannot be listed, or names none, is an error for that input.
    /// Also returns how many inputs gave errors.
    async fn expand<S: AsRef<str>>(&mut self, given: &[S]) -> (Vec<String>, usize) {
        let mut out = Vec::with_capacity(given.len());
        let errors = self.result.errors.len();
        for item in given {
            let item = item.as_ref();
            match self.add.objects.expand(item).await {
                None => out.push(item.to_string()),
                Some(Ok(found)) if found.is_empty() => {
                    self.error(
                        item,
                        FileErrorKind::Unreadable,
                        format!("no Parquet object matches {item}"),
                    );
                }
                Some(Ok(found)) => out.extend(found),
                Some(Err(e)) => self.error(item, FileErrorKind::Unreadable, e.to_string()),
            }
        }
        (out, self.result.errors.len() - errors)
    }

    fn error(&mut self, path: &str, kind: FileErrorKind, reason: impl Into<String>) {
        self.result.errors.push(FileError {
            path: path.to_string(),
            kind,
            reason: reason.into(),
        });
    }

    fn file_io(&self) -> FileIO {
        match &self.table {
            Some(t) => t.file_io().clone(),
            None => FileIO::new_with_fs(),
        }
    }

    /// Registers one window of files: reads their footers, plans the table's schema for the
    /// schemas they share, and commits the files that fit in one snapshot.
    async fn window(&mut self, index: usize, inputs: Vec<Input>) -> Result<()> {
        let (files, groups) = self.read_footers(inputs).await;
        let groups = self.refuse_foreign_ids(groups, &files);
        if groups.is_empty() {
            return Ok(());
        }
        let paths = given_paths(&groups, &files);
        let decision = self.decide(&groups).await?;
        self.report(index, &decision.report, &groups, &paths);
        if self.reject_incompatible(&decision, &paths).is_break() {
            return Ok(());
        }
        // Every file was turned away, each an error already: nothing to register, and when
        // the table was to be created from them, no table either.
        if !decision.compatible.iter().any(|c| *c) {
            return Ok(());
        }
        let target = self.target(decision.simulated)?;
        let data_files = self.data_files(&files, &groups, &paths, &decision.compatible, &target);
        // Freeing 10,000 footers' facts takes milliseconds: not on the way to the commit.
        tokio::task::spawn_blocking(move || drop(files));
        self.register(index, data_files).await
    }

    /// Reads the footers of the window's files, many at a time, reporting progress, and
    /// groups them as they come; a file that cannot be read is an error for that file alone.
    async fn read_footers(&mut self, inputs: Vec<Input>) -> (Vec<(Input, FileFacts)>, Vec<Group>) {
        let add = self.add;
        let io = self.file_io();
        let read = self.read.clone();
        let total = self.total;
        let progress = add.progress.clone();
        let on_done = move || {
            let n = read.fetch_add(1, Ordering::Relaxed) + 1;
            if let Some(report) = &progress {
                report(Progress { read: n, total });
            }
        };
        let locations = inputs.iter().map(|i| i.location.clone()).collect();
        let mut files = Vec::new();
        let mut grouping = Grouping::default();
        let mut failed = Vec::new();
        let mut inputs = inputs.into_iter();
        footer::read_each(
            locations,
            &add.objects,
            &io,
            add.options.max_concurrent_reads,
            &on_done,
            |result| {
                let input = inputs.next().expect("one result per input");
                match result {
                    Ok(mut facts) => {
                        grouping.add(files.len(), &mut facts);
                        files.push((input, facts));
                    }
                    Err(failure) => failed.push((input.given, failure)),
                }
            },
        )
        .await;
        for (given, failure) in failed {
            self.error(&given, failure.kind, failure.message);
        }
        (files, grouping.groups)
    }

    /// Turns away the groups whose field ids name other columns than the table's, each of
    /// their files an error: readers resolve columns by these ids and would read the wrong ones.
    fn refuse_foreign_ids(&mut self, groups: Vec<Group>, files: &[(Input, FileFacts)]) -> Vec<Group> {
        let Some(table) = &self.table else {
            return groups;
        };
        let current = from_iceberg_schema(table.metadata().current_schema());
        let mut kept = Vec::new();
        for group in groups {
            match group.id_mismatch(&current) {
                Some(reason) => {
                    for &m in &group.members {
                        self.error(&files[m].0.given, FileErrorKind::FieldIds, reason.clone());
                    }
                }
                None => kept.push(group),
            }
        }
        kept
    }

    /// Makes each file of an incompatible group an error; breaks when `on_incompatible: fail`
    /// stops the run here, the window's other files then skipped as not processed.
    fn reject_incompatible(&mut self, decision: &Decision, paths: &[Vec<String>]) -> ControlFlow<()> {
        let verdicts = &decision.report.verdicts;
        for (g, _) in decision.compatible.iter().enumerate().filter(|(_, c)| !**c) {
            let v = &verdicts[g];
            let kind = if v.verdict == Verdict::Unverifiable {
                FileErrorKind::Unverifiable
            } else {
                FileErrorKind::Incompatible
            };
            let reason = v
                .reasons
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            for path in &paths[g] {
                self.error(path, kind, reason.clone());
            }
        }
        if !fails_on_incompatible(&self.add.options.schema_evolution, &decision.compatible) {
            return ControlFlow::Continue(());
        }
        self.result.rejected = true;
        for (g, _) in decision.compatible.iter().enumerate().filter(|(_, c)| **c) {
            self.result
                .skipped
                .extend(paths[g].iter().map(|path| SkippedFile {
                    path: path.clone(),
                    reason: SkipReason::NotProcessed,
                }));
        }
        ControlFlow::Break(())
    }

    /// What the window's data files are built against: the table as `decide` left it or, in
    /// a dry run, as the real run would have it before registering them.
    fn target(&self, simulated: Option<(IcebergSchema, PartitionSpec)>) -> Result<Target> {
        let (schema, spec) = match (&self.table, simulated) {
            (_, Some((schema, spec))) => (Arc::new(schema), Arc::new(spec)),
            (Some(table), None) => {
                let md = table.metadata();
                (md.current_schema().clone(), md.default_partition_spec().clone())
            }
            (None, None) => return Err(Error::internal("no table to register files into")),
        };
        let current = from_iceberg_schema(&schema);
        let existing = self.table.as_ref().map(name_mapping).transpose()?.flatten();
        let mapping = if self.add.options.schema_evolution.dry_run() {
            // What the real run would store before registering the files.
            Some(match existing {
                Some(m) => m.updated_with(&current),
                None => NameMapping::from_schema(&current),
            })
        } else {
            existing
        };
        let prefix = self
            .add
            .options
            .location_prefix
            .as_deref()
            .map(location)
            .transpose()
            .map_err(|e| Error::invalid_config("location_prefix", e))?;
        Ok(Target {
            schema,
            spec,
            current,
            mapping,
            prefix,
        })
    }

    /// A data file for each file of the compatible groups, with metrics keyed by the table's
    /// field ids and partition values; a file that cannot have one is an error.
    fn data_files(
        &mut self,
        files: &[(Input, FileFacts)],
        groups: &[Group],
        paths: &[Vec<String>],
        compatible: &[bool],
        target: &Target,
    ) -> Vec<DataFile> {
        let mut data_files = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            if !compatible[g] {
                continue;
            }
            // The group's files share a schema, so the first resolves the columns of all.
            let first = &files[group.members[0]].1;
            let resolved = match group.id_mismatch(&target.current) {
                Some(reason) => Err(reason),
                None => metrics::resolve_leaves(
                    &first.schema.leaves,
                    group.uses_ids(),
                    &target.schema,
                    target.mapping.as_ref(),
                ),
            };
            let resolved = match resolved {
                Ok(r) => r,
                Err(reason) => {
                    let kind = if group.uses_ids() {
                        FileErrorKind::FieldIds
                    } else {
                        FileErrorKind::Incompatible
                    };
                    for path in &paths[g] {
                        self.error(path, kind, reason.clone());
                    }
                    continue;
                }
            };
            let built = on_cores(&group.members, |&m| {
                data_file(
                    &files[m].1,
                    &resolved,
                    &target.spec,
                    &target.schema,
                    target.prefix.as_deref(),
                )
            });
            for (&m, built) in group.members.iter().zip(built) {
                match built {
                    Ok(file) => data_files.push(file),
                    Err(reason) => self.error(&files[m].0.given, FileErrorKind::Partition, reason),
                }
            }
        }
        data_files
    }

    /// Counts the data files into the result and, unless this is a dry run, commits them in
    /// one snapshot whose commit id follows the files, so a rerun commits nothing new.
    async fn register(&mut self, index: usize, data_files: Vec<DataFile>) -> Result<()> {
        let add = self.add;
        if add.options.schema_evolution.dry_run() || data_files.is_empty() {
            self.result.files_added += data_files.len();
            self.result.records_added += data_files.iter().map(DataFile::record_count).sum::<u64>();
            return Ok(());
        }
        let table = self.table.as_ref().expect("a table exists outside dry runs");
        let mut commit = DataCommit {
            kind: SnapshotKind::Append,
            commit_id: commit_id_for(
                &format!("add-files:{}", self.name),
                data_files
                    .iter()
                    .map(|f| format!("{}:{}", f.file_path(), f.file_size_in_bytes())),
            ),
            files_per_manifest: add.options.files_per_manifest,
            partition_spec_id: table.metadata().default_partition_spec_id(),
            files: data_files,
            deletes: Vec::new(),
            summary: Default::default(),
            checkpoint: None,
        };
        let outcome = self.commit_unregistered(&mut commit).await?;
        let records: u64 = commit.files.iter().map(DataFile::record_count).sum();
        self.result.files_added += commit.files.len();
        self.result.records_added += records;
        for f in &commit.files {
            self.registered.insert(comparable(f.file_path()).to_string());
        }
        if let Some(outcome) = outcome {
            self.result.snapshots.push(CommittedSnapshot {
                window: index,
                snapshot_id: outcome.snapshot_id(),
                commit_id: commit.commit_id.clone(),
                files: commit.files.len(),
                records,
                bytes: commit.files.iter().map(DataFile::file_size_in_bytes).sum(),
                already_committed: matches!(outcome, CommitOutcome::AlreadyCommitted { .. }),
            });
        }
        self.table = Some(add.catalog.require_table(&self.ident).await?);
        Ok(())
    }

    /// Commits the window's files, retrying lost races. Another run may register some of
    /// the same files meanwhile, so whenever the table has moved past the snapshot this run
    /// last read its files at, they are read again and those it now holds leave the commit,
    /// reported as already registered: runs that overlap register each file once. `None`
    /// when no file was left to commit. Each attempt ends by the retry deadline, so the
    /// whole commit does; one cut short is settled by the commit id on the next.
    async fn commit_unregistered(&mut self, commit: &mut DataCommit) -> Result<Option<CommitOutcome>> {
        let add = self.add;
        let policy = &add.options.retry;
        let what = format!("commit to {}", self.name);
        let mut retrying = policy.start(what.clone());
        loop {
            let limit = retrying.attempt_limit(policy.deadline());
            let attempt = self.commit_once(commit, retrying.attempt());
            match add.catalog.attempt_within(&what, limit, attempt).await {
                Ok(outcome) => return Ok(outcome),
                Err(err) => retrying.after(err).await?,
            }
        }
    }

    /// One attempt of [`Run::commit_unregistered`]: reload, leave out what the table now
    /// holds, commit the rest.
    async fn commit_once(&mut self, commit: &mut DataCommit, attempt: u32) -> Result<Option<CommitOutcome>> {
        let add = self.add;
        let table = add.catalog.require_table(&self.ident).await?;
        if let Some(snapshot_id) = find_commit(&table, &commit.commit_id) {
            self.registered_at = None;
            return Ok(Some(CommitOutcome::AlreadyCommitted { snapshot_id }));
        }
        let now = table.metadata().current_snapshot_id();
        if now != self.registered_at {
            self.registered = registered_files(&table).await?;
            self.registered_at = now;
            self.drop_registered(commit);
            if commit.files.is_empty() {
                return Ok(None);
            }
        }
        let outcome = commit_attempt(&add.catalog, &table, commit, attempt).await?;
        self.registered_at = Some(outcome.snapshot_id());
        Ok(Some(outcome))
    }

    /// Takes the files the table already holds out of `commit`, each reported as already
    /// registered.
    fn drop_registered(&mut self, commit: &mut DataCommit) {
        let (taken, left): (Vec<DataFile>, Vec<DataFile>) = std::mem::take(&mut commit.files)
            .into_iter()
            .partition(|f| self.registered.contains(comparable(f.file_path())));
        commit.files = left;
        for f in taken {
            let path = self.given.get(comparable(f.file_path())).cloned();
            self.result.skipped.push(SkippedFile {
                path: path.unwrap_or_else(|| f.file_path().to_string()),
                reason: SkipReason::AlreadyRegistered,
            });
        }
    }

    /// Plans the window and makes the table fit: creation, or at most one schema commit
    /// (re-planned when another writer changed the table first).
    async fn decide(&mut self, groups: &[Group]) -> Result<Decision> {
        let inputs: Vec<InputSchema> = groups.iter().map(|g| g.input.clone()).collect();
        let needs_mapping = groups.iter().any(|g| !g.uses_ids());
        let mut creation: Option<EvolutionPlan> = None;
        for _ in 0..SCHEMA_COMMIT_ATTEMPTS {
            let Some(table) = self.table.clone() else {
                match self.create_table(groups).await? {
                    ControlFlow::Break(decision) => return Ok(decision),
                    ControlFlow::Continue(created) => creation = created,
                }
                continue;
            };
            if let Some(mut decision) = self.fit_table(&table, &inputs, needs_mapping).await? {
                // A window that created the table reports that plan: its changes are the
                // columns the table was created with.
                if let Some(plan) = creation {
                    decision.report = plan;
                }
                return Ok(decision);
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "the schema of {} kept changing while AddFiles planned it ({SCHEMA_COMMIT_ATTEMPTS} attempts)",
                self.name
            ),
        ))
    }

    /// Plans the table's creation from the window and creates it, continuing with the plan
    /// when this run did; breaks with the decision in a dry run, or when the table would
    /// take no file (or, under `on_incompatible: fail`, not every one).
    async fn create_table(
        &mut self,
        groups: &[Group],
    ) -> Result<ControlFlow<Decision, Option<EvolutionPlan>>> {
        let add = self.add;
        let config = &add.options.schema_evolution;
        let plan = creation_plan(config, groups)?;
        let compatible = compatibility(&plan);
        let stop = !compatible.iter().any(|c| *c) || fails_on_incompatible(config, &compatible);
        if stop || config.dry_run() {
            let simulated = match (&plan.schema, stop) {
                (Some(schema), false) => Some(self.simulate_creation(schema)?),
                _ => None,
            };
            self.result.table_created = !stop;
            return Ok(ControlFlow::Break(Decision {
                report: plan,
                compatible,
                simulated,
            }));
        }
        let schema = plan
            .schema
            .as_ref()
            .expect("a plan with compatible inputs has a schema");
        let (table, created) =
            create_with_name_mapping(&add.catalog, &self.ident, schema, &[], &add.options.table_options)
                .await?;
        self.result.table_created |= created;
        // Re-planned against the table as created (iceberg-rust renumbers ids; or another
        // writer created it first).
        self.table = Some(table);
        Ok(ControlFlow::Continue(created.then_some(plan)))
    }

    /// Plans the window against `table` and commits what the plan needs; `None` when another
    /// writer changed the table first (it is reloaded, to plan again).
    async fn fit_table(
        &mut self,
        table: &Table,
        inputs: &[InputSchema],
        needs_mapping: bool,
    ) -> Result<Option<Decision>> {
        let add = self.add;
        let config = &add.options.schema_evolution;
        let current = from_iceberg_schema(table.metadata().current_schema());
        let mapping = name_mapping(table)?;
        let mut planner = EvolutionPlanner::new(config)
            .table(&current)
            .last_column_id(table.metadata().last_column_id());
        if let Some(mapping) = &mapping {
            planner = planner.name_mapping(mapping);
        }
        let plan = planner.plan(inputs)?;
        let compatible = compatibility(&plan);
        let failing = fails_on_incompatible(config, &compatible);
        if config.dry_run() || failing || !compatible.iter().any(|c| *c) {
            let simulated = if config.dry_run() && plan.changes_schema() && !failing {
                let schema = plan.schema.as_ref().expect("a compatible plan has a schema");
                Some(simulate_evolution(table, schema)?)
            } else {
                None
            };
            return Ok(Some(Decision {
                report: plan,
                compatible,
                simulated,
            }));
        }
        let committed = self
            .commit_table_changes(table, &current, mapping.as_ref(), &plan, needs_mapping)
            .await;
        match committed {
            Err(e) if e.kind() != ErrorKind::Conflict => Err(e),
            committed => {
                // Reloaded either way: registering needs this commit's table, planning again
                // the other writer's.
                self.table = Some(add.catalog.require_table(&self.ident).await?);
                Ok(committed.is_ok().then_some(Decision {
                    report: plan,
                    compatible,
                    simulated: None,
                }))
            }
        }
    }

    /// Commits what the plan needs: the evolved schema with its name mapping, or else only
    /// the name mapping brought up to date.
    async fn commit_table_changes(
        &mut self,
        table: &Table,
        current: &Schema,
        mapping: Option<&NameMapping>,
        plan: &EvolutionPlan,
        needs_mapping: bool,
    ) -> Result<()> {
        if !plan.changes_schema() {
            return self
                .keep_mapping_current(table, current, mapping, needs_mapping)
                .await;
        }
        let schema = plan.schema.as_ref().expect("a compatible plan has a schema");
        let mapping = updated_name_mapping(table, schema, needs_mapping)?;
        commit_schema(&self.add.catalog, table, schema, mapping.as_ref()).await?;
        self.result.schema_commits += 1;
        tracing::info!(table = %self.name, changes = plan.applied_changes().count(), "schema evolved");
        Ok(())
    }

    /// Files without field ids are read through the table's name mapping; makes sure there
    /// is one and that it names every current column (PyIceberg refuses a file column the
    /// mapping lacks).
    async fn keep_mapping_current(
        &self,
        table: &Table,
        current: &Schema,
        mapping: Option<&NameMapping>,
        needs_mapping: bool,
    ) -> Result<()> {
        if !needs_mapping {
            return Ok(());
        }
        let wanted = match mapping {
            Some(m) => m.updated_with(current),
            None => NameMapping::from_schema(current),
        };
        if mapping == Some(&wanted) {
            return Ok(());
        }
        let requirements = vec![
            TableRequirement::UuidMatch {
                uuid: table.metadata().uuid(),
            },
            TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: table.metadata().current_schema_id(),
            },
        ];
        let updates = vec![TableUpdate::SetProperties {
            updates: HashMap::from([(NameMapping::PROPERTY.to_string(), wanted.to_json())]),
        }];
        self.add.catalog.commit(table, requirements, updates).await
    }

    /// The schema and partition spec a table created from `schema` would have (a dry run
    /// does not create it).
    fn simulate_creation(&self, schema: &Schema) -> Result<(IcebergSchema, PartitionSpec)> {
        let iceberg = to_iceberg_schema(schema, 0)?;
        let spec = match partition_spec(&iceberg, self.add.options.table_options.partition_fields())? {
            Some(unbound) => unbound
                .bind(iceberg.clone())
                .doing("binding the partition spec")?,
            None => PartitionSpec::unpartition_spec(),
        };
        Ok((iceberg, spec))
    }

    /// Records a window's plan: changes and per-schema verdicts, naming files.
    fn report(&mut self, index: usize, plan: &EvolutionPlan, groups: &[Group], labels: &[Vec<String>]) {
        let files_of = |inputs: &[usize]| -> Vec<String> {
            inputs.iter().flat_map(|&g| labels[g].iter().cloned()).collect()
        };
        for c in &plan.changes {
            self.result.changes.push(ChangeReport {
                window: index,
                path: c.path.clone(),
                kind: c.kind,
                from: c.from.clone(),
                to: c.to.clone(),
                applied: c.applied,
                files: files_of(&c.inputs),
            });
        }
        for (g, group) in groups.iter().enumerate() {
            let Some(v) = plan.verdicts.get(g) else { continue };
            self.result.schemas.push(SchemaReport {
                window: index,
                schema: group.input.schema.to_string(),
                verdict: v.verdict,
                reasons: v.reasons.iter().map(ToString::to_string).collect(),
                needs: v.needs.iter().map(ToString::to_string).collect(),
                files: labels[g].clone(),
            });
        }
    }
}

/// The plan creating the table from the window's groups. Without field addition the planner
/// creates it from the schema most inputs share, and here the inputs are files: each group
/// is planned once per file, and the plan folded back onto the groups.
fn creation_plan(config: &SchemaEvolutionConfig, groups: &[Group]) -> Result<EvolutionPlan> {
    // One group, or field addition (the union does not count inputs): plan the groups.
    if groups.len() == 1 || config.allows(outflow_core::SchemaEvolutionOption::AllowFieldAddition) {
        let inputs: Vec<InputSchema> = groups.iter().map(|g| g.input.clone()).collect();
        return EvolutionPlanner::new(config).plan(&inputs);
    }
    let mut inputs = Vec::new();
    let mut owner = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        for _ in &group.members {
            inputs.push(group.input.clone());
            owner.push(g);
        }
    }
    let mut plan = EvolutionPlanner::new(config).plan(&inputs)?;
    let mut verdicts = Vec::with_capacity(groups.len());
    for g in 0..groups.len() {
        let first = owner
            .iter()
            .position(|o| *o == g)
            .expect("every group has a file");
        verdicts.push(plan.verdicts[first].clone());
    }
    plan.verdicts = verdicts;
    for change in &mut plan.changes {
        let mut folded: Vec<usize> = change.inputs.iter().map(|i| owner[*i]).collect();
        folded.dedup();
        change.inputs = folded;
    }
    Ok(plan)
}

/// The schema and partition spec `table` would have once evolved to `schema` (a dry run
/// does not commit it).
fn simulate_evolution(table: &Table, schema: &Schema) -> Result<(IcebergSchema, PartitionSpec)> {
    let iceberg = to_iceberg_schema(schema, 0)?;
    let spec = rebind(table.metadata().default_partition_spec(), &iceberg)?;
    Ok((iceberg, spec))
}

/// The table's partition spec over an evolved schema (field ids unchanged).
fn rebind(spec: &PartitionSpec, schema: &IcebergSchema) -> Result<PartitionSpec> {
    if spec.is_unpartitioned() {
        return Ok(PartitionSpec::unpartition_spec());
    }
    spec.clone()
        .into_unbound()
        .bind(schema.clone())
        .doing("binding the partition spec")
}

/// Why a file's field ids do not name the table's columns (each id must be the id of the
/// column at the same path), or `None` when they do.
fn ids_match(file: &Schema, table: &Schema) -> Option<String> {
    let mut by_id: BTreeMap<i32, String> = BTreeMap::new();
    table.visit(|path, f, _| {
        if let Some(id) = f.id {
            by_id.insert(id, path.to_string());
        }
    });
    let mut problem = None;
    file.visit(|path, f, _| {
        if problem.is_some() {
            return;
        }
        let Some(id) = f.id else { return };
        problem = match by_id.get(&id) {
            Some(p) if p == path => None,
            Some(p) => Some(format!(
                "column {path} carries field id {id}, which is {p} in the table; readers resolve columns by these ids"
            )),
            None => Some(format!(
                "column {path} carries field id {id}, which the table does not have; files with Iceberg field ids can only add to a table whose ids they share"
            )),
        };
    });
    problem
}

/// `f` of each of `items`, in order, the items split between the machine's cores: building
/// the data files of 10,000 footers took a tenth of AddFiles' time on one core.
fn on_cores<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    const SMALLEST_SHARE: usize = 256;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share = items.len().div_ceil(cores).max(SMALLEST_SHARE);
    if share >= items.len() {
        return items.iter().map(&f).collect();
    }
    std::thread::scope(|scope| {
        let f = &f;
        let shares: Vec<_> = items
            .chunks(share)
            .map(|chunk| scope.spawn(move || chunk.iter().map(f).collect::<Vec<R>>()))
            .collect();
        shares
            .into_iter()
            .flat_map(|share| {
                share
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// A data file for one readable, compatible file.
fn data_file(
    facts: &FileFacts,
    resolved: &[Option<Resolved>],
    spec: &PartitionSpec,
    schema: &Arc<IcebergSchema>,
    prefix: Option<&str>,
) -> std::result::Result<DataFile, String> {
    let directories = prefix
        .map(|p| partition::directories(comparable(&facts.location), comparable(p)))
        .transpose()?;
    let values = partition::partition_of(facts, resolved, spec, schema, directories.as_deref())?;
    if !spec.is_unpartitioned() {
        // The snapshot summary prints partition values with iceberg-rust, which panics on
        // some instants (before 1970 with a fraction of a second): refuse those here rather
        // than fail the commit of every file.
        let printable = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            spec.partition_to_path(&values, schema.clone())
        }));
        if printable.is_err() {
            return Err(
                "iceberg-rust cannot record this file's partition value (an instant before 1970 \
                 with a fraction of a second in an identity partition)"
                    .into(),
            );
        }
    }
    metrics::data_file(facts, resolved, values, spec.spec_id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_files_are_absolute_paths_verbatim_and_urls_are_kept() {
        assert_eq!(location("/a/b.parquet").unwrap(), "/a/b.parquet");
        assert_eq!(location("file:///a/b.parquet").unwrap(), "/a/b.parquet");
        assert_eq!(location("file:/a/b.parquet").unwrap(), "/a/b.parquet");
        assert_eq!(location("file:///a/b%20c.parquet").unwrap(), "/a/b c.parquet");
        for odd in [
            "/d/pct%20y.parquet",
            "/d/h#1.parquet",
            "/d/q?.parquet",
            "/d/ü\n .parquet",
            "/d/ a:b ",
        ] {
            assert_eq!(location(odd).unwrap(), odd);
        }
        assert_eq!(
            location("s3://bucket/a.parquet").unwrap(),
            "s3://bucket/a.parquet"
        );
        assert!(location("/d/x://y").unwrap().starts_with("/d/x:"));
        let relative = location("rel/x #1.parquet").unwrap();
        assert!(
            relative.starts_with('/') && relative.ends_with("/rel/x #1.parquet"),
            "{relative}"
        );
        assert!(location("  ").is_err());
        for spelling in ["file:/a", "file:///a", "/a"] {
            assert_eq!(comparable(spelling), "/a");
        }
    }

    #[test]
    fn field_ids_must_name_the_same_columns() {
        use outflow_core::schema::{Field, PrimitiveType};
        let table = Schema::new(vec![
            Field::required("id", PrimitiveType::Long).with_id(1),
            Field::optional("name", PrimitiveType::String).with_id(2),
        ]);
        let same = Schema::new(vec![Field::required("id", PrimitiveType::Int).with_id(1)]);
        assert_eq!(ids_match(&same, &table), None);
        let swapped = Schema::new(vec![Field::required("id", PrimitiveType::Long).with_id(2)]);
        assert!(
            ids_match(&swapped, &table)
                .unwrap()
                .contains("which is name in the table")
        );
        let unknown = Schema::new(vec![Field::required("extra", PrimitiveType::Long).with_id(9)]);
        assert!(ids_match(&unknown, &table).unwrap().contains("does not have"));
    }

    #[test]
    fn work_split_between_cores_comes_back_in_order() {
        for n in [0, 1, 255, 256, 257, 10_001] {
            let items: Vec<usize> = (0..n).collect();
            let doubled = on_cores(&items, |i| i * 2);
            assert_eq!(
                doubled,
                items.iter().map(|i| i * 2).collect::<Vec<_>>(),
                "{n} items"
            );
        }
    }

    #[test]
    fn files_plan_alike_by_what_the_planner_weighs() {
        let counts = |n: Option<u64>| {
            n.map(|n| BTreeMap::from([("a".to_string(), n)]))
                .unwrap_or_default()
        };
        let (a, b, c, unknown) = (counts(Some(3)), counts(Some(7)), counts(Some(0)), counts(None));
        assert!(same_null_evidence(&a, &b) && evidence_hash(1, &a) == evidence_hash(1, &b));
        assert!(!same_null_evidence(&a, &c) && evidence_hash(1, &a) != evidence_hash(1, &c));
        assert!(!same_null_evidence(&a, &unknown) && !same_null_evidence(&unknown, &a));
        assert_ne!(evidence_hash(1, &a), evidence_hash(2, &a));
    }
}
