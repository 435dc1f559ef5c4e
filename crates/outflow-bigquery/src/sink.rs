//! The write loop: [`BigQuerySink`] implements [`Sink`], and [`BigQueryPreparer`] (from
//! [`BigQuerySink::preparer`]) implements [`PrepareDestination`].
//!
//! For each batch: rows are routed to their tables; each table is prepared once (created
//! under `create_if_needed`, checked empty under `empty`, given a staging table under
//! `truncate`); the rows are reshaped to BigQuery's types and names; the shared planner
//! decides whether they fit, and a schema update it allows is made with tables.patch before
//! the rows are sent (the stream then reopens to see it); rows that cannot be written come
//! back as [`FailedRecord`]s with their input index, reason and table while the others are
//! written; requests are cut under `max_request_bytes`, and a row too big for any request is
//! refused up front.
//!
//! Flushing commits pending streams and, under `truncate`, swaps the staged rows in.
//! Closing flushes, finalizes committed streams and deletes staging tables.
//!
//! Given the files it loads ([`Sink::record_loads`]), the sink keeps the load ledger of
//! [`crate::loads`]: an intent per table before its rows can become visible, the outcome
//! after they did.
//!
//! Aborting (after a failure or an interruption) commits nothing more: pending streams are
//! finalized uncommitted, so their rows never become visible; staging tables are deleted;
//! a table the sink or its preparer created is deleted when none of its rows became
//! visible (and a query finds it empty). Rows of committed and default streams are visible
//! once acknowledged and cannot be taken back: their tables stay, and the abort says how
//! many rows each keeps.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::RecordBatch;
use async_trait::async_trait;
use gcloud_sdk::prost::Message;
use outflow_core::changes::ChangeConfig;
use outflow_core::evolution::{EvolutionPlan, SchemaEvolutionConfig};
use outflow_core::sink::{DestinationStats, row_to_json};
use outflow_core::{
    Aborted, CreateDisposition, Destination, Error, ErrorKind, FailedRecord, LoadedFile, Result,
    SchemaEvolutionOption, Sink, TwoPhaseSink, WriteDisposition, WriteResult,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::admin::{Admin, BigQueryPreparer, TableInfo};
use crate::changes::{self, ChangeRows, ChangeType, SequenceNumbers};
use crate::client::{Clients, ResolvedConnection, StorageWrite, StreamCommits, process_env};
use crate::commit::PendingStream;
use crate::loads::{Ledger, Load, Visibility};
use crate::options::{BigQuerySinkOptions, StreamType, WriteMethod};
use crate::request::{Rows, shape_input};
use crate::rows::TableRows;
use crate::stream::{StreamKind, StreamWriter, WriteApi};
use crate::table_ref::TableRef;

/// Where an exactly-once sink stood: per table, its stream and the offset of the next
/// append, and how many input rows it had been given. Take it with
/// [`BigQuerySink::checkpoint`] after a `write` or `flush` returns; a sink opened with
/// [`BigQuerySink::resume`] continues from it when given the same input from row
/// `rows` on, in the same batches. Requests a killed writer had sent are then recognized
/// (ALREADY_EXISTS at their offsets) instead of written twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Input rows the sink had been given.
    pub rows: u64,
    /// Per destination table (`project.dataset.table`).
    pub streams: BTreeMap<String, StreamCheckpoint>,
}

/// One table's stream in a [`Checkpoint`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCheckpoint {
    /// The write stream's name; none when no stream is open (a pending stream was just
    /// committed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// The offset of the next append.
    #[serde(default)]
    pub next_offset: i64,
    /// Under `truncate`, the staging table holding the rows staged so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging_table: Option<String>,
}

/// What the sink and its preparer share.
pub(crate) struct Shared {
    pub(crate) options: BigQuerySinkOptions,
    pub(crate) evolution: SchemaEvolutionConfig,
    pub(crate) admin: Admin,
    write_api: Arc<dyn WriteApi>,
    pub(crate) prepared: Mutex<HashMap<TableRef, Prepared>>,
    resume: BTreeMap<String, StreamCheckpoint>,
    /// Rows are made visible by a committer (see [`TwoPhaseSink`]), not by this sink.
    two_phase: bool,
    connection: ResolvedConnection,
    /// BatchCommit and GetWriteStream, connected when a ledger first asks about streams.
    commits: tokio::sync::OnceCell<StreamCommits>,
    /// The load being recorded, once the runner said which files it reads.
    pub(crate) load: std::sync::Mutex<Option<Arc<Load>>>,
    /// The numbers of change rows (under `changes`).
    sequence: SequenceNumbers,
}

/// A table ready for rows.
#[derive(Clone, Debug)]
pub(crate) struct Prepared {
    pub(crate) table: TableInfo,
    pub(crate) created: bool,
    pub(crate) staging: Option<TableInfo>,
}

impl Shared {
    pub(crate) fn resolve(&self, name: &str) -> Result<TableRef> {
        TableRef::parse(
            name,
            self.options.project.as_deref(),
            self.options.dataset.as_deref(),
        )
    }

    /// The client of stream commits, connecting on first use.
    pub(crate) async fn commits(&self) -> Result<&StreamCommits> {
        self.commits
            .get_or_try_init(|| StreamCommits::connect(&self.connection, self.options.request_timeout))
            .await
    }

    /// The load being recorded, if any.
    pub(crate) fn load(&self) -> Option<Arc<Load>> {
        self.load.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn is_truncate(&self) -> bool {
        self.options.write_disposition == WriteDisposition::Truncate
    }

    /// Creates or checks the table once; later calls return what the first found.
    pub(crate) async fn prepare(&self, t: &TableRef) -> Result<Prepared> {
        let mut prepared = self.prepared.lock().await;
        if let Some(p) = prepared.get(t) {
            return Ok(p.clone());
        }
        let o = &self.options;
        let resumed = self.resume.get(&t.to_string());
        let (table, created) = match self.admin.get(t).await? {
            Some(table) => (table, false),
            None if o.create_disposition == CreateDisposition::CreateNever => {
                return Err(Error::not_found("table", t)
                    .with_context("field", "create_disposition")
                    .with_source(Error::invalid_config(
                        "create_disposition",
                        "create_never: the sink does not create tables",
                    )));
            }
            None => {
                let schema = o
                    .schema
                    .as_ref()
                    .expect("create_if_needed has a schema, checked by build()");
                let primary_key = match &o.changes {
                    Some(changes) => changes::table_key(&t.to_string(), changes, None)?,
                    None => Vec::new(),
                };
                let (table, created) = self
                    .admin
                    .create(
                        t,
                        schema,
                        o.time_partitioning.as_ref(),
                        &o.clustering,
                        &primary_key,
                    )
                    .await?;
                if created {
                    tracing::info!(table = %t, "created table");
                    // A new table holds no load, whatever the ledger says of an older one.
                    if self.load().is_some() {
                        Ledger::of(&self.admin, t).forget(t).await?;
                    }
                    crate::offsets::forget(&self.admin, t).await?;
                }
                (table, created)
            }
        };
        if let Some(changes) = &o.changes {
            changes::table_key(&t.to_string(), changes, Some(&table.primary_key))?;
        }
        if o.write_disposition == WriteDisposition::Empty
            && !created
            && resumed.is_none()
            && !self.admin.is_empty(t).await?
        {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("table {t} holds rows, and write_disposition is empty: nothing was written"),
            )
            .with_context("table", t.to_string())
            .with_retryable(false));
        }
        let staging = if self.is_truncate() {
            let name = resumed.and_then(|r| r.staging_table.clone());
            Some(match name {
                Some(name) => {
                    let staging = t.with_table(name);
                    self.admin.get(&staging).await?.ok_or_else(|| {
                        Error::not_found("table", &staging).with_context("field", "checkpoint")
                    })?
                }
                None => {
                    let staging = t.with_table(format!(
                        "{}_outflow_tmp_{}",
                        t.table,
                        uuid::Uuid::new_v4().simple()
                    ));
                    self.admin.create_staging(&staging, &table).await?
                }
            })
        } else {
            None
        };
        let p = Prepared {
            table,
            created,
            staging,
        };
        prepared.insert(t.clone(), p.clone());
        Ok(p)
    }

    fn stream_kind(&self) -> StreamKind {
        // Staged rows must stay invisible until the swap, and a committer commits only
        // pending streams.
        if self.is_truncate() || (self.two_phase && self.options.write_method == WriteMethod::ExactlyOnce) {
            // A copy job reads only committed storage, not rows still in a streaming buffer.
            return StreamKind::Pending;
        }
        match (self.options.write_method, self.options.stream_type()) {
            (WriteMethod::AtLeastOnce, _) => StreamKind::Default,
            (WriteMethod::ExactlyOnce, StreamType::Committed) => StreamKind::Committed,
            (WriteMethod::ExactlyOnce, StreamType::Pending) => StreamKind::Pending,
        }
    }

    /// Whether columns the table lacks are added (rather than dropped or refused).
    pub(crate) fn adds_fields(&self) -> bool {
        self.evolution.allows(SchemaEvolutionOption::AllowFieldAddition)
    }
}

/// Writes Arrow batches to BigQuery tables through the Storage Write API.
pub struct BigQuerySink {
    shared: Arc<Shared>,
    destinations: BTreeMap<TableRef, TableWriter>,
    result: WriteResult,
    next_row: u64,
    closed: bool,
}

impl std::fmt::Debug for BigQuerySink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BigQuerySink")
            .field("destination", &self.shared.options.table)
            .field(
                "tables",
                &self
                    .destinations
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
            )
            .field("next_row", &self.next_row)
            .finish_non_exhaustive()
    }
}

impl BigQuerySink {
    /// Connects the clients (reading `BIGQUERY_EMULATOR_HOST` and credentials); no request
    /// is made until the first batch or preparation.
    pub async fn connect(options: BigQuerySinkOptions) -> Result<BigQuerySink> {
        BigQuerySink::open(options, Checkpoint::default(), false).await
    }

    /// Continues from a checkpoint of an earlier exactly-once sink (see [`Checkpoint`]).
    pub async fn resume(options: BigQuerySinkOptions, checkpoint: Checkpoint) -> Result<BigQuerySink> {
        if !checkpoint.streams.is_empty() && options.write_method != WriteMethod::ExactlyOnce {
            return Err(Error::invalid_config(
                "checkpoint",
                "streams can only be resumed with write_method exactly_once",
            ));
        }
        BigQuerySink::open(options, checkpoint, false).await
    }

    /// A writer of a two-phase write: exactly-once rows go to pending streams that
    /// [`TwoPhaseSink::prepare_commit`] finalizes and a [`BigQueryCommitter`] commits,
    /// together with every other writer's (at-least-once rows are visible once written, as
    /// always). `truncate` is refused: each writer would swap in its own rows.
    pub async fn connect_two_phase(options: BigQuerySinkOptions) -> Result<BigQuerySink> {
        if options.write_disposition == WriteDisposition::Truncate {
            return Err(Error::invalid_config(
                "write_disposition",
                "truncate is not supported when several writers commit together (a DataFusion or \
                 Ballista statement): write with one sink, or append",
            ));
        }
        if options.changes.is_some() {
            return Err(Error::invalid_config(
                "changes",
                "change data is written by one sink: each writer of a statement or checkpoint would \
                 reduce only its own changes",
            ));
        }
        BigQuerySink::open(options, Checkpoint::default(), true).await
    }

    async fn open(options: BigQuerySinkOptions, resume: Checkpoint, two_phase: bool) -> Result<BigQuerySink> {
        let o = &options;
        let connection = ResolvedConnection::resolve(&o.connection, process_env)?;
        let clients = Clients::connect(&connection).await?;
        let write_api: Arc<dyn WriteApi> = Arc::new(StorageWrite::new(&clients, o.request_timeout));
        let shared = Arc::new(Shared {
            admin: Admin::new(clients, o.retry.clone(), o.request_timeout),
            evolution: o.schema_evolution.clone(),
            write_api,
            prepared: Mutex::new(HashMap::new()),
            resume: resume.streams.clone(),
            two_phase,
            connection,
            commits: tokio::sync::OnceCell::new(),
            load: std::sync::Mutex::new(None),
            sequence: SequenceNumbers::starting_now(),
            options,
        });
        Ok(BigQuerySink {
            shared,
            destinations: BTreeMap::new(),
            result: WriteResult::default(),
            next_row: resume.rows,
            closed: false,
        })
    }

    /// The sink's options.
    pub fn options(&self) -> &BigQuerySinkOptions {
        &self.shared.options
    }

    /// Where rows go, for runners that prepare each destination before its first row.
    pub fn destination(&self) -> &Destination {
        &self.shared.options.table
    }

    /// Prepares destinations for this sink (shares what it prepared with the sink).
    pub fn preparer(&self) -> BigQueryPreparer {
        BigQueryPreparer::new(self.shared.clone())
    }

    /// Where the sink stands, to resume from after a crash (exactly-once only; see
    /// [`Checkpoint`]).
    pub fn checkpoint(&self) -> Checkpoint {
        let streams = self
            .destinations
            .iter()
            .filter_map(|(t, w)| {
                let position = w.stream.position();
                let staging_table = w.staging.as_ref().map(|s| s.table.table.clone());
                if position.is_none() && staging_table.is_none() {
                    return None;
                }
                let (stream, next_offset) = match position {
                    Some((stream, offset)) => (Some(stream), offset),
                    None => (None, 0),
                };
                Some((
                    t.to_string(),
                    StreamCheckpoint {
                        stream,
                        next_offset,
                        staging_table,
                    },
                ))
            })
            .collect();
        Checkpoint {
            rows: self.next_row,
            streams,
        }
    }

    /// What was written so far and the records that failed (also returned by `close`).
    pub fn result(&self) -> &WriteResult {
        &self.result
    }

    async fn writer(&mut self, t: &TableRef) -> Result<&mut TableWriter> {
        if !self.destinations.contains_key(t) {
            let p = self.shared.prepare(t).await?;
            let target = p
                .staging
                .as_ref()
                .map(|s| s.table.clone())
                .unwrap_or_else(|| t.clone());
            let o = &self.shared.options;
            let mut stream = StreamWriter::new(
                self.shared.write_api.clone(),
                self.shared.stream_kind(),
                target.path(),
                o.retry.clone(),
                o.request_timeout,
            );
            let resumed = self.shared.resume.get(&t.to_string());
            if let Some(name) = resumed.and_then(|r| r.stream.as_ref()) {
                stream = stream.resume(name.clone(), resumed.map_or(0, |r| r.next_offset));
            }
            // Under truncate the first flush swaps even if nothing was staged (every row
            // rejected): the run's rows replace the table's, none included, as `plan` says
            // and as Iceberg's first commit does. Rows a previous writer staged are swapped
            // in the same way.
            let staged_since_swap = p.staging.is_some();
            self.destinations.insert(
                t.clone(),
                TableWriter {
                    name: t.to_string(),
                    table: p.table,
                    staging: p.staging,
                    stream,
                    stats: DestinationStats::default(),
                    staged_since_swap,
                    visible: 0,
                    not_visible: 0,
                    load: self.shared.load(),
                    intended: false,
                },
            );
        }
        Ok(self.destinations.get_mut(t).expect("inserted above"))
    }
}

#[async_trait]
impl Sink for BigQuerySink {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if self.closed {
            return Err(Error::new(ErrorKind::InvalidInput, "the BigQuery sink is closed"));
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let rows = Rows::numbered(shape_input(&batch)?, self.next_row);
        // Every table is resolved and prepared before any row is sent, so a table that
        // cannot be written (missing under create_never, not empty under empty) fails the
        // batch with nothing of it written.
        let mut work = Vec::new();
        let routing = self.shared.options.table.route_rows(&rows.batch)?;
        for unrouted in &routing.unrouted {
            let index = rows.indices[unrouted.row as usize];
            let failed = unrouted.failed_record(&self.shared.options.table, &rows.batch, index);
            self.result.failed.push(failed);
        }
        for routed in routing.parts {
            let part = Rows {
                indices: routed.rows.iter().map(|&r| rows.indices[r as usize]).collect(),
                batch: routed.batch,
            };
            match self.shared.resolve(&routed.destination) {
                Ok(t) => {
                    self.writer(&t).await?;
                    work.push((t, part));
                }
                Err(e) => {
                    let name = routed.destination;
                    let reason = format!("destination {name:?} is not a valid table name: {}", e.message());
                    let failed = (0..part.len()).map(|p| failed_record(&name, &part, p, &reason));
                    self.result.failed.extend(failed);
                }
            }
        }
        self.next_row += batch.num_rows() as u64;
        let shared = self.shared.clone();
        for (t, part) in work {
            let writer = self.destinations.get_mut(&t).expect("prepared above");
            let failed = writer.write(&shared, part).await?;
            self.result.failed.extend(failed);
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let shared = self.shared.clone();
        if shared.is_truncate() {
            // A table prepared for this sink that no row reached is replaced too (emptied).
            let unwritten: Vec<TableRef> = shared
                .prepared
                .lock()
                .await
                .keys()
                .filter(|t| !self.destinations.contains_key(*t))
                .cloned()
                .collect();
            for t in unwritten {
                self.writer(&t).await?;
            }
        }
        for writer in self.destinations.values_mut() {
            writer.flush(&shared).await?;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<WriteResult> {
        if self.closed {
            return Ok(self.result.clone());
        }
        let flushed = self.flush().await;
        self.closed = true;
        let shared = self.shared.clone();
        for writer in self.destinations.values_mut() {
            writer.stream.finish().await;
            if let Some(staging) = &writer.staging
                && let Err(e) = shared.admin.delete(&staging.table).await
            {
                tracing::warn!(table = %staging.table, error = %e, "could not delete the staging table; it expires in a day");
            }
            self.result
                .record(&writer.name, std::mem::take(&mut writer.stats));
        }
        flushed?;
        Ok(self.result.clone())
    }

    fn take_failed(&mut self) -> Vec<FailedRecord> {
        std::mem::take(&mut self.result.failed)
    }

    fn record_loads(&mut self, files: Vec<LoadedFile>) {
        let load = Arc::new(Load::new(files));
        for writer in self.destinations.values_mut() {
            writer.load = Some(load.clone());
        }
        *self.shared.load.lock().unwrap_or_else(|e| e.into_inner()) = Some(load);
    }

    async fn abort(&mut self) -> Aborted {
        let mut aborted = Aborted::default();
        if self.closed {
            return aborted;
        }
        self.closed = true;
        for writer in self.destinations.values_mut() {
            // Finalized and never committed, a pending stream's rows never become visible
            // (the service garbage-collects the stream); a failure to finalize changes
            // nothing about that.
            if let Err(e) = writer.stream.finalize().await {
                tracing::warn!(table = %writer.name, error = %e, "could not finalize the uncommitted stream");
            }
            writer.stream.finish().await;
            aborted.discarded_rows += writer.not_visible;
        }
        let prepared: BTreeMap<TableRef, Prepared> = self.shared.prepared.lock().await.drain().collect();
        let admin = &self.shared.admin;
        for (t, p) in prepared {
            if let Some(staging) = &p.staging
                && let Err(e) = admin.delete(&staging.table).await
            {
                aborted.left.push(format!(
                    "staging table {} (it expires within a day): {}",
                    staging.table,
                    e.message()
                ));
            }
            let name = t.to_string();
            let visible = self.destinations.get(&t).map_or(0, |w| w.visible);
            if visible > 0 {
                let how = if p.staging.is_some() {
                    "swapped in (replacing the table's rows)"
                } else {
                    "committed"
                };
                aborted.rows_stay(&name, p.created, visible, how);
            } else if p.created {
                let empty = admin.is_empty(&t).await;
                aborted.remove_if_empty(&name, empty, || admin.delete(&t)).await;
            }
        }
        aborted
    }
}

#[async_trait]
impl TwoPhaseSink for BigQuerySink {
    type Committable = PendingStream;

    /// Finalizes every table's pending stream and hands it over uncommitted, with what was
    /// written and rejected. Rows of committed and default streams are visible already.
    async fn prepare_commit(&mut self) -> Result<outflow_core::Prepared<PendingStream>> {
        if self.closed {
            return Err(Error::new(ErrorKind::InvalidInput, "the BigQuery sink is closed"));
        }
        self.closed = true;
        let mut committables = Vec::new();
        for writer in self.destinations.values_mut() {
            if let Some(stream) = writer.stream.finalize().await? {
                committables.push(PendingStream {
                    table: writer.name.clone(),
                    stream,
                });
            }
            writer.stream.finish().await;
            self.result
                .record(&writer.name, std::mem::take(&mut writer.stats));
        }
        Ok(outflow_core::Prepared {
            committables,
            result: std::mem::take(&mut self.result),
        })
    }
}

fn failed_record(destination: &str, rows: &Rows, position: usize, reason: &str) -> FailedRecord {
    FailedRecord {
        source: None,
        destination: destination.to_string(),
        index: Some(rows.indices[position]),
        record: row_to_json(&rows.batch, position),
        reason: reason.to_string(),
    }
}

/// One destination table's state in the sink.
struct TableWriter {
    name: String,
    table: TableInfo,
    staging: Option<TableInfo>,
    stream: StreamWriter,
    stats: DestinationStats,
    staged_since_swap: bool,
    /// Rows of this sink visible in the table: acknowledged on a committed or default
    /// stream, or committed (swapped in, under `truncate`).
    visible: u64,
    /// Rows acknowledged on a pending stream (or staged) that are not visible yet.
    not_visible: u64,
    /// The load to record in the ledger at the next flush.
    load: Option<Arc<Load>>,
    /// Whether the load's intent is recorded.
    intended: bool,
}

impl TableWriter {
    /// Writes `rows`; returns the records that could not be written.
    async fn write(&mut self, shared: &Shared, rows: Rows) -> Result<Vec<FailedRecord>> {
        let o = &shared.options;
        if let Some(changes) = &o.changes {
            return self.write_changes(shared, rows, changes).await;
        }
        let drop_unknown = o.ignore_unknown_values && !shared.adds_fields();
        let mut rows = TableRows::new(&self.name, &self.table.schema, rows, drop_unknown)?;
        if let Some(plan) = rows.plan(&self.table.core, &shared.evolution)? {
            self.evolve(shared, &plan).await?;
        }
        let Some(encoded) = rows.encode(&self.table.schema, o.max_request_bytes)? else {
            return Ok(rows.into_failed());
        };
        for request in encoded.requests {
            if self.staging.is_none() && self.stream.kind() != StreamKind::Pending {
                self.intend_as_sent(shared).await?;
            }
            let appended = rows.append(&mut self.stream, &encoded.schema, request).await?;
            self.stats.rows += appended.rows;
            self.stats.bytes += appended.bytes;
            self.stats.commits += appended.commits;
            self.staged_since_swap |= appended.rows > 0;
            if self.staging.is_none() && self.stream.kind() != StreamKind::Pending {
                self.visible += appended.rows;
            } else {
                self.not_visible += appended.rows;
            }
        }
        Ok(rows.into_failed())
    }

    /// Records the load's intent once, before the first rows that become visible as they
    /// are acknowledged.
    async fn intend_as_sent(&mut self, shared: &Shared) -> Result<()> {
        if !self.intended
            && let Some(load) = &self.load
        {
            let t = &self.table.table;
            Ledger::of(&shared.admin, t)
                .intend(t, load, &Visibility::AsSent, false)
                .await?;
            self.intended = true;
        }
        Ok(())
    }

    /// Writes `rows` as change data (see [`crate::changes`]): the keys deleted, then the rows
    /// upserted, through the table's default stream; returns the records that could not be
    /// applied.
    async fn write_changes(
        &mut self,
        shared: &Shared,
        rows: Rows,
        config: &ChangeConfig,
    ) -> Result<Vec<FailedRecord>> {
        let key = changes::table_key(&self.name, config, Some(&self.table.primary_key))?;
        let batch = changes::batch_changes(&rows, config, &key)?;
        let mut failed: Vec<FailedRecord> = batch
            .failed
            .iter()
            .map(|(p, reason)| failed_record(&self.name, &rows, *p, reason))
            .collect();
        let o = &shared.options;
        let drop_unknown = o.ignore_unknown_values && !shared.adds_fields();
        for (change, part) in [
            (ChangeType::Delete, batch.deletes),
            (ChangeType::Upsert, batch.upserts),
        ] {
            if part.is_empty() {
                continue;
            }
            let mut part = TableRows::new(&self.name, &self.table.schema, part, drop_unknown)?;
            // A delete names the key alone, which the table has: only upserts may need a
            // schema change.
            if change == ChangeType::Upsert
                && let Some(plan) = part.plan(&self.table.core, &shared.evolution)?
            {
                self.evolve(shared, &plan).await?;
            }
            if let Some(conformed) = part.conform(&self.table.schema)? {
                let encoded = changes::encode(&conformed, change, &shared.sequence)?;
                let refused = self.append_changes(shared, encoded).await?;
                part.fail(refused)?;
            }
            failed.extend(part.into_failed());
        }
        Ok(failed)
    }

    /// Appends change rows in requests of at most `max_request_bytes`. Rows the service
    /// refuses fail (it wrote none of their request) and the others are sent again; a
    /// failed call is retried whole, which the rows' sequence numbers make harmless.
    /// Returns the refused rows by input index, with the reasons.
    async fn append_changes(&mut self, shared: &Shared, encoded: ChangeRows) -> Result<Vec<(u64, String)>> {
        // What a request adds to its rows: the row type, and a tag and length per row.
        const ROW_OVERHEAD: usize = 8;
        const REQUEST_OVERHEAD: usize = 1024;
        let o = &shared.options;
        let stream = format!("{}/streams/_default", self.table.table.path());
        let descriptor = &encoded.row_type.descriptor;
        let limit = o
            .max_request_bytes
            .saturating_sub(descriptor.encoded_len() + REQUEST_OVERHEAD);
        let sizes: Vec<usize> = encoded.rows.iter().map(|r| r.len() + ROW_OVERHEAD).collect();
        let (runs, oversize) = changes::requests_of(&sizes, limit);
        let mut refused: Vec<(u64, String)> = oversize
            .into_iter()
            .map(|p| {
                let reason = format!(
                    "the row is {} bytes encoded, over the request limit of {} bytes (max_request_bytes)",
                    sizes[p], o.max_request_bytes
                );
                (encoded.indices[p], reason)
            })
            .collect();
        let commits = shared.commits().await?;
        if !runs.is_empty() {
            self.intend_as_sent(shared).await?;
        }
        for run in runs {
            let mut positions: Vec<usize> = run.collect();
            while !positions.is_empty() {
                let rows: Vec<Vec<u8>> = positions.iter().map(|&p| encoded.rows[p].clone()).collect();
                let bytes: usize = rows.iter().map(Vec::len).sum();
                let what = format!("appending {} change rows to {}", rows.len(), self.name);
                let errors = o
                    .retry
                    .retry_within(&what, o.request_timeout, |limit| {
                        commits.append_proto(&stream, descriptor, rows.clone(), limit)
                    })
                    .await
                    .map_err(|e| e.with_context("table", self.name.clone()))?;
                if errors.is_empty() {
                    self.stats.rows += positions.len() as u64;
                    self.stats.bytes += bytes as u64;
                    self.stats.commits += 1;
                    self.visible += positions.len() as u64;
                    break;
                }
                let before = positions.len();
                let mut bad = std::collections::BTreeSet::new();
                for (i, reason) in errors {
                    if let Some(&p) = positions.get(i) {
                        bad.insert(p);
                        refused.push((encoded.indices[p], reason));
                    }
                }
                positions.retain(|p| !bad.contains(p));
                if positions.len() == before {
                    return Err(Error::internal(format!(
                        "{what}: the service refused rows outside the request"
                    )));
                }
            }
        }
        Ok(refused)
    }

    /// Makes the plan's schema changes to the table (and its staging table), and reopens
    /// the stream so it sees them.
    async fn evolve(&mut self, shared: &Shared, plan: &EvolutionPlan) -> Result<()> {
        tracing::info!(table = %self.name, plan = %plan, "updating the table schema");
        self.table = shared.admin.evolve(&self.table, plan).await?;
        if let Some(staging) = &self.staging {
            self.staging = Some(shared.admin.evolve(staging, plan).await?);
        }
        let mut prepared = shared.prepared.lock().await;
        if let Some(p) = prepared.get_mut(&self.table.table) {
            p.table = self.table.clone();
            p.staging = self.staging.clone();
        }
        self.stream.schema_changed();
        Ok(())
    }

    async fn flush(&mut self, shared: &Shared) -> Result<()> {
        let t = self.table.table.clone();
        let ledger = Ledger::of(&shared.admin, &t);
        if let Some(load) = &self.load
            && let Some((stream, _)) = self.stream.position()
            && self.stream.kind() == StreamKind::Pending
            && self.staging.is_none()
        {
            ledger
                .intend(&t, load, &Visibility::Streams(vec![stream]), false)
                .await?;
        }
        let committed = self.stream.commit().await?;
        // Staged rows are committed to the staging table, and visible once swapped in.
        let mut made_visible = committed && self.staging.is_none();
        if let Some(staging) = &self.staging
            && self.staged_since_swap
        {
            let job = Admin::new_copy_job_id();
            if let Some(load) = &self.load {
                ledger
                    .intend(&t, load, &Visibility::CopyJob(job.clone()), true)
                    .await?;
            }
            shared
                .admin
                .copy_replace(&staging.table, &self.table.table, &job)
                .await?;
            self.staged_since_swap = false;
            made_visible = true;
            tracing::info!(table = %self.name, "replaced the table's rows");
        }
        if made_visible {
            self.visible += std::mem::take(&mut self.not_visible);
        }
        if let Some(load) = self.load.take() {
            ledger.loaded(&t, &load, self.staging.is_some()).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn change_data_is_refused_for_writers_that_commit_together() {
        let options = crate::options::tests::change_options();
        let err = BigQuerySink::connect_two_phase(options).await.unwrap_err();
        assert_eq!(err.context_value("field"), Some("changes"), "{err}");
    }

    #[test]
    fn checkpoints_serialize() {
        let c = Checkpoint {
            rows: 42,
            streams: [(
                "p.d.t".to_string(),
                StreamCheckpoint {
                    stream: Some("projects/p/datasets/d/tables/t/streams/s1".into()),
                    next_offset: 40,
                    staging_table: None,
                },
            )]
            .into_iter()
            .collect(),
        };
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Checkpoint>(&json).unwrap(), c);
    }
}
