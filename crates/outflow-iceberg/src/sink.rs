//! The Iceberg sink: Arrow batches in, Parquet data files and one commit per flush out.
//!
//! Each destination table gets its own writer, prepared before its first data: loaded, or
//! created from the first batch's schema under `create_if_needed`, and checked for
//! `write_disposition: empty`. Every batch is planned with the shared evolution planner
//! (batches of a schema that already fit skip straight to writing); a batch that needs a
//! change the options allow gets a schema commit first, one that does not fit fails the
//! write or becomes failed records (`on_incompatible: route_to_errors`). Rows are conformed
//! to the table's exact Arrow schema, which also catches nulls in required columns.
//!
//! `flush` closes the open data files and commits them, one snapshot per table, through
//! [`commit_data`](crate::commit::commit_data): idempotent by commit id, retried when it
//! loses a race. Under `write_disposition: truncate` a table's first commit is an overwrite
//! (the old rows go away atomically, the new ones appear) and later ones append.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use async_trait::async_trait;
use iceberg::arrow::{RecordBatchPartitionSplitter, schema_to_arrow_schema};
use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{DefaultFileNameGenerator, DefaultLocationGenerator};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{TableIdent, TableRequirement, TableUpdate};
use outflow_core::evolution::{EvolutionPlan, Verdict};
use outflow_core::schema::{InputSchema, NameMapping, Schema, conform_batch};
use outflow_core::sink::{DestinationStats, row_to_json};
use outflow_core::{
    CreateDisposition, DestinationPlan, Error, ErrorKind, EvolutionPlanner, FailedRecord,
    IncompatibleSchemaHandling, PlannedAction, PrepareDestination, Result, Sink, WriteDisposition,
    WriteResult,
};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::catalog::IcebergCatalog;
use crate::commit::{
    CommitOutcome, DataCommit, SnapshotKind, commit_data, commit_schema, name_mapping, updated_name_mapping,
};
use crate::convert::{from_iceberg_schema, parse_table_ident, table_name, to_iceberg_schema};
use crate::error::IcebergResultExt;
use crate::options::IcebergSinkOptions;
use crate::partition::{partition_spec, sort_order};
use crate::staged::StagedFiles;

/// How many times a schema commit is re-planned after losing a race before giving up.
const SCHEMA_COMMIT_ATTEMPTS: usize = 5;

/// Writes Arrow batches to Iceberg tables. Build with [`IcebergSink::connect`].
pub struct IcebergSink {
    catalog: IcebergCatalog,
    options: IcebergSinkOptions,
    writer_id: String,
    tables: HashMap<String, TableWriter>,
    rows_seen: u64,
    result: WriteResult,
    closed: bool,
}

impl std::fmt::Debug for IcebergSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergSink")
            .field("table", &self.options.table)
            .field("writer_id", &self.writer_id)
            .finish_non_exhaustive()
    }
}

impl IcebergSink {
    /// Validates the options and connects to the catalog. Nothing is created until data
    /// arrives (or [`PrepareDestination::prepare`] is called).
    pub async fn connect(options: IcebergSinkOptions) -> Result<IcebergSink> {
        options.validate()?;
        if options.schema_evolution.dry_run() {
            return Err(Error::invalid_config(
                "schema_evolution.dry_run",
                "a sink writes; to see what it would change, plan instead (`outflow plan`)",
            ));
        }
        let catalog = IcebergCatalog::connect(&options.catalog).await?;
        Ok(IcebergSink::with_catalog(catalog, options))
    }

    /// A sink on an already connected catalog (to share one between sinks).
    pub fn with_catalog(catalog: IcebergCatalog, options: IcebergSinkOptions) -> IcebergSink {
        IcebergSink {
            catalog,
            options,
            writer_id: uuid::Uuid::new_v4().to_string(),
            tables: HashMap::new(),
            rows_seen: 0,
            result: WriteResult::default(),
            closed: false,
        }
    }

    /// The catalog the sink writes through.
    pub fn catalog(&self) -> &IcebergCatalog {
        &self.catalog
    }

    /// The unique id in this sink's data file names.
    pub fn writer_id(&self) -> &str {
        &self.writer_id
    }

    async fn table_writer(&mut self, name: &str, input: &InputSchema) -> Result<&mut TableWriter> {
        if !self.tables.contains_key(name) {
            let (table, _) = prepare_table(&self.catalog, &self.options, name, input).await?;
            let writer = TableWriter::new(name, table, self.options.write_disposition, &self.writer_id)?;
            self.tables.insert(name.to_string(), writer);
        }
        Ok(self.tables.get_mut(name).expect("inserted above"))
    }

    async fn write_part(
        &mut self,
        name: &str,
        batch: RecordBatch,
        rows: &[u32],
        first_row: u64,
    ) -> Result<()> {
        let input_schema = strip_metadata(&batch.schema());
        let fits_already = self
            .tables
            .get(name)
            .is_some_and(|t| t.fitting.as_ref() == Some(&input_schema));
        if fits_already {
            let writer = self.tables.get_mut(name).expect("checked");
            match writer.conform(&batch) {
                Ok(conformed) => return writer.write(conformed, &self.options).await,
                // Nulls where the table has none: let the planner decide (relax, or reject).
                Err(e) if e.kind() == ErrorKind::InvalidInput => {}
                Err(e) => return Err(e),
            }
        }
        let input = InputSchema::from_batch(&batch)?;
        let catalog = self.catalog.clone();
        let options = self.options.clone();
        let writer = self.table_writer(name, &input).await?;
        let plan = writer.evolve_for(&catalog, &options, &input).await?;
        let verdict = &plan.verdicts[0];
        if verdict.verdict.is_compatible() {
            if verdict.verdict == Verdict::Fits {
                writer.fitting = Some(input_schema);
            }
            let conformed = writer.conform(&batch)?;
            return writer.write(conformed, &options).await;
        }
        let reasons = verdict
            .reasons
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        match options.schema_evolution.on_incompatible() {
            IncompatibleSchemaHandling::Fail => Err(Error::new(
                ErrorKind::SchemaIncompatible,
                format!("rows for {name} do not fit the table: {reasons}"),
            )
            .with_context("table", name.to_string())),
            IncompatibleSchemaHandling::RouteToErrors => {
                for (i, row) in rows.iter().enumerate() {
                    self.result.failed.push(FailedRecord {
                        destination: name.to_string(),
                        index: Some(first_row + *row as u64),
                        record: row_to_json(&batch, i),
                        reason: reasons.clone(),
                    });
                }
                Ok(())
            }
        }
    }
}

fn strip_metadata(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_metadata(Default::default()))
        .collect();
    Arc::new(ArrowSchema::new(fields))
}

/// Loads or creates the destination table for data shaped like `input`; says whether it
/// created it. Under `write_disposition: empty` a table with rows is an error.
async fn prepare_table(
    catalog: &IcebergCatalog,
    options: &IcebergSinkOptions,
    name: &str,
    input: &InputSchema,
) -> Result<(Table, bool)> {
    let ident = parse_table_ident(name)?;
    let (table, created) = match catalog.load_table(&ident).await? {
        Some(table) => (table, false),
        None if options.create_disposition == CreateDisposition::CreateNever => {
            return Err(Error::not_found("table", name).with_context("create_disposition", "create_never"));
        }
        None => create_table(catalog, options, &ident, input).await?,
    };
    if options.write_disposition == WriteDisposition::Empty && !created {
        let rows = table_row_count(&table).await?;
        if rows > 0 {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("table {name} holds {rows} rows and write_disposition is empty"),
            )
            .with_context("table", name.to_string()));
        }
    }
    Ok((table, created))
}

async fn create_table(
    catalog: &IcebergCatalog,
    options: &IcebergSinkOptions,
    ident: &TableIdent,
    input: &InputSchema,
) -> Result<(Table, bool)> {
    let name = table_name(ident);
    let plan = EvolutionPlanner::new(&options.schema_evolution).plan(std::slice::from_ref(input));
    let schema = creatable_schema(&plan, &name)?;
    create_with_name_mapping(
        catalog,
        ident,
        &schema,
        &options.partition_fields,
        &options.sort_order,
        &options.table_properties,
    )
    .await
}

/// Creates a table of `schema` with its partition spec, sort order and properties, and gives
/// it a name mapping; when another writer created it first, loads theirs. Returns the table
/// and whether this call created it.
pub(crate) async fn create_with_name_mapping(
    catalog: &IcebergCatalog,
    ident: &TableIdent,
    schema: &Schema,
    partition_fields: &[crate::partition::PartitionField],
    sort_fields: &[crate::partition::SortField],
    properties: &std::collections::BTreeMap<String, String>,
) -> Result<(Table, bool)> {
    let name = table_name(ident);
    let iceberg_schema = to_iceberg_schema(schema, 0)?;
    let spec = partition_spec(&iceberg_schema, partition_fields)?;
    let order = sort_order(&iceberg_schema, sort_fields)?;
    let properties = properties.clone().into_iter().collect();
    let (table, created) = catalog
        .create_table(ident, iceberg_schema, spec, order, properties)
        .await?;
    if !created {
        return Ok((table, false));
    }
    // iceberg-rust renumbers field ids on creation, so the name mapping is built from the
    // table it made, in a second commit.
    let mapping = NameMapping::from_schema(&from_iceberg_schema(table.metadata().current_schema()));
    let requirements = vec![TableRequirement::UuidMatch {
        uuid: table.metadata().uuid(),
    }];
    let updates = vec![TableUpdate::SetProperties {
        updates: HashMap::from([(NameMapping::PROPERTY.to_string(), mapping.to_json())]),
    }];
    catalog.commit(&table, requirements, updates).await?;
    tracing::info!(table = %name, "created");
    Ok((catalog.require_table(ident).await?, true))
}

/// The schema a plan creates a table with, or an error listing why it cannot.
fn creatable_schema(plan: &EvolutionPlan, name: &str) -> Result<Schema> {
    match (&plan.schema, plan.all_compatible()) {
        (Some(schema), true) => Ok(schema.clone()),
        _ => {
            let reasons: Vec<String> = plan
                .rejection_reasons()
                .iter()
                .map(|(_, r)| r.to_string())
                .collect();
            Err(Error::new(
                ErrorKind::SchemaIncompatible,
                format!(
                    "cannot create table {name} from the input: {}",
                    reasons.join("; ")
                ),
            )
            .with_context("table", name.to_string()))
        }
    }
}

/// Rows in the table's current snapshot, from its summary or, failing that, its manifests.
pub async fn table_row_count(table: &Table) -> Result<u64> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(0);
    };
    if let Some(total) = snapshot.summary().additional_properties.get("total-records")
        && let Ok(n) = total.parse()
    {
        return Ok(n);
    }
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .doing("reading the manifest list")?;
    let mut rows = 0;
    for manifest in list.entries() {
        let loaded = manifest
            .load_manifest(table.file_io())
            .await
            .doing("reading a manifest")?;
        rows += loaded
            .entries()
            .iter()
            .filter(|e| e.is_alive())
            .map(|e| e.data_file().record_count())
            .sum::<u64>();
    }
    Ok(rows)
}

type ParquetRolling =
    RollingFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;
type DataWriterBuilder =
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;

/// Open data files of one table.
enum FileWriter {
    Plain(Box<dyn IcebergWriter>),
    Partitioned(Box<PartitionedFiles>),
}

/// One open data file per partition value.
struct PartitionedFiles {
    splitter: RecordBatchPartitionSplitter,
    fanout: FanoutWriter<DataWriterBuilder>,
}

impl FileWriter {
    async fn write(&mut self, batch: RecordBatch, name: &str) -> Result<()> {
        match self {
            FileWriter::Plain(writer) => writer.write(batch).await.doing(format!("writing to {name}")),
            FileWriter::Partitioned(files) => {
                let parts = files
                    .splitter
                    .split(&batch)
                    .doing(format!("partitioning rows for {name}"))?;
                for (key, part) in parts {
                    files
                        .fanout
                        .write(key, part)
                        .await
                        .doing(format!("writing to {name}"))?;
                }
                Ok(())
            }
        }
    }

    async fn close(self, name: &str) -> Result<Vec<DataFile>> {
        match self {
            FileWriter::Plain(mut writer) => writer
                .close()
                .await
                .doing(format!("closing data files of {name}")),
            FileWriter::Partitioned(files) => files
                .fanout
                .close()
                .await
                .doing(format!("closing data files of {name}")),
        }
    }
}

/// A table's open data files, spread over writers that each run in their own task: Parquet
/// encoding is the costly part of a write, and this way it overlaps with the caller's work
/// and uses every core. Batches go to the writers in turn; each has its own files.
struct ParallelWriters {
    lanes: Vec<Lane>,
    next: usize,
}

struct Lane {
    batches: Option<tokio::sync::mpsc::Sender<RecordBatch>>,
    done: Option<tokio::task::JoinHandle<Result<Vec<DataFile>>>>,
}

/// The outcome of a writer task, as Outflow's error.
fn joined(
    outcome: std::result::Result<Result<Vec<DataFile>>, tokio::task::JoinError>,
) -> Result<Vec<DataFile>> {
    outcome.unwrap_or_else(|e| Err(Error::internal(format!("a data file writer failed: {e}"))))
}

impl ParallelWriters {
    async fn open(
        table: &Table,
        options: &IcebergSinkOptions,
        names: &DefaultFileNameGenerator,
        name: &str,
    ) -> Result<ParallelWriters> {
        let mut lanes = Vec::new();
        for _ in 0..options.parallel_writers() {
            let mut files = open_files(table, options, names).await?;
            // One batch waiting per writer bounds the memory in flight.
            let (tx, mut rx) = tokio::sync::mpsc::channel::<RecordBatch>(1);
            let name = name.to_string();
            let done = tokio::spawn(async move {
                while let Some(batch) = rx.recv().await {
                    files.write(batch, &name).await?;
                }
                files.close(&name).await
            });
            lanes.push(Lane {
                batches: Some(tx),
                done: Some(done),
            });
        }
        Ok(ParallelWriters { lanes, next: 0 })
    }

    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        let count = self.lanes.len();
        let lane = &mut self.lanes[self.next];
        self.next = (self.next + 1) % count;
        let (Some(sender), Some(done)) = (lane.batches.as_ref(), lane.done.as_mut()) else {
            return Err(Error::internal("a data file writer of this table failed earlier"));
        };
        if sender.send(batch).await.is_ok() {
            return Ok(());
        }
        // The writer stopped: its task holds the reason.
        let outcome = joined(done.await);
        lane.batches = None;
        lane.done = None;
        match outcome {
            Err(e) => Err(e),
            Ok(_) => Err(Error::internal("a data file writer stopped early")),
        }
    }

    async fn close(self) -> Result<Vec<DataFile>> {
        let mut files = Vec::new();
        let mut first_error = None;
        for mut lane in self.lanes {
            lane.batches = None;
            // A lane that already failed lost rows: nothing of this table may be committed.
            let Some(done) = lane.done else {
                first_error.get_or_insert(Error::internal("a data file writer of this table failed earlier"));
                continue;
            };
            match joined(done.await) {
                Ok(written) => files.extend(written),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(files),
        }
    }
}

/// One destination table's state within a sink.
struct TableWriter {
    name: String,
    ident: TableIdent,
    table: Table,
    schema: Arc<Schema>,
    arrow: SchemaRef,
    /// The last input schema that fit the table as it is: batches of it skip planning.
    fitting: Option<SchemaRef>,
    files: Option<ParallelWriters>,
    /// One generator for all of this table's files: its counter keeps names unique.
    names: DefaultFileNameGenerator,
    pending: Vec<DataFile>,
    truncate_pending: bool,
    stats: DestinationStats,
}

impl TableWriter {
    fn new(name: &str, table: Table, disposition: WriteDisposition, writer_id: &str) -> Result<TableWriter> {
        let ident = table.identifier().clone();
        let mut writer = TableWriter {
            name: name.to_string(),
            ident,
            schema: Arc::new(Schema::default()),
            arrow: Arc::new(ArrowSchema::empty()),
            table,
            fitting: None,
            files: None,
            names: DefaultFileNameGenerator::new(
                format!("outflow-{writer_id}"),
                None,
                DataFileFormat::Parquet,
            ),
            pending: Vec::new(),
            truncate_pending: disposition == WriteDisposition::Truncate,
            stats: DestinationStats::default(),
        };
        writer.refresh_schema()?;
        Ok(writer)
    }

    fn refresh_schema(&mut self) -> Result<()> {
        let current = self.table.metadata().current_schema();
        self.schema = Arc::new(from_iceberg_schema(current));
        self.arrow =
            Arc::new(schema_to_arrow_schema(current).doing(format_args!("mapping {} to Arrow", self.name))?);
        Ok(())
    }

    fn conform(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        conform_batch(batch, &self.arrow).map_err(|e| e.with_context("table", self.name.clone()))
    }

    /// Plans `input` against the table and makes the schema change the plan calls for,
    /// re-planning when another writer changed the schema first.
    async fn evolve_for(
        &mut self,
        catalog: &IcebergCatalog,
        options: &IcebergSinkOptions,
        input: &InputSchema,
    ) -> Result<EvolutionPlan> {
        for attempt in 1..=SCHEMA_COMMIT_ATTEMPTS {
            let mapping = name_mapping(&self.table)?;
            let mut planner = EvolutionPlanner::new(&options.schema_evolution)
                .table(&self.schema)
                .last_column_id(self.table.metadata().last_column_id());
            if let Some(mapping) = &mapping {
                planner = planner.name_mapping(mapping);
            }
            let plan = planner.plan(std::slice::from_ref(input));
            if !plan.changes_schema() || !plan.verdicts[0].verdict.is_compatible() {
                return Ok(plan);
            }
            let new_schema = plan.schema.clone().expect("a compatible plan has a schema");
            // Files already open were written with the old schema; they are closed (and
            // committed later) before rows of the new schema arrive.
            self.close_files().await?;
            let mapping = updated_name_mapping(&self.table, &new_schema, false)?;
            match commit_schema(catalog, &self.table, &new_schema, mapping.as_ref()).await {
                Ok(()) => {
                    tracing::info!(table = %self.name, changes = plan.applied_changes().count(), "schema evolved");
                    self.reload(catalog).await?;
                    return Ok(plan);
                }
                Err(e) if e.kind() == ErrorKind::Conflict && attempt < SCHEMA_COMMIT_ATTEMPTS => {
                    self.reload(catalog).await?;
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the last attempt returns")
    }

    async fn reload(&mut self, catalog: &IcebergCatalog) -> Result<()> {
        self.table = catalog.require_table(&self.ident).await?;
        self.refresh_schema()?;
        self.fitting = None;
        Ok(())
    }
}

/// Opens data files for `table`: one rolling writer, or one per partition value.
async fn open_files(
    table: &Table,
    options: &IcebergSinkOptions,
    names: &DefaultFileNameGenerator,
) -> Result<FileWriter> {
    let metadata = table.metadata();
    let level = ZstdLevel::try_new(options.compression_level)
        .map_err(|e| Error::invalid_config("compression_level", e.to_string()))?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .build();
    let rolling: ParquetRolling = RollingFileWriterBuilder::new(
        ParquetWriterBuilder::new(properties, metadata.current_schema().clone()),
        options.target_file_size_bytes as usize,
        table.file_io().clone(),
        DefaultLocationGenerator::new(metadata).doing("locating data files")?,
        names.clone(),
    );
    let builder = DataFileWriterBuilder::new(rolling);
    let spec = metadata.default_partition_spec();
    if spec.is_unpartitioned() {
        let writer = builder.build(None).await.doing("opening a data file")?;
        return Ok(FileWriter::Plain(Box::new(writer)));
    }
    let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(
        metadata.current_schema().clone(),
        spec.clone(),
    )
    .doing("partitioning rows")?;
    Ok(FileWriter::Partitioned(Box::new(PartitionedFiles {
        splitter,
        fanout: FanoutWriter::new(builder),
    })))
}

impl TableWriter {
    async fn write(&mut self, batch: RecordBatch, options: &IcebergSinkOptions) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.files.is_none() {
            self.files = Some(ParallelWriters::open(&self.table, options, &self.names, &self.name).await?);
        }
        let rows = batch.num_rows() as u64;
        self.files.as_mut().expect("opened above").write(batch).await?;
        self.stats.rows += rows;
        Ok(())
    }

    async fn close_files(&mut self) -> Result<()> {
        let Some(files) = self.files.take() else {
            return Ok(());
        };
        let written = files.close().await?;
        self.stats.files += written.len() as u64;
        self.stats.bytes += written.iter().map(|f| f.file_size_in_bytes()).sum::<u64>();
        self.pending.extend(written);
        Ok(())
    }

    /// Closes open files and describes the commit of everything pending, if any.
    async fn prepare_commit(&mut self) -> Result<Option<PendingCommit>> {
        self.close_files().await?;
        if self.pending.is_empty() && !self.truncate_pending {
            return Ok(None);
        }
        let kind = if self.truncate_pending {
            SnapshotKind::Overwrite
        } else {
            SnapshotKind::Append
        };
        let commit = DataCommit::of_files(
            &self.name,
            kind,
            self.pending.clone(),
            self.table.metadata().default_partition_spec_id(),
        );
        Ok(Some(PendingCommit {
            table: self.name.clone(),
            ident: self.ident.clone(),
            commit,
        }))
    }

    /// Records a successful commit of `pending`.
    async fn committed(
        &mut self,
        catalog: &IcebergCatalog,
        pending: &PendingCommit,
        outcome: CommitOutcome,
        result: &mut WriteResult,
    ) -> Result<()> {
        let done: std::collections::HashSet<&str> =
            pending.commit.files.iter().map(|f| f.file_path()).collect();
        self.pending.retain(|f| !done.contains(f.file_path()));
        if pending.commit.kind == SnapshotKind::Overwrite {
            self.truncate_pending = false;
        }
        if let CommitOutcome::Committed { .. } = outcome {
            self.stats.commits += 1;
        }
        result.record(&self.name, std::mem::take(&mut self.stats));
        self.reload(catalog).await
    }
}

/// What one table's next commit holds: the data files closed by a flush. Committing is a
/// separate step so that it can be retried on its own; a retry after a success commits
/// nothing (the commit id is already in the table).
#[derive(Clone, Debug)]
pub struct PendingCommit {
    /// The table, as routed (`ns.table`).
    pub table: String,
    /// Its identifier.
    pub ident: TableIdent,
    /// The snapshot to commit.
    pub commit: DataCommit,
}

impl IcebergSink {
    /// Closes every open data file and returns the commits a flush would make, without
    /// making them.
    pub async fn prepare_commits(&mut self) -> Result<Vec<PendingCommit>> {
        let mut out = Vec::new();
        for writer in self.tables.values_mut() {
            if let Some(pending) = writer.prepare_commit().await? {
                out.push(pending);
            }
        }
        Ok(out)
    }

    /// Commits one prepared commit, retrying lost races; committing the same one again is
    /// harmless.
    pub async fn commit(&mut self, pending: &PendingCommit) -> Result<CommitOutcome> {
        let outcome = commit_data(
            &self.catalog,
            &pending.ident,
            &pending.commit,
            &self.options.commit_retry,
        )
        .await?;
        if let Some(writer) = self.tables.get_mut(&pending.table) {
            writer
                .committed(&self.catalog, pending, outcome, &mut self.result)
                .await?;
        }
        Ok(outcome)
    }

    /// Closes every open data file and hands all files over uncommitted, with what was
    /// written and rejected: the writer's half of a distributed write, whose committer calls
    /// [`commit_staged`](crate::staged::commit_staged) once for all writers. The sink is
    /// closed after; nothing it wrote is committed by it.
    pub async fn stage(&mut self) -> Result<(Vec<StagedFiles>, WriteResult)> {
        if self.closed {
            return Err(Error::new(ErrorKind::InvalidInput, "the Iceberg sink is closed"));
        }
        self.include_truncated_table().await?;
        let mut staged = Vec::new();
        let mut result = std::mem::take(&mut self.result);
        for writer in self.tables.values_mut() {
            if let Some(pending) = writer.prepare_commit().await? {
                staged.push(StagedFiles::of(&writer.table, &pending)?);
            }
            writer.pending.clear();
            result.record(&writer.name, std::mem::take(&mut writer.stats));
        }
        self.closed = true;
        Ok((staged, result))
    }

    /// A fixed table under truncate is emptied even when no row arrived: gives it a writer.
    async fn include_truncated_table(&mut self) -> Result<()> {
        if self.options.write_disposition == WriteDisposition::Truncate
            && let Some(name) = self.options.table.fixed().map(str::to_string)
            && !self.tables.contains_key(&name)
        {
            let ident = parse_table_ident(&name)?;
            if let Some(table) = self.catalog.load_table(&ident).await? {
                self.tables.insert(
                    name.clone(),
                    TableWriter::new(&name, table, WriteDisposition::Truncate, &self.writer_id)?,
                );
            }
        }
        Ok(())
    }

    async fn flush_tables(&mut self) -> Result<()> {
        for pending in self.prepare_commits().await? {
            self.commit(&pending).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Sink for IcebergSink {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if self.closed {
            return Err(Error::new(ErrorKind::InvalidInput, "the Iceberg sink is closed"));
        }
        let first_row = self.rows_seen;
        self.rows_seen += batch.num_rows() as u64;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let parts = self.options.table.route_rows(&batch)?;
        for part in parts {
            self.write_part(&part.destination, part.batch, &part.rows, first_row)
                .await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        self.flush_tables().await
    }

    async fn close(&mut self) -> Result<WriteResult> {
        if self.closed {
            return Ok(self.result.clone());
        }
        self.include_truncated_table().await?;
        self.flush_tables().await?;
        self.closed = true;
        Ok(self.result.clone())
    }
}

/// Prepares Iceberg destination tables (creation, evolution) without writing; what
/// `outflow plan` asks. Get one from [`IcebergSink::destinations`].
#[derive(Clone, Debug)]
pub struct IcebergDestinations {
    catalog: IcebergCatalog,
    options: IcebergSinkOptions,
}

impl IcebergSink {
    /// The preparer of this sink's destinations.
    pub fn destinations(&self) -> IcebergDestinations {
        IcebergDestinations {
            catalog: self.catalog.clone(),
            options: self.options.clone(),
        }
    }
}

impl IcebergDestinations {
    /// What preparing `destination` would do, and the error it would hit, if any.
    async fn plan_with_error(
        &self,
        destination: &str,
        schema: &SchemaRef,
    ) -> Result<(DestinationPlan, Option<Error>)> {
        let failed = |e: Error| Ok((DestinationPlan::failed(destination, &e), Some(e)));
        let input = InputSchema::new(Schema::from_arrow(schema)?);
        let ident = match parse_table_ident(destination) {
            Ok(ident) => ident,
            Err(e) => return failed(e),
        };
        let config = &self.options.schema_evolution;
        let Some(table) = self.catalog.load_table(&ident).await? else {
            if self.options.create_disposition == CreateDisposition::CreateNever {
                return failed(Error::not_found("table", destination));
            }
            let plan = EvolutionPlanner::new(config).plan(std::slice::from_ref(&input));
            let (mut out, error) = match creatable_schema(&plan, destination) {
                Ok(_) => (DestinationPlan::new(destination, PlannedAction::Create), None),
                Err(e) => (DestinationPlan::failed(destination, &e), Some(e)),
            };
            for field in &self.options.partition_fields {
                out = out.with_detail(format!("partition by {field}"));
            }
            return Ok((out.with_evolution(plan), error));
        };
        if self.options.write_disposition == WriteDisposition::Empty {
            let rows = table_row_count(&table).await?;
            if rows > 0 {
                return failed(Error::new(
                    ErrorKind::Conflict,
                    format!("table {destination} holds {rows} rows and write_disposition is empty"),
                ));
            }
        }
        let current = from_iceberg_schema(table.metadata().current_schema());
        let mapping = name_mapping(&table)?;
        let mut planner = EvolutionPlanner::new(config)
            .table(&current)
            .last_column_id(table.metadata().last_column_id());
        if let Some(mapping) = &mapping {
            planner = planner.name_mapping(mapping);
        }
        let plan = planner.plan(std::slice::from_ref(&input));
        let (mut out, error) = if !plan.all_compatible() {
            let reasons: Vec<String> = plan
                .rejection_reasons()
                .iter()
                .map(|(_, r)| r.to_string())
                .collect();
            let err = Error::new(ErrorKind::SchemaIncompatible, reasons.join("; "))
                .with_context("table", destination.to_string());
            (DestinationPlan::failed(destination, &err), Some(err))
        } else if plan.changes_schema() {
            (DestinationPlan::new(destination, PlannedAction::Update), None)
        } else {
            (DestinationPlan::new(destination, PlannedAction::Unchanged), None)
        };
        if self.options.write_disposition == WriteDisposition::Truncate {
            out = out.with_detail("replace the table's rows");
        }
        Ok((out.with_evolution(plan), error))
    }
}

#[async_trait]
impl PrepareDestination for IcebergDestinations {
    async fn plan(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan> {
        Ok(self.plan_with_error(destination, schema).await?.0)
    }

    async fn prepare(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan> {
        let (planned, error) = self.plan_with_error(destination, schema).await?;
        if let Some(error) = error {
            // Under route_to_errors a schema that does not fit is no reason to stop: its
            // rows become failed records when they are written.
            let routed = error.kind() == ErrorKind::SchemaIncompatible
                && self.options.schema_evolution.on_incompatible()
                    == IncompatibleSchemaHandling::RouteToErrors
                && planned.evolution.is_some();
            if routed {
                let mut done = planned.with_detail(format!(
                    "rows that do not fit go to failed records: {}",
                    error.message()
                ));
                done.action = PlannedAction::Unchanged;
                done.error = None;
                return Ok(done);
            }
            return Err(error);
        }
        let input = InputSchema::new(Schema::from_arrow(schema)?);
        let (table, _) = prepare_table(&self.catalog, &self.options, destination, &input).await?;
        if planned.action == PlannedAction::Update {
            let mut writer = TableWriter::new(destination, table, self.options.write_disposition, "prepare")?;
            writer.evolve_for(&self.catalog, &self.options, &input).await?;
        }
        Ok(planned)
    }
}
