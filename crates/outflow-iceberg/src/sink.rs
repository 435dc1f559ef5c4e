//! The Iceberg sink: Arrow batches in, Parquet data files and one commit per flush out.
//!
//! Each destination table gets its own writer, prepared before its first data: loaded, or
//! created from the first batch's schema under `create_if_needed`, and checked for
//! `write_disposition: empty` ([`crate::admin`]). Every batch is planned with the shared
//! evolution planner (batches of a schema that already fit skip straight to writing); a
//! batch that needs a change the options allow gets a schema commit first, one that does
//! not fit fails the write or becomes failed records (`on_incompatible: route_to_errors`).
//! Rows are conformed to the table's exact Arrow schema, which also catches nulls in
//! required columns, and go to the table's data files ([`crate::writer`]).
//!
//! `flush` closes the open data files and commits them, one snapshot per table, through
//! [`crate::commit::commit_data`]: idempotent by commit id, retried when it
//! loses a race. Under `write_disposition: truncate` a table's first commit is an overwrite
//! (the old rows go away atomically, the new ones appear) and later ones append. As a
//! [`TwoPhaseSink`], the sink instead closes its files and hands them over uncommitted
//! ([`StagedFiles`]) for an [`IcebergCommitter`](crate::IcebergCommitter).
//!
//! In upsert mode (`changes`), rows are change data: each table's rows are held until the
//! flush, then reduced by key and written as data files plus equality delete files in the
//! same one commit ([`crate::upsert`]).
//!
//! The files a run read, given to [`Sink::record_loads`], go into the summary of each of
//! its commits ([`crate::loads`]), and the preparer reads them back, so a rerun can skip
//! the files a table already holds.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use async_trait::async_trait;
use iceberg::TableIdent;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use outflow_core::changes::{ChangeConfig, reduce_batches};
use outflow_core::evolution::Verdict;
use outflow_core::schema::{InputSchema, NameMapping, Schema, conform_batch_mapped};
use outflow_core::sink::{DestinationStats, row_to_json};
use outflow_core::{
    Aborted, Error, ErrorKind, FailedRecord, IncompatibleSchemaHandling, LoadedFile, Prepared, Result, Sink,
    TwoPhaseSink, WriteDisposition, WriteResult,
};

use crate::admin::{CreatedTables, IcebergPreparer, evolve, prepare_table, remove_uncommitted};
use crate::client::{IcebergCatalog, IcebergResultExt};
use crate::commit::{CommitOutcome, DataCommit, SnapshotKind, commit_data, find_commit, name_mapping};
use crate::loads::LOADED_FILES_KEY;
use crate::options::IcebergSinkOptions;
use crate::schema::{from_iceberg_schema, parse_table_ident};
use crate::staged::StagedFiles;
use crate::upsert::UpsertKey;
use crate::writer::{FileNames, ParallelWriters, equality_delete_files};

/// Writes Arrow batches to Iceberg tables. Open one with [`IcebergSink::connect`].
pub struct IcebergSink {
    catalog: IcebergCatalog,
    options: IcebergSinkOptions,
    writer_id: String,
    tables: HashMap<String, TableWriter>,
    /// The tables this sink and its preparer created, which aborting removes when they
    /// never received a commit.
    created: CreatedTables,
    rows_seen: u64,
    result: WriteResult,
    closed: bool,
    /// The record of the run's source files, for every commit ([`crate::loads`]).
    loads: Option<String>,
    /// Upsert mode: each table's changes since the last flush, reduced and written when it
    /// commits ([`crate::upsert`]).
    changes: HashMap<String, Vec<ChangePart>>,
}

/// Rows of change data routed to one table, held until the flush.
struct ChangePart {
    batch: RecordBatch,
    /// Each row's index in the batch given to `write`.
    rows: Vec<u32>,
    /// The index of that batch's first row among all the rows the sink was given.
    first_row: u64,
}

impl std::fmt::Debug for IcebergSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergSink")
            .field("table", &self.options.destination())
            .field("writer_id", &self.writer_id)
            .finish_non_exhaustive()
    }
}

impl IcebergSink {
    /// Validates the options and connects to the catalog. Nothing is created until data
    /// arrives (or the [`preparer`](IcebergSink::preparer) prepares a table).
    pub async fn connect(options: IcebergSinkOptions) -> Result<IcebergSink> {
        options.validate()?;
        let catalog = IcebergCatalog::connect_with_retry(options.catalog(), options.retry()).await?;
        Ok(IcebergSink::with_catalog(catalog, options))
    }

    /// A sink on an already connected catalog (to share one between sinks).
    pub fn with_catalog(catalog: IcebergCatalog, options: IcebergSinkOptions) -> IcebergSink {
        IcebergSink {
            catalog,
            options,
            writer_id: uuid::Uuid::new_v4().to_string(),
            tables: HashMap::new(),
            created: CreatedTables::default(),
            rows_seen: 0,
            result: WriteResult::default(),
            closed: false,
            loads: None,
            changes: HashMap::new(),
        }
    }

    /// The sink's options.
    pub fn options(&self) -> &IcebergSinkOptions {
        &self.options
    }

    /// The catalog the sink writes through.
    pub fn catalog(&self) -> &IcebergCatalog {
        &self.catalog
    }

    /// The unique id in this sink's data file names.
    pub fn writer_id(&self) -> &str {
        &self.writer_id
    }

    /// Prepares (or plans) this sink's destination tables, for runners that prepare each
    /// destination before its first row.
    pub fn preparer(&self) -> IcebergPreparer {
        IcebergPreparer::new(self.catalog.clone(), self.options.clone()).recording_into(self.created.clone())
    }

    async fn table_writer(&mut self, name: &str, input: &InputSchema) -> Result<&mut TableWriter> {
        if !self.tables.contains_key(name) {
            let (table, created) = prepare_table(&self.catalog, &self.options, name, input).await?;
            if created {
                self.created.record(table.identifier());
            }
            let writer = TableWriter::new(name, table, self.options.write_disposition(), &self.writer_id)?;
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
        let rejected = plan
            .rejection_error(&format!("rows for {name} do not fit the table"))
            .with_context("table", name.to_string());
        match options.schema_evolution().on_incompatible() {
            IncompatibleSchemaHandling::Fail => Err(rejected),
            IncompatibleSchemaHandling::RouteToErrors => {
                let reason = plan.rejection_message();
                for (i, row) in rows.iter().enumerate() {
                    self.result.failed.push(FailedRecord {
                        source: None,
                        destination: name.to_string(),
                        index: Some(first_row + *row as u64),
                        record: row_to_json(&batch, i),
                        reason: reason.clone(),
                    });
                }
                Ok(())
            }
        }
    }

    /// Writes the changes held for each table in upsert mode: the rows that survive
    /// reduction as data files, the keys they replace or delete as equality delete files.
    /// Rows that cannot be applied (an unknown operation, a null key) are failed records.
    async fn apply_changes(&mut self) -> Result<()> {
        let Some(changes) = self.options.changes().cloned() else {
            return Ok(());
        };
        let mut held: Vec<(String, Vec<ChangePart>)> =
            std::mem::take(&mut self.changes).into_iter().collect();
        held.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, parts) in held {
            let key = match changes.key.is_empty() {
                false => changes.key.clone(),
                // The table's identifier fields: from the table this sink holds, else loaded.
                true => match self.tables.get(&name) {
                    Some(writer) => UpsertKey::of(&writer.table, &changes)?.columns,
                    None => {
                        let ident = parse_table_ident(&name)?;
                        let Some(table) = self.catalog.load_table(&ident).await? else {
                            return Err(Error::not_found("table", &name).with_context(
                                "changes.key",
                                "empty: the key is the table's identifier fields, and the table does not exist",
                            ));
                        };
                        UpsertKey::of(&table, &changes)?.columns
                    }
                },
            };
            let batches: Vec<RecordBatch> = parts.iter().map(|p| p.batch.clone()).collect();
            let reduced = reduce_batches(&batches, &changes.operation, &key)
                .map_err(|e| e.with_context("table", name.clone()))?;
            let mut deletes = Vec::new();
            for (part, reduced) in parts.iter().zip(reduced) {
                for (row, reason) in reduced.failed {
                    self.result.failed.push(FailedRecord {
                        source: None,
                        destination: name.clone(),
                        index: Some(part.first_row + u64::from(part.rows[row])),
                        record: row_to_json(&part.batch, row),
                        reason,
                    });
                }
                if reduced.rows.num_rows() > 0 {
                    let rows: Vec<u32> = reduced.sources.iter().map(|s| part.rows[*s]).collect();
                    self.write_part(&name, reduced.rows, &rows, part.first_row)
                        .await?;
                }
                if reduced.deletes.num_rows() > 0 {
                    deletes.push(reduced.deletes);
                }
            }
            if deletes.is_empty() {
                continue;
            }
            if !self.tables.contains_key(&name) {
                // Only deletes: a table that does not exist holds nothing to delete.
                let Some(table) = self.catalog.load_table(&parse_table_ident(&name)?).await? else {
                    continue;
                };
                let writer =
                    TableWriter::new(&name, table, self.options.write_disposition(), &self.writer_id)?;
                self.tables.insert(name.clone(), writer);
            }
            let writer = self.tables.get_mut(&name).expect("inserted above");
            writer.write_deletes(deletes, &changes, &self.options).await?;
        }
        Ok(())
    }

    /// Closes every open data file and returns the commits a flush would make, without
    /// making them.
    pub async fn prepare_commits(&mut self) -> Result<Vec<PendingCommit>> {
        self.apply_changes().await?;
        let mut out = Vec::new();
        for writer in self.tables.values_mut() {
            if let Some(mut pending) = writer.prepare_commit().await? {
                if let Some(loads) = &self.loads {
                    pending
                        .commit
                        .summary
                        .insert(LOADED_FILES_KEY.to_string(), loads.clone());
                }
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
            self.options.retry(),
        )
        .await?;
        if let Some(writer) = self.tables.get_mut(&pending.table) {
            writer
                .committed(&self.catalog, pending, outcome, &mut self.result)
                .await?;
        }
        Ok(outcome)
    }

    /// A fixed table under truncate is emptied even when no row arrived: gives it a writer.
    async fn include_truncated_table(&mut self) -> Result<()> {
        if self.options.write_disposition() == WriteDisposition::Truncate
            && let Some(name) = self.options.destination().fixed().map(str::to_string)
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

    fn refuse_when_closed(&self) -> Result<()> {
        if self.closed {
            return Err(Error::new(ErrorKind::InvalidInput, "the Iceberg sink is closed"));
        }
        Ok(())
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

#[async_trait]
impl Sink for IcebergSink {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        self.refuse_when_closed()?;
        let first_row = self.rows_seen;
        self.rows_seen += batch.num_rows() as u64;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let destination = self.options.destination();
        let routing = destination.route_rows(&batch)?;
        for unrouted in &routing.unrouted {
            let index = first_row + unrouted.row as u64;
            self.result
                .failed
                .push(unrouted.failed_record(destination, &batch, index));
        }
        for part in routing.parts {
            if self.options.changes().is_some() {
                self.changes
                    .entry(part.destination)
                    .or_default()
                    .push(ChangePart {
                        batch: part.batch,
                        rows: part.rows,
                        first_row,
                    });
                continue;
            }
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

    fn take_failed(&mut self) -> Vec<FailedRecord> {
        std::mem::take(&mut self.result.failed)
    }

    fn record_loads(&mut self, files: Vec<LoadedFile>) {
        self.loads = Some(outflow_core::loads::encode(&files));
    }

    async fn abort(&mut self) -> Aborted {
        let mut aborted = Aborted::default();
        for writer in self.tables.values_mut() {
            writer.discard(&self.catalog, &mut aborted).await;
        }
        for ident in self.created.take() {
            remove_uncommitted(&self.catalog, &ident, &mut aborted).await;
        }
        self.closed = true;
        aborted
    }
}

#[async_trait]
impl TwoPhaseSink for IcebergSink {
    type Committable = StagedFiles;

    /// Closes every open data file and hands all files over uncommitted, with what was
    /// written and rejected; the committer commits every writer's files at once.
    async fn prepare_commit(&mut self) -> Result<Prepared<StagedFiles>> {
        self.refuse_when_closed()?;
        self.include_truncated_table().await?;
        self.apply_changes().await?;
        let mut committables = Vec::new();
        let mut result = std::mem::take(&mut self.result);
        for writer in self.tables.values_mut() {
            if let Some(pending) = writer.prepare_commit().await? {
                committables.push(StagedFiles::of(&writer.table, &pending)?);
            }
            writer.pending.clear();
            result.record(&writer.name, std::mem::take(&mut writer.stats));
        }
        self.closed = true;
        Ok(Prepared { committables, result })
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

/// One destination table's state within a sink.
struct TableWriter {
    name: String,
    ident: TableIdent,
    table: Table,
    schema: Arc<Schema>,
    arrow: SchemaRef,
    /// The table's name mapping, which the planner matched the input through too.
    mapping: Option<NameMapping>,
    /// The last input schema that fit the table as it is: batches of it skip planning.
    fitting: Option<SchemaRef>,
    files: Option<ParallelWriters>,
    /// One generator for all of this table's files (its counter keeps names unique), with
    /// every file it opened and that is not committed.
    names: FileNames,
    pending: Vec<DataFile>,
    /// Equality delete files (upsert mode) for the next commit.
    deletes: Vec<DataFile>,
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
            mapping: None,
            table,
            fitting: None,
            files: None,
            names: FileNames::new(writer_id),
            pending: Vec::new(),
            deletes: Vec::new(),
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
        self.mapping = name_mapping(&self.table)?;
        Ok(())
    }

    fn conform(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        conform_batch_mapped(batch, &self.arrow, self.mapping.as_ref())
            .map_err(|e| e.with_context("table", self.name.clone()))
    }

    /// Plans `input` against the table and makes the schema change the plan calls for;
    /// files already open were written with the old schema, so they are closed (and
    /// committed later) before rows of the new schema arrive.
    async fn evolve_for(
        &mut self,
        catalog: &IcebergCatalog,
        options: &IcebergSinkOptions,
        input: &InputSchema,
    ) -> Result<outflow_core::EvolutionPlan> {
        let evolved = evolve(catalog, options.schema_evolution(), self.table.clone(), input).await?;
        if evolved.reloaded {
            self.close_files().await?;
            self.table = evolved.table;
            self.refresh_schema()?;
            self.fitting = None;
        }
        Ok(evolved.plan)
    }

    async fn reload(&mut self, catalog: &IcebergCatalog) -> Result<()> {
        self.table = catalog.require_table(&self.ident).await?;
        self.refresh_schema()?;
        self.fitting = None;
        Ok(())
    }

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

    /// Writes equality delete files for `keys` (the key columns of the rows the next commit
    /// replaces or deletes).
    async fn write_deletes(
        &mut self,
        keys: Vec<RecordBatch>,
        changes: &ChangeConfig,
        options: &IcebergSinkOptions,
    ) -> Result<()> {
        let key = UpsertKey::of(&self.table, changes)?;
        let keys = keys
            .iter()
            .map(|batch| {
                key.conform(batch)
                    .map_err(|e| e.with_context("table", self.name.clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let written =
            equality_delete_files(&self.table, key.schema.clone(), keys, options, &self.names).await?;
        self.stats.files += written.len() as u64;
        self.stats.bytes += written.iter().map(|f| f.file_size_in_bytes()).sum::<u64>();
        self.deletes.extend(written);
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
        if self.pending.is_empty() && self.deletes.is_empty() && !self.truncate_pending {
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
        )
        .with_deletes(&self.name, self.deletes.clone());
        Ok(Some(PendingCommit {
            table: self.name.clone(),
            ident: self.ident.clone(),
            commit,
        }))
    }

    /// Deletes the data files written for a commit that did not happen: every file this
    /// writer opened and did not commit, those a failed writer had closed included. A
    /// commit whose answer was lost may have happened: the table is checked for its commit
    /// id first, and when it cannot be checked the files stay, each named.
    async fn discard(&mut self, catalog: &IcebergCatalog, aborted: &mut Aborted) {
        let commit_id = match self.prepare_commit().await {
            Ok(Some(pending)) => Some(pending.commit.commit_id),
            // Nothing to commit, or files a failed writer lost: no commit holds them.
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(table = %self.name, error = %e, "closing the data files for the abort failed");
                None
            }
        };
        self.pending.clear();
        self.deletes.clear();
        let opened = self.names.opened();
        if opened.is_empty() {
            return;
        }
        if let Some(commit_id) = commit_id {
            match catalog.load_table(&self.ident).await {
                Ok(Some(table)) if find_commit(&table, &commit_id).is_some() => return,
                Ok(_) => {}
                Err(e) => {
                    for path in &opened {
                        aborted.left.push(format!(
                            "data file {path} of {}, whose commit could not be checked: {}",
                            self.name,
                            e.message()
                        ));
                    }
                    return;
                }
            }
        }
        let io = self.table.file_io();
        let mut gone = HashSet::new();
        // Each call is retried before it fails: once one has, the store is taken to be
        // down and the other files are named without trying, so an abort stays short
        // however many files there are.
        let mut store_failed: Option<String> = None;
        for path in &opened {
            if let Some(why) = &store_failed {
                aborted.left.push(format!(
                    "uncommitted data file {path}: not deleted, the store failed ({why})"
                ));
                continue;
            }
            // A file opened but never written did not reach the store.
            let deleted = match io.exists(path).await {
                Ok(false) => Ok(false),
                Ok(true) => io.delete(path).await.map(|()| true),
                Err(e) => Err(e),
            };
            match deleted {
                Ok(deleted) => {
                    aborted.deleted_files += u64::from(deleted);
                    gone.insert(path.as_str());
                }
                Err(e) => {
                    aborted.left.push(format!("uncommitted data file {path}: {e}"));
                    store_failed = Some(e.message().to_string());
                }
            }
        }
        self.names.forget(&gone);
    }

    /// Records a successful commit of `pending`.
    async fn committed(
        &mut self,
        catalog: &IcebergCatalog,
        pending: &PendingCommit,
        outcome: CommitOutcome,
        result: &mut WriteResult,
    ) -> Result<()> {
        let done: HashSet<&str> = pending
            .commit
            .files
            .iter()
            .chain(&pending.commit.deletes)
            .map(|f| f.file_path())
            .collect();
        self.pending.retain(|f| !done.contains(f.file_path()));
        self.deletes.retain(|f| !done.contains(f.file_path()));
        self.names.forget(&done);
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
