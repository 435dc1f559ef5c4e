//! The write loop: routing rows to tables, preparing each table before its first rows,
//! batching entries into MutateRows requests, keeping a bounded number in flight, and
//! retrying what may be retried.
//!
//! Guarantees:
//! - A destination is created or reconciled (see [`crate::admin`]) before any of its rows
//!   is sent; a failure there fails the write before anything reaches that table.
//! - A row that cannot be written (a null or oversize key, an oversize cell, a bad marker)
//!   is rejected on its own, before sending, as a failed record naming the row; the rest of
//!   its batch is written. So is a row the service rejects.
//! - Idempotent entries (explicit timestamps, deletes) are retried on transient failures
//!   with backoff, within the retry policy's attempts and deadline. Entries with
//!   `AddToCell` or server-time cells are never retried: when their request fails in a way
//!   that leaves their fate unknown, they are reported as failed records saying they may
//!   or may not have been applied.
//! - A request that fails as a whole for a reason retrying cannot fix (the table was
//!   deleted, permission denied), or keeps failing past the retry policy, fails the write
//!   or flush with that error. The rest of that batch is not sent, and the requests
//!   already in flight are waited for: when the error is returned, nothing of this sink is
//!   still on its way to the table.
//! - Rows are written at least once; order is kept within a request, not across the
//!   requests in flight.
//! - Given the files it loads ([`Sink::record_loads`]), the sink keeps the load ledger of
//!   [`crate::loads`]: an intent before a table's first row, and that the load was applied
//!   after the flush; every write-time cell of the load then has one time.
//! - Aborting (after a failure or an interruption) sends nothing more and waits for the
//!   requests in flight. Applied rows are visible and stay; a table the sink or its preparer
//!   created is deleted when no row of it was applied (and a read finds it empty), and the
//!   abort says how many rows each table it keeps received.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use async_trait::async_trait;
use gcloud_sdk::google::bigtable::v2::mutate_rows_request::Entry;
use gcloud_sdk::tonic::Code;
use outflow_core::changes::reduce;
use outflow_core::sink::{DestinationStats, row_to_json};
use outflow_core::{
    Aborted, Checkpoint, Committer, CreateDisposition, Destination, DestinationPlan, Error, ErrorKind,
    FailedRecord, LoadedFile, PlannedAction, Prepared as PreparedWrite, Result, RetryPolicy, Sink,
    TwoPhaseSink, WriteResult,
};
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, OnceCell};
use tokio::task::JoinSet;

use crate::admin::{BigtablePreparer, FamilyTypes};
use crate::batch::{Batcher, Batching};
use crate::client::{
    BigtableClient, BigtableConnection, CallOutcome, EntryStatus, is_retryable_code, is_retryable_status,
    status_error,
};
use crate::loads::{Load, LoadTime, now_millis_as_micros};
use crate::options::{BigtableSinkOptions, CHANGE_MARKER, ChangeDelete, Changes, TableCreateOptions};
use crate::schema::{RowEncoder, RowMapping, RowResult};

/// A sink's validated settings.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Settings {
    pub(crate) connection: BigtableConnection,
    pub(crate) destination: Destination,
    pub(crate) disposition: CreateDisposition,
    pub(crate) table_options: Option<TableCreateOptions>,
    pub(crate) mapping: RowMapping,
    pub(crate) batching: Batching,
    pub(crate) retry: RetryPolicy,
    pub(crate) request_timeout: Duration,
    /// Whether every row must give the same cells when written again: a streaming job's
    /// checkpoints under exactly-once ([`BigtableSinkOptions::for_checkpoints`]).
    pub(crate) replays_only: bool,
    /// Change data, applied by row key.
    pub(crate) changes: Option<Changes>,
}

impl Settings {
    /// The schema rows of `schema` are encoded in: in changes mode, without the operation
    /// column and with the delete marker the sink adds ([`with_marker`]).
    pub(crate) fn encoded_schema(&self, schema: &arrow_schema::Schema) -> SchemaRef {
        let Some(changes) = &self.changes else {
            return Arc::new(schema.clone());
        };
        let mut fields: Vec<Arc<arrow_schema::Field>> = schema
            .fields()
            .iter()
            .filter(|f| *f.name() != changes.operation.column)
            .cloned()
            .collect();
        fields.push(marker_field());
        Arc::new(arrow_schema::Schema::new(fields))
    }

    /// What `outflow plan` says of change data: the key and what a delete removes.
    pub(crate) fn changes_detail(&self) -> Option<String> {
        self.changes.as_ref().map(|changes| {
            format!(
                "upsert by row key [{}], operations from column {:?}; a delete removes the {}",
                self.mapping.row_key.field_names().join(", "),
                changes.operation.column,
                match changes.delete {
                    ChangeDelete::Row => "row",
                    ChangeDelete::Families => "families the row has values in",
                    ChangeDelete::Cells => "cells the row has values in",
                }
            )
        })
    }

    /// Refuses `encoder` for `table` when rows must replay exactly and it writes to an
    /// aggregate family (AddToCell would count a record read again twice).
    pub(crate) fn check_replays(&self, encoder: &RowEncoder, table: &str) -> Result<()> {
        if !self.replays_only {
            return Ok(());
        }
        match encoder.aggregate_cell() {
            Some((family, field)) => Err(Error::invalid_config(
                "columns",
                format!(
                    "field {field:?} goes to aggregate family {family:?} of {table}: a streaming job \
                     writes the records since its last checkpoint again when it restarts, and \
                     AddToCell would count them twice. Use checkpoint.delivery: at_least_once to \
                     accept that, or map the field to a family that is not an aggregate"
                ),
            )
            .with_context("family", family.to_string())
            .with_context("table", table.to_string())),
            None => Ok(()),
        }
    }
}

/// A prepared destination: its families, and the encoders made for the schemas seen.
pub(crate) struct Prepared {
    /// Whether this sink (or its preparer) created the table.
    created: bool,
    families: FamilyTypes,
    encoders: std::sync::Mutex<Vec<(SchemaRef, Arc<RowEncoder>)>>,
}

impl Prepared {
    pub(crate) fn encoder(
        &self,
        schema: &SchemaRef,
        mapping: &RowMapping,
        table: &str,
    ) -> Result<Arc<RowEncoder>> {
        let mut encoders = self.encoders.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, encoder)) = encoders
            .iter()
            .find(|(s, _)| Arc::ptr_eq(s, schema) || s == schema)
        {
            return Ok(encoder.clone());
        }
        let encoder = Arc::new(RowEncoder::new(schema, mapping, &self.families, table)?);
        encoders.push((schema.clone(), encoder.clone()));
        Ok(encoder)
    }
}

/// The rows an entry came from, kept so that a failed row can be shown and a retried one
/// encoded again (cheaper than keeping a copy of every entry in case it fails).
struct Source {
    batch: RecordBatch,
    encoder: Arc<RowEncoder>,
    now_micros: i64,
}

/// What the sink knows about one entry in flight.
#[derive(Clone)]
struct EntryMeta {
    /// The row's position among all rows given to the sink.
    index: u64,
    /// The row in its source batch.
    row: usize,
    source: Arc<Source>,
    idempotent: bool,
    bytes: usize,
}

/// What one request (with its retries) achieved.
#[derive(Debug, Default, PartialEq)]
struct RequestReport {
    rows: u64,
    bytes: u64,
    failed: Vec<FailedRecord>,
}

/// The state of writing: per-destination batchers, requests in flight, what was written.
#[derive(Default)]
struct WriteState {
    batchers: HashMap<String, Batcher<(Entry, EntryMeta)>>,
    in_flight: JoinSet<(String, Result<RequestReport>)>,
    result: WriteResult,
    /// Rows Bigtable acknowledged, per table.
    applied: HashMap<String, u64>,
    /// The tables whose intent for the load is in the ledger.
    intended: BTreeSet<String>,
    next_index: u64,
    closed: bool,
}

/// Writes Arrow rows to Bigtable tables; see [the module docs](crate::sink) for what it
/// guarantees.
///
/// Opened with [`BigtableSink::connect`]; its channel opens when it first prepares or writes.
pub struct BigtableSink {
    shared: Arc<Shared>,
    state: WriteState,
}

/// What a sink and its preparer share: the settings, the client, the tables prepared.
pub(crate) struct Shared {
    settings: Arc<Settings>,
    client: OnceCell<BigtableClient>,
    prepared: Mutex<HashMap<String, Arc<Prepared>>>,
    /// The load being recorded, once the runner said which files it reads.
    load: std::sync::Mutex<Option<Arc<Load>>>,
    /// The write time of the load's cells.
    pub(crate) load_time: LoadTime,
    /// Set once the ledger table is made, which the first intent does.
    ledger: OnceCell<()>,
}

impl std::fmt::Debug for BigtableSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BigtableSink")
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl BigtableSink {
    /// Validates the options, naming the field at fault; nothing is sent until the sink
    /// first prepares or writes.
    pub async fn connect(options: BigtableSinkOptions) -> Result<BigtableSink> {
        Ok(BigtableSink {
            shared: Arc::new(Shared::new(options.settings()?)),
            state: WriteState::default(),
        })
    }

    /// Where rows go: one table, or a table per row from a template.
    pub fn destination(&self) -> &Destination {
        &self.shared.settings.destination
    }

    /// Prepares (or plans) this sink's destination tables, sharing what it prepared with the
    /// sink, for runners that prepare each destination before its first row.
    pub fn preparer(&self) -> BigtablePreparer {
        BigtablePreparer::new(self.shared.clone())
    }

    /// The sink's client, connecting on first use.
    pub async fn client(&self) -> Result<&BigtableClient> {
        self.shared.client().await
    }
}

impl Shared {
    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The client, connecting on first use.
    fn new(settings: Settings) -> Shared {
        Shared {
            settings: Arc::new(settings),
            client: OnceCell::new(),
            prepared: Mutex::new(HashMap::new()),
            load: std::sync::Mutex::new(None),
            load_time: LoadTime::now(),
            ledger: OnceCell::new(),
        }
    }

    pub(crate) async fn client(&self) -> Result<&BigtableClient> {
        self.client
            .get_or_try_init(|| async {
                Ok(
                    BigtableClient::connect_within(&self.settings.connection, self.settings.request_timeout)
                        .await?
                        .with_retry_policy(self.settings.retry.clone()),
                )
            })
            .await
    }

    fn load(&self) -> Option<Arc<Load>> {
        self.load.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Prepares `table` once; later calls return `Unchanged` with the families known.
    pub(crate) async fn prepare_once(&self, table: &str) -> Result<(DestinationPlan, Arc<Prepared>)> {
        let mut prepared = self.prepared.lock().await;
        if let Some(p) = prepared.get(table) {
            return Ok((DestinationPlan::new(table, PlannedAction::Unchanged), p.clone()));
        }
        let client = self.client().await?;
        let (plan, families) = client
            .prepare_table(
                table,
                self.settings.disposition,
                self.settings.table_options.as_ref(),
            )
            .await?;
        if plan.action == PlannedAction::Create && self.load().is_some() {
            // A new table holds no load, whatever the ledger says of an older one.
            client.forget_loads(table).await?;
        }
        let p = Arc::new(Prepared {
            created: plan.action == PlannedAction::Create,
            families,
            encoders: Default::default(),
        });
        prepared.insert(table.to_string(), p.clone());
        Ok((plan, p))
    }

    /// Sends `entries` for `table`, first waiting for a slot among the requests in flight.
    /// When a request that finished meanwhile failed, `entries` are not sent and its error
    /// is returned: a request started after a failure would outlive it by a whole retry
    /// deadline.
    async fn dispatch(
        &self,
        state: &mut WriteState,
        table: &str,
        entries: Vec<(Entry, EntryMeta)>,
    ) -> Result<()> {
        while state.in_flight.len() >= self.settings.batching.max_outstanding_requests() {
            let Some(joined) = state.in_flight.join_next().await else {
                break;
            };
            absorb(state, joined)?;
        }
        let client = self.client().await?.clone();
        let settings = self.settings.clone();
        let table = table.to_string();
        state.in_flight.spawn(async move {
            let endpoint = client.data_endpoint().to_string();
            let target = WriteTarget {
                table: &table,
                endpoint: &endpoint,
                request_timeout: settings.request_timeout,
            };
            let report = send_with_retries(&target, entries, &settings.retry, |batch, timeout| {
                let client = client.clone();
                let table = table.clone();
                async move { client.mutate_rows(&table, batch, timeout).await }
            })
            .await;
            (table, report)
        });
        Ok(())
    }

    /// Writes `batch`'s rows. Their indexes among the rows given to the sink are `origin`'s
    /// when given (rows a change batch came down to), else the next ones.
    async fn write_batch(
        &self,
        state: &mut WriteState,
        batch: RecordBatch,
        origin: Option<&[u64]>,
    ) -> Result<()> {
        if state.closed {
            return Err(Error::new(
                ErrorKind::Internal,
                "write after close: the Bigtable sink is closed",
            ));
        }
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(());
        }
        let base = state.next_index;
        if origin.is_none() {
            state.next_index += rows as u64;
        }
        let index_of = |row: usize| origin.map_or(base + row as u64, |o| o[row]);
        // A recorded load has one write time, so that it can be written again cell for cell.
        let load = self.load();
        let now_micros = match &load {
            Some(_) => self.load_time.fix(),
            None => now_millis_as_micros(),
        };
        let destination = &self.settings.destination;
        let routed = destination.assign(&batch)?;
        for unrouted in &routed.unrouted {
            let index = index_of(unrouted.row as usize);
            state
                .result
                .failed
                .push(unrouted.failed_record(destination, &batch, index));
        }
        // Every destination is prepared and every schema checked before any row is sent,
        // so that a bad table or mapping fails the batch with nothing written.
        let schema = batch.schema();
        let mut plans = Vec::with_capacity(routed.tables.len());
        for (table, rows) in routed.tables {
            let rows: Vec<usize> = rows.into_iter().map(|row| row as usize).collect();
            let (_, prepared) = self.prepare_once(&table).await?;
            let encoder = prepared.encoder(&schema, &self.settings.mapping, &table)?;
            self.settings.check_replays(&encoder, &table)?;
            plans.push((table, rows, encoder));
        }
        if let Some(load) = &load {
            for (table, _, encoder) in &plans {
                if state.intended.contains(table) {
                    continue;
                }
                let write_time = encoder.uses_write_time().then_some(now_micros);
                let client = self.client().await?;
                self.ledger.get_or_try_init(|| client.make_ledger()).await?;
                client
                    .record_intent(table, load, write_time, encoder.replays_exactly())
                    .await?;
                state.intended.insert(table.clone());
            }
        }
        let mut first_error = None;
        'tables: for (table, rows, encoder) in plans {
            let source = Arc::new(Source {
                batch: batch.clone(),
                encoder: encoder.clone(),
                now_micros,
            });
            let results = encoder.encode(&batch, rows.iter().copied(), now_micros)?;
            let mut empty = 0;
            // Taken out of the map for the loop (dispatching needs the state), put back after.
            let mut batcher = state
                .batchers
                .remove(&table)
                .unwrap_or_else(|| Batcher::new(&self.settings.batching));
            for (row, result) in rows.into_iter().zip(results) {
                let index = index_of(row);
                match result {
                    RowResult::Encoded(encoded) => {
                        let meta = EntryMeta {
                            index,
                            row,
                            source: source.clone(),
                            idempotent: encoded.idempotent,
                            bytes: encoded.bytes,
                        };
                        if let Some(full) =
                            batcher.push((encoded.entry, meta), encoded.bytes, encoded.mutations)
                            && let Err(e) = self.dispatch(state, &table, full).await
                        {
                            state.batchers.insert(table, batcher);
                            first_error = Some(e);
                            break 'tables;
                        }
                    }
                    RowResult::Empty => empty += 1,
                    RowResult::Rejected(reason) => state.result.failed.push(FailedRecord {
                        source: None,
                        destination: table.clone(),
                        index: Some(index),
                        record: row_to_json(&batch, row),
                        reason: format!("row {index}: {reason}"),
                    }),
                }
            }
            state.batchers.insert(table.clone(), batcher);
            if empty > 0 {
                // Rows whose every mapped value is null: nothing to send, nothing lost.
                state.result.record(
                    &table,
                    DestinationStats {
                        rows: empty,
                        ..Default::default()
                    },
                );
            }
        }
        match first_error {
            None => Ok(()),
            Some(e) => {
                // Stop here, and let what is in flight finish, so that when the error
                // reaches the caller no request of this sink is still on its way.
                while let Some(joined) = state.in_flight.join_next().await {
                    if let Err(other) = absorb(state, joined) {
                        tracing::debug!(error = %other, "another request failed too");
                    }
                }
                Err(e)
            }
        }
    }

    /// Applies a batch of change data: each key's last change wins (in source order).
    /// First the keys' deletes are sent and waited for, then the rows that write, and those
    /// are waited for too, so that no request of a later batch overtakes them: requests in
    /// flight at once keep no order between them.
    async fn write_changes(
        &self,
        state: &mut WriteState,
        batch: RecordBatch,
        changes: &Changes,
    ) -> Result<()> {
        let base = state.next_index;
        state.next_index += batch.num_rows() as u64;
        let reduced = reduce(
            &batch,
            &changes.operation,
            self.settings.mapping.row_key.field_names(),
        )?;
        let table = self.settings.destination.fixed().unwrap_or_default().to_string();
        for (row, reason) in reduced.failed {
            state.result.failed.push(FailedRecord {
                source: None,
                destination: table.clone(),
                index: Some(base + row as u64),
                record: row_to_json(&batch, row),
                reason,
            });
        }
        let phases = [
            (
                reduced.removed,
                reduced.removed_sources,
                Some(changes.delete.marker()),
            ),
            (reduced.rows, reduced.sources, None),
        ];
        for (rows, sources, marker) in phases {
            if rows.num_rows() == 0 {
                continue;
            }
            let origin: Vec<u64> = sources.iter().map(|row| base + *row as u64).collect();
            let marked = with_marker(&rows, marker)?;
            self.write_batch(state, marked, Some(&origin)).await?;
            self.drain(state).await?;
        }
        Ok(())
    }

    async fn flush_all(&self, state: &mut WriteState) -> Result<()> {
        self.drain(state).await?;
        // Every row of the load is applied: recorded once, at the first flush.
        let load = self.load.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(load) = load {
            for table in std::mem::take(&mut state.intended) {
                self.client().await?.record_loaded(&table, &load).await?;
            }
        }
        Ok(())
    }

    /// Sends every batched entry and waits for every request in flight.
    async fn drain(&self, state: &mut WriteState) -> Result<()> {
        let mut first_error = None;
        let tables: Vec<String> = state.batchers.keys().cloned().collect();
        for table in tables {
            let Some(entries) = state.batchers.get_mut(&table).and_then(Batcher::take) else {
                continue;
            };
            // After a failure nothing more is sent; what is in flight is waited for below.
            if let Err(e) = self.dispatch(state, &table, entries).await {
                first_error = Some(e);
                break;
            }
        }
        while let Some(joined) = state.in_flight.join_next().await {
            if let Err(e) = absorb(state, joined) {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Sends nothing more, waits for the requests in flight (each ends by its deadline),
    /// then keeps the tables rows reached and deletes the ones this sink created that none
    /// reached.
    async fn abort(&self, state: &mut WriteState) -> Aborted {
        let mut aborted = Aborted::default();
        if state.closed {
            return aborted;
        }
        state.closed = true;
        for (_, mut batcher) in state.batchers.drain() {
            aborted.discarded_rows += batcher.take().map_or(0, |entries| entries.len() as u64);
        }
        while let Some(joined) = state.in_flight.join_next().await {
            if let Err(e) = absorb(state, joined) {
                tracing::debug!(error = %e, "a request in flight failed while aborting");
            }
        }
        let mut created: Vec<(String, bool)> = self
            .prepared
            .lock()
            .await
            .iter()
            .map(|(table, p)| (table.clone(), p.created))
            .collect();
        created.sort();
        for (table, created) in created {
            let applied = state.applied.get(&table).copied().unwrap_or(0);
            if applied > 0 {
                aborted.rows_stay(&table, created, applied, "applied");
            } else if created
                // A table is prepared through the client, so it is connected.
                && let Some(client) = self.client.get()
            {
                let empty = client.is_empty(&table).await;
                aborted
                    .remove_if_empty(&table, empty, || client.delete_table(&table))
                    .await;
            }
        }
        aborted
    }
}

/// Adds a finished request's report to the result, or returns its error.
fn absorb(
    state: &mut WriteState,
    joined: std::result::Result<(String, Result<RequestReport>), tokio::task::JoinError>,
) -> Result<()> {
    let (table, report) =
        joined.map_err(|e| Error::internal("a Bigtable write task failed").with_source(e))?;
    let report = report?;
    *state.applied.entry(table.clone()).or_default() += report.rows;
    let result = &mut state.result;
    result.record(
        &table,
        DestinationStats {
            rows: report.rows,
            bytes: report.bytes,
            files: 0,
            commits: 1,
        },
    );
    result.failed.extend(report.failed);
    Ok(())
}

fn marker_field() -> Arc<arrow_schema::Field> {
    Arc::new(arrow_schema::Field::new(
        CHANGE_MARKER,
        arrow_schema::DataType::Utf8,
        true,
    ))
}

/// `rows` with the delete marker column of change data: `marker` in every row (a delete),
/// or null (a write).
fn with_marker(rows: &RecordBatch, marker: Option<&str>) -> Result<RecordBatch> {
    let mut fields: Vec<Arc<arrow_schema::Field>> = rows.schema().fields().iter().cloned().collect();
    fields.push(marker_field());
    let mut columns = rows.columns().to_vec();
    columns.push(Arc::new(arrow_array::StringArray::from(vec![
        marker;
        rows.num_rows()
    ])));
    RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns)
        .map_err(|e| Error::internal(format!("marking change rows: {e}")))
}

fn code_name(code: i32) -> String {
    format!("{:?}", Code::from_i32(code))
}

fn failed(table: &str, meta: &EntryMeta, reason: String) -> FailedRecord {
    FailedRecord {
        source: None,
        destination: table.to_string(),
        index: Some(meta.index),
        record: row_to_json(&meta.source.batch, meta.row),
        reason: format!("row {}: {reason}", meta.index),
    }
}

/// Why an entry is to be sent again.
enum RetryCause {
    /// The entry itself came back with a retryable code.
    Entry(String),
    /// The whole call failed in a way worth retrying.
    Call,
}

/// Where a request goes, and how long each attempt may take.
struct WriteTarget<'a> {
    table: &'a str,
    /// The data endpoint, for errors.
    endpoint: &'a str,
    request_timeout: Duration,
}

/// Sends entries with `call` (one MutateRows attempt, given the time it may take: the
/// request timeout, or the time left before the policy's deadline), retrying what may be
/// retried under `policy`: entries that failed with a retryable code, and, when the call
/// failed as a whole in a retryable way, the idempotent entries it left unanswered.
async fn send_with_retries<F, Fut>(
    target: &WriteTarget<'_>,
    entries: Vec<(Entry, EntryMeta)>,
    policy: &RetryPolicy,
    mut call: F,
) -> Result<RequestReport>
where
    F: FnMut(Vec<Entry>, Duration) -> Fut,
    Fut: Future<Output = CallOutcome>,
{
    let (table, endpoint) = (target.table, target.endpoint);
    let doing = format!("writing to table {table}");
    let mut report = RequestReport::default();
    let (mut entries, mut metas): (Vec<Entry>, Vec<EntryMeta>) = entries.into_iter().unzip();
    let mut retrying = policy.start(doing.clone());
    loop {
        let outcome = call(entries, retrying.attempt_limit(target.request_timeout)).await;
        let call_error = outcome.error;
        if let Some(err) = call_error.as_ref()
            && !is_retryable_status(err)
            && outcome.statuses.iter().any(Option::is_none)
        {
            // Sending again cannot help (no such table, no permission...): fail loudly.
            let err = call_error.expect("checked above");
            return Err(status_error(err, &doing, endpoint).with_context("table", table));
        }
        let mut retry: Vec<(EntryMeta, RetryCause)> = Vec::new();
        for (meta, status) in metas.into_iter().zip(outcome.statuses) {
            match status {
                Some(EntryStatus::Ok) => {
                    report.rows += 1;
                    report.bytes += meta.bytes as u64;
                }
                Some(EntryStatus::Failed { code, message }) => {
                    let why = format!("Bigtable rejected the row: {}: {message}", code_name(code));
                    if !is_retryable_code(code) {
                        report.failed.push(failed(table, &meta, why));
                    } else if meta.idempotent {
                        retry.push((meta, RetryCause::Entry(why)));
                    } else {
                        report.failed.push(failed(
                            table,
                            &meta,
                            format!("{why} (not retried: the row has AddToCell or server-time cells)"),
                        ));
                    }
                }
                None => {
                    let err = call_error
                        .as_ref()
                        .expect("an entry without a status means the call failed");
                    if meta.idempotent {
                        retry.push((meta, RetryCause::Call));
                    } else {
                        report.failed.push(failed(
                            table,
                            &meta,
                            format!(
                                "the request failed ({:?}: {}) and the row has AddToCell or server-time \
                                 cells, so it was not retried: it may or may not have been applied",
                                err.code(),
                                err.message()
                            ),
                        ));
                    }
                }
            }
        }
        if retry.is_empty() {
            return Ok(report);
        }
        let failure = call_error
            .as_ref()
            .map_or_else(|| format!("{} entries to retry", retry.len()), |e| e.to_string());
        if let Err(exhausted) = retrying.backoff(&failure).await {
            if let Some(err) = call_error.filter(|_| retry.iter().any(|(_, c)| matches!(c, RetryCause::Call)))
            {
                return Err(exhausted
                    .error(status_error(err, &doing, endpoint))
                    .with_context("table", table));
            }
            for (meta, cause) in retry {
                let RetryCause::Entry(reason) = cause else {
                    continue;
                };
                report.failed.push(failed(
                    table,
                    &meta,
                    format!("{reason} ({})", exhausted.summary()),
                ));
            }
            return Ok(report);
        }
        (entries, metas) = reencode(retry.into_iter().map(|(meta, _)| meta).collect())?;
    }
}

/// Encodes retried rows again from their source batches, grouped per source.
fn reencode(metas: Vec<EntryMeta>) -> Result<(Vec<Entry>, Vec<EntryMeta>)> {
    let mut entries = Vec::with_capacity(metas.len());
    let mut kept = Vec::with_capacity(metas.len());
    let mut start = 0;
    while start < metas.len() {
        let source = metas[start].source.clone();
        let end = start
            + metas[start..]
                .iter()
                .take_while(|m| Arc::ptr_eq(&m.source, &source))
                .count();
        let rows = metas[start..end].iter().map(|m| m.row);
        let results = source.encoder.encode(&source.batch, rows, source.now_micros)?;
        for (meta, result) in metas[start..end].iter().zip(results) {
            match result {
                RowResult::Encoded(encoded) => {
                    entries.push(encoded.entry);
                    kept.push(meta.clone());
                }
                _ => return Err(Error::internal("a row encoded once did not encode again")),
            }
        }
        start = end;
    }
    Ok((entries, kept))
}

#[async_trait]
impl Sink for BigtableSink {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        match self.shared.settings.changes.clone() {
            Some(changes) => self.shared.write_changes(&mut self.state, batch, &changes).await,
            None => self.shared.write_batch(&mut self.state, batch, None).await,
        }
    }

    async fn flush(&mut self) -> Result<()> {
        self.shared.flush_all(&mut self.state).await
    }

    async fn close(&mut self) -> Result<WriteResult> {
        if self.state.closed {
            return Err(Error::new(
                ErrorKind::Internal,
                "the Bigtable sink is already closed",
            ));
        }
        let flushed = self.shared.flush_all(&mut self.state).await;
        self.state.closed = true;
        let result = std::mem::take(&mut self.state.result);
        flushed.map(|_| result)
    }

    fn take_failed(&mut self) -> Vec<FailedRecord> {
        std::mem::take(&mut self.state.result.failed)
    }

    async fn abort(&mut self) -> Aborted {
        self.shared.abort(&mut self.state).await
    }

    fn record_loads(&mut self, files: Vec<LoadedFile>) {
        let load = Load {
            id: uuid::Uuid::new_v4().simple().to_string(),
            files,
        };
        *self.shared.load.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(load));
    }
}

/// Nothing to commit: every acknowledged write is visible and idempotent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NothingToCommit {}

/// Bigtable's side of the two-phase contract of [`outflow_core::commit`]: a write is visible
/// once acknowledged, so preparing is closing, and there is nothing to commit. A rerun
/// writer rewrites the same cells (explicit timestamps) except in aggregate families, whose
/// `AddToCell` input it adds again.
#[async_trait]
impl TwoPhaseSink for BigtableSink {
    type Committable = NothingToCommit;

    async fn prepare_commit(&mut self) -> Result<PreparedWrite<NothingToCommit>> {
        let result = self.close().await?;
        Ok(PreparedWrite {
            committables: Vec::new(),
            result,
        })
    }
}

/// Commits nothing of the rows (they are applied as written; see [`NothingToCommit`]),
/// and records a streaming checkpoint's offsets in the ledger table once its rows are.
#[derive(Clone)]
pub struct BigtableCommitter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BigtableCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BigtableCommitter")
            .field("connection", &self.shared.settings.connection)
            .finish_non_exhaustive()
    }
}

impl BigtableCommitter {
    /// A committer for the sinks of `options` (it connects at its first checkpoint).
    pub fn new(options: BigtableSinkOptions) -> Result<BigtableCommitter> {
        Ok(BigtableCommitter {
            shared: Arc::new(Shared::new(options.settings()?)),
        })
    }
}

#[async_trait]
impl Committer for BigtableCommitter {
    type Committable = NothingToCommit;

    async fn commit(&self, _committables: Vec<NothingToCommit>) -> Result<WriteResult> {
        Ok(WriteResult::default())
    }

    /// Records the checkpoint's offsets for `destination` (see [`crate::offsets`]): the
    /// writers' rows were applied when they prepared.
    async fn commit_checkpoint(
        &self,
        _committables: Vec<NothingToCommit>,
        destination: &str,
        checkpoint: &Checkpoint,
    ) -> Result<WriteResult> {
        let client = self.shared.client().await?;
        crate::offsets::commit_offsets(client, destination, checkpoint).await?;
        let mut result = WriteResult::default();
        result.record(
            destination,
            DestinationStats {
                commits: 1,
                ..Default::default()
            },
        );
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex as StdMutex;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use gcloud_sdk::tonic::Status;

    use super::*;
    use crate::options::ValueType;
    use crate::schema::{CellTimestamp, Column, ColumnMapping, RowKey};

    const UNAVAILABLE: i32 = Code::Unavailable as i32;
    const INTERNAL: i32 = Code::Internal as i32;

    /// Rows `k0..kN`; column `v` goes to raw family `f`, column `n` to sum family `s`.
    fn entries(n: usize, with_counter: &[usize]) -> Vec<(Entry, EntryMeta)> {
        let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
        let counters: Vec<Option<i64>> = (0..n).map(|i| with_counter.contains(&i).then_some(1)).collect();
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Utf8, false),
                Field::new("v", DataType::Utf8, true),
                Field::new("n", DataType::Int64, true),
            ])),
            vec![
                Arc::new(StringArray::from(keys.clone())),
                Arc::new(StringArray::from(keys)),
                Arc::new(Int64Array::from(counters)),
            ],
        )
        .unwrap();
        let mapping = RowMapping {
            row_key: RowKey::field("id"),
            columns: ColumnMapping::explicit([Column::new("v", "f"), Column::new("n", "s")]),
            timestamp: CellTimestamp::WriteTime,
            delete_marker: None,
        };
        let families: FamilyTypes =
            [("f".into(), Ok(ValueType::Raw)), ("s".into(), Ok(ValueType::Sum))].into();
        let encoder = Arc::new(RowEncoder::new(&batch.schema(), &mapping, &families, "t").unwrap());
        let source = Arc::new(Source {
            batch: batch.clone(),
            encoder: encoder.clone(),
            now_micros: 1_000,
        });
        encoder
            .encode(&batch, 0..n, 1_000)
            .unwrap()
            .into_iter()
            .enumerate()
            .map(|(row, r)| match r {
                RowResult::Encoded(e) => (
                    e.entry,
                    EntryMeta {
                        index: 100 + row as u64,
                        row,
                        source: source.clone(),
                        idempotent: e.idempotent,
                        bytes: e.bytes,
                    },
                ),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// One scripted answer: per-entry codes (None: no answer) and an optional call error.
    type Answer = (Vec<Option<i32>>, Option<Status>);
    /// Makes the answer to a call of that many entries.
    type Script = Box<dyn FnMut(usize) -> Answer + Send>;

    /// An in-process stand-in for MutateRows that answers from a script and records the
    /// keys each attempt carried.
    #[derive(Default)]
    struct Fake {
        script: StdMutex<VecDeque<Script>>,
        calls: StdMutex<Vec<Vec<String>>>,
    }

    impl Fake {
        fn then(self, answer: impl FnMut(usize) -> Answer + Send + 'static) -> Self {
            self.script.lock().unwrap().push_back(Box::new(answer));
            self
        }

        fn call(&self, batch: Vec<Entry>) -> CallOutcome {
            self.calls.lock().unwrap().push(
                batch
                    .iter()
                    .map(|e| String::from_utf8(e.row_key.clone()).unwrap())
                    .collect(),
            );
            let mut answer = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Box::new(|n| (vec![Some(0); n], None)));
            let (codes, error) = answer(batch.len());
            CallOutcome {
                statuses: codes
                    .into_iter()
                    .map(|c| {
                        c.map(|code| match code {
                            0 => EntryStatus::Ok,
                            code => EntryStatus::Failed {
                                code,
                                message: "scripted".into(),
                            },
                        })
                    })
                    .collect(),
                error,
            }
        }

        fn calls(&self) -> Vec<Vec<String>> {
            self.calls.lock().unwrap().clone()
        }
    }

    fn fast(attempts: u32) -> RetryPolicy {
        RetryPolicy::builder()
            .initial_backoff(Duration::from_millis(1))
            .max_backoff(Duration::from_millis(2))
            .max_attempts(attempts)
            .build()
            .unwrap()
    }

    async fn run(fake: &Fake, items: Vec<(Entry, EntryMeta)>, policy: RetryPolicy) -> Result<RequestReport> {
        let target = WriteTarget {
            table: "t",
            endpoint: "http://127.0.0.1:1",
            request_timeout: Duration::from_secs(60),
        };
        send_with_retries(&target, items, &policy, |batch, _| {
            let outcome = fake.call(batch);
            async move { outcome }
        })
        .await
    }

    #[tokio::test]
    async fn retryable_entry_failures_are_retried_for_idempotent_rows_only() {
        // k1 is idempotent, k2 has an AddToCell; both come back UNAVAILABLE once.
        let fake = Fake::default().then(|_| (vec![Some(0), Some(UNAVAILABLE), Some(UNAVAILABLE)], None));
        let report = run(&fake, entries(3, &[2]), fast(5)).await.unwrap();
        assert_eq!(fake.calls(), vec![vec!["k0", "k1", "k2"], vec!["k1"]]);
        assert_eq!(report.rows, 2);
        assert_eq!(report.failed.len(), 1);
        let f = &report.failed[0];
        assert_eq!(f.index, Some(102));
        assert_eq!(f.destination, "t");
        assert!(
            f.reason
                .starts_with("row 102: Bigtable rejected the row: Unavailable"),
            "{}",
            f.reason
        );
        assert!(f.reason.contains("not retried"), "{}", f.reason);
        assert_eq!(f.record.as_ref().unwrap()["id"], "k2");
    }

    #[tokio::test]
    async fn permanent_entry_failures_are_reported_and_the_rest_written() {
        let fake = Fake::default().then(|_| (vec![Some(0), Some(INTERNAL), Some(0)], None));
        let report = run(&fake, entries(3, &[]), fast(5)).await.unwrap();
        assert_eq!(fake.calls().len(), 1);
        assert_eq!(report.rows, 2);
        assert_eq!(report.failed.len(), 1);
        assert!(
            report.failed[0].reason.contains("Internal: scripted"),
            "{}",
            report.failed[0].reason
        );
    }

    #[tokio::test]
    async fn a_transient_call_failure_retries_idempotent_rows_and_reports_the_others() {
        // The connection drops after k0 was answered: k1 is resent, k2 (AddToCell) may or
        // may not have been applied, so it is reported, not resent.
        let fake = Fake::default().then(|_| {
            (
                vec![Some(0), None, None],
                Some(Status::from_error(Box::new(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "connection reset",
                )))),
            )
        });
        let report = run(&fake, entries(3, &[2]), fast(5)).await.unwrap();
        assert_eq!(fake.calls(), vec![vec!["k0", "k1", "k2"], vec!["k1"]]);
        assert_eq!(report.rows, 2);
        assert_eq!(report.failed.len(), 1);
        assert!(
            report.failed[0]
                .reason
                .contains("may or may not have been applied"),
            "{}",
            report.failed[0].reason
        );
    }

    #[tokio::test]
    async fn a_permanent_call_failure_fails_the_request() {
        let fake =
            Fake::default().then(|n| (vec![None; n], Some(Status::not_found("table \"t\" not found"))));
        let err = run(&fake, entries(2, &[]), fast(5)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(err.context_value("table"), Some("t"));
        assert_eq!(fake.calls().len(), 1);
    }

    #[tokio::test]
    async fn retries_stop_at_the_policy() {
        let always = |n: usize| (vec![Some(UNAVAILABLE); n], None);
        let fake = Fake::default().then(always).then(always).then(always);
        let report = run(&fake, entries(2, &[]), fast(3)).await.unwrap();
        assert_eq!(fake.calls().len(), 3);
        assert_eq!(report.rows, 0);
        assert_eq!(report.failed.len(), 2);
        assert!(
            report.failed[0]
                .reason
                .contains("still failing after 3 attempts (attempts exhausted)"),
            "{}",
            report.failed[0].reason
        );

        let down = |n: usize| (vec![None; n], Some(Status::unavailable("tcp connect error")));
        let fake = Fake::default().then(down).then(down);
        let err = run(&fake, entries(2, &[]), fast(2)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient);
        assert!(!err.is_retryable());
        assert!(
            err.to_string().contains("still failing after 2 attempts"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn retried_entries_are_encoded_again_identically() {
        let original = entries(2, &[]);
        let expected: Vec<Entry> = original.iter().map(|(e, _)| e.clone()).collect();
        let (_, metas): (Vec<Entry>, Vec<EntryMeta>) = original.into_iter().unzip();
        let (again, kept) = reencode(metas).unwrap();
        assert_eq!(again, expected);
        assert_eq!(kept.len(), 2);
    }

    #[test]
    fn write_time_is_in_whole_milliseconds() {
        assert_eq!(now_millis_as_micros() % 1000, 0);
    }
}
