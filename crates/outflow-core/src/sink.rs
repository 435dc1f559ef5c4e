//! The traits every sink implements, and what they report.
//!
//! A sink has two sides. [`PrepareDestination`] makes a destination table ready for data of
//! a given schema: it creates it (per the [`CreateDisposition`](crate::CreateDisposition)),
//! reconciles it (column families, evolution) or says what it would do without doing it
//! ([`PrepareDestination::plan`], what `outflow plan` prints). [`Sink`] takes batches,
//! makes them durable on [`Sink::flush`] (a commit, for Iceberg) and reports on
//! [`Sink::close`] what was written and which records failed, with reasons.

use std::collections::BTreeMap;
use std::future::Future;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{Offsets, TopicPartition};
use crate::evolution::EvolutionPlan;
use crate::loads::{LoadedFile, LoadedFiles};
use crate::named::named_enum;
use crate::{Error, Result};

/// A record a sink could not write, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailedRecord {
    /// The destination the record was meant for.
    pub destination: String,
    /// The record's position among all rows given to the sink, counting from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// The record as JSON, when the sink kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<serde_json::Value>,
    /// Why it failed, naming the field where one is to blame.
    pub reason: String,
    /// Where the record was read, which only the caller that read the input knows (sinks
    /// leave it `None`, `outflow run` fills it in); `null` when not known.
    #[serde(default)]
    pub source: Option<RecordSource>,
}

impl FailedRecord {
    /// The record as one line of a dead-letter file (NDJSON, without the newline): every
    /// key always present (`null` when the sink did not say), so readers need no schema
    /// inference. `outflow run` and the DataFusion tables write the same lines.
    pub fn dead_letter_line(&self) -> String {
        serde_json::json!({
            "destination": self.destination,
            "index": self.index,
            "record": self.record,
            "reason": self.reason,
            "source": self.source,
        })
        .to_string()
    }
}

/// Where a record came from in the input: a file, and the record's place in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSource {
    /// The file, as the caller names it.
    pub file: String,
    /// The record's place in the file.
    #[serde(flatten)]
    pub at: SourcePosition,
}

/// A record's place in its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourcePosition {
    /// The 1-based line of a text file (CSV, NDJSON), a header counting as line 1.
    Line(u64),
    /// The 0-based row offset in a file of rows (Parquet).
    Row(u64),
    /// The offset of a record in a Kafka partition; the source's `file` is then the
    /// partition, `topic/partition`.
    Offset(i64),
}

/// What a sink wrote to one destination.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationStats {
    /// Rows written.
    pub rows: u64,
    /// Bytes written (file bytes for file sinks, request bytes for service sinks).
    pub bytes: u64,
    /// Data files written (file sinks only).
    pub files: u64,
    /// Commits or acknowledged requests.
    pub commits: u64,
}

impl DestinationStats {
    fn add(&mut self, other: &DestinationStats) {
        self.rows += other.rows;
        self.bytes += other.bytes;
        self.files += other.files;
        self.commits += other.commits;
    }
}

/// What a sink wrote in all, per destination, and the records it could not write.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteResult {
    /// Per destination.
    pub destinations: BTreeMap<String, DestinationStats>,
    /// Records that were not written, with reasons.
    pub failed: Vec<FailedRecord>,
}

impl WriteResult {
    /// Counts what was written to `destination`.
    pub fn record(&mut self, destination: &str, stats: DestinationStats) {
        self.destinations
            .entry(destination.to_string())
            .or_default()
            .add(&stats);
    }

    /// Adds another result to this one.
    pub fn merge(&mut self, other: WriteResult) {
        for (destination, stats) in &other.destinations {
            self.record(destination, stats.clone());
        }
        self.failed.extend(other.failed);
    }

    /// Rows written to every destination.
    pub fn rows_written(&self) -> u64 {
        self.destinations.values().map(|s| s.rows).sum()
    }

    /// Bytes written to every destination.
    pub fn bytes_written(&self) -> u64 {
        self.destinations.values().map(|s| s.bytes).sum()
    }

    /// Data files written to every destination.
    pub fn files_written(&self) -> u64 {
        self.destinations.values().map(|s| s.files).sum()
    }
}

/// What [`Sink::abort`] cleaned up, and what it could not.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aborted {
    /// Tables the sink created that never received a commit, now removed.
    pub removed_tables: Vec<String>,
    /// Data files written for commits that never happened, now deleted.
    pub deleted_files: u64,
    /// Rows the sink was given that it gave up, never sent or sent but never committed:
    /// they never become visible.
    #[serde(default)]
    pub discarded_rows: u64,
    /// What is left behind, each naming the table or file and why it stays.
    pub left: Vec<String>,
}

impl Aborted {
    /// One line for the end of an error message: what was removed and what is left, or
    /// `None` when there was nothing to clean up.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.removed_tables.is_empty() {
            parts.push(format!(
                "removed {} {}, created by this run and never committed to",
                if self.removed_tables.len() == 1 {
                    "table"
                } else {
                    "tables"
                },
                self.removed_tables.join(", ")
            ));
        }
        if self.deleted_files > 0 {
            parts.push(format!(
                "deleted {} uncommitted data file{}",
                self.deleted_files,
                if self.deleted_files == 1 { "" } else { "s" }
            ));
        }
        if self.discarded_rows > 0 {
            parts.push(format!("discarded {} not visible yet", rows(self.discarded_rows)));
        }
        if !self.left.is_empty() {
            parts.push(format!("left behind: {}", self.left.join("; ")));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Records that `rows_written` rows of this run reached `table` (which the run
    /// `created`, or not) and stay there, visible: what a sink whose writes are visible as
    /// they go (or that committed before the failure) cannot take back. `how` says how they
    /// got there (`applied`, `committed`).
    pub fn rows_stay(&mut self, table: &str, created: bool, rows_written: u64, how: &str) {
        let created = if created { " (created by this run)" } else { "" };
        self.left.push(format!(
            "table {table}{created} keeps {} {how} before the run stopped",
            rows(rows_written)
        ));
    }

    /// Removes `table`, which this run created and made nothing visible in, when
    /// `is_empty` (the service's answer) says no rows reached it after all: rows of a
    /// request whose answer was lost, or of another writer, keep it. `delete` removes it.
    /// Best effort: a table that holds rows, could not be checked or could not be deleted
    /// is listed as left behind, saying why.
    pub async fn remove_if_empty<D, DF>(&mut self, table: &str, is_empty: Result<bool>, delete: D)
    where
        D: FnOnce() -> DF,
        DF: Future<Output = Result<()>>,
    {
        match is_empty {
            Ok(true) => match delete().await {
                Ok(()) => self.removed_tables.push(table.to_string()),
                Err(e) => self
                    .left
                    .push(format!("table {table}, created by this run: {}", e.message())),
            },
            Ok(false) => self.left.push(format!(
                "table {table}, created by this run, holds rows the run did not count as written \
                 (a request whose answer was lost, or another writer's)"
            )),
            Err(e) => self.left.push(format!(
                "table {table}, created by this run, could not be checked: {}",
                e.message()
            )),
        }
    }
}

/// `1 row`, `3 rows`.
fn rows(n: u64) -> String {
    format!("{n} row{}", if n == 1 { "" } else { "s" })
}

named_enum! {
    /// What preparing a destination does.
    pub enum PlannedAction {
        /// The table is created.
        Create = "create",
        /// The existing table is changed (schema evolved, families added).
        Update = "update",
        /// The existing table is used as it is.
        Unchanged = "unchanged",
        /// Preparing fails; see the error.
        Fail = "fail",
    }
}

/// What preparing one destination does, or would do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DestinationPlan {
    /// The destination, as the sink names it (`ns.table`, `dataset.table`, `table`).
    pub destination: String,
    /// The action.
    pub action: PlannedAction,
    /// The schema evolution plan, for sinks that evolve schemas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evolution: Option<EvolutionPlan>,
    /// Sink-specific lines for people (families to add, partitioning to create...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// The error preparing would hit, when the action is `fail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl DestinationPlan {
    /// A plan with an action and nothing else.
    pub fn new(destination: impl Into<String>, action: PlannedAction) -> Self {
        DestinationPlan {
            destination: destination.into(),
            action,
            evolution: None,
            details: Vec::new(),
            error: None,
        }
    }

    /// A plan that fails with `error`.
    pub fn failed(destination: impl Into<String>, error: &Error) -> Self {
        DestinationPlan {
            error: Some(error.to_string()),
            ..DestinationPlan::new(destination, PlannedAction::Fail)
        }
    }

    /// The same plan with its evolution plan.
    pub fn with_evolution(mut self, plan: EvolutionPlan) -> Self {
        self.evolution = Some(plan);
        self
    }

    /// The same plan with one more detail line.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.details.push(detail.into());
        self
    }
}

/// Makes destinations ready for data: creates or reconciles them per the sink's
/// dispositions, evolution config and table options.
#[async_trait]
pub trait PrepareDestination: Send + Sync {
    /// Says what [`PrepareDestination::prepare`] would do for data of `schema`, changing
    /// nothing. An error the preparation would hit is reported in the plan, not returned;
    /// `Err` means the plan itself could not be made (for example, the service is down).
    async fn plan(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan>;

    /// Creates or reconciles `destination` so data of `schema` can be written to it, and
    /// says what it did.
    async fn prepare(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan>;

    /// The source files `destination` already holds, from its load ledger (see
    /// [`crate::loads`]): empty for a table that does not exist yet, `None` for a sink that
    /// keeps no ledger (every run loads every file).
    async fn loaded_files(&self, _destination: &str) -> Result<Option<LoadedFiles>> {
        Ok(None)
    }

    /// The source offsets of streaming job `job` that `destination` holds (see
    /// [`crate::checkpoint`]) for `partitions` (every partition when `None`): empty for a
    /// table that does not exist yet, `None` for a sink that cannot store offsets (a
    /// streaming job refuses it). A process asks for the partitions it owns: a sink that
    /// settles interrupted checkpoints while reading (BigQuery) then leaves alone those of
    /// partitions another process may be committing.
    async fn stored_offsets(
        &self,
        _destination: &str,
        _job: &str,
        _partitions: Option<&[TopicPartition]>,
    ) -> Result<Option<Offsets>> {
        Ok(None)
    }
}

/// Writes Arrow batches to one or more destinations.
#[async_trait]
pub trait Sink: Send {
    /// Writes one batch; rows may be buffered until [`Sink::flush`]. Rows the destination
    /// rejects individually are kept as failed records rather than failing the call.
    async fn write(&mut self, batch: RecordBatch) -> Result<()>;

    /// Makes every row written so far durable and visible (a commit, for Iceberg).
    async fn flush(&mut self) -> Result<()>;

    /// Flushes, releases resources and reports what was written. Writing after closing is
    /// an error.
    async fn close(&mut self) -> Result<WriteResult>;

    /// Hands over the records rejected since the last call, so that a caller can stream
    /// them to a dead-letter output as they happen and hold none of them; the records
    /// taken are left out of [`Sink::close`]'s result. A sink that keeps its rejects until
    /// it closes takes the default, which hands over none.
    fn take_failed(&mut self) -> Vec<FailedRecord> {
        Vec::new()
    }

    /// Gives up what has not been committed, after a failure or an interruption: data
    /// files written for a commit that never happened are deleted, and tables the sink (or
    /// its preparer) created that never received a commit are removed, so a failed run
    /// leaves nothing but what the result names. Best effort: it never fails, and what it
    /// could not remove is listed. Writing after aborting is an error. A sink whose writes
    /// are visible as they go cannot take them back: it says in [`Aborted::left`] what
    /// stays ([`Aborted::rows_stay`]), and removes only a table it created that no row
    /// reached.
    async fn abort(&mut self) -> Aborted {
        Aborted::default()
    }

    /// Says, before the first write, which source files the rows to come are read from, so
    /// that a sink keeping a load ledger (see [`crate::loads`]) records them as loaded with
    /// each destination's next flush, together with the rows; a sink without one ignores
    /// them. A runner that calls this flushes once, at the end of the load. A sink whose
    /// rows become visible as they are sent records its intent before the first of them.
    /// A commit that replaces a table's rows (truncate) records its files in place of the
    /// earlier ones.
    fn record_loads(&mut self, _files: Vec<LoadedFile>) {}
}

/// Converts one row of a batch to JSON, for failed records and dead-letter files.
pub fn row_to_json(batch: &RecordBatch, row: usize) -> Option<serde_json::Value> {
    if row >= batch.num_rows() {
        return None;
    }
    let slice = batch.slice(row, 1);
    let mut writer = arrow_json::ArrayWriter::new(Vec::new());
    writer.write(&slice).ok()?;
    writer.finish().ok()?;
    let mut rows: Vec<serde_json::Value> = serde_json::from_slice(&writer.into_inner()).ok()?;
    rows.pop()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::ErrorKind;

    #[test]
    fn results_add_up_per_destination() {
        let mut total = WriteResult::default();
        total.record(
            "db.a",
            DestinationStats {
                rows: 10,
                bytes: 100,
                files: 1,
                commits: 1,
            },
        );
        let mut other = WriteResult::default();
        other.record(
            "db.a",
            DestinationStats {
                rows: 5,
                bytes: 50,
                files: 1,
                commits: 1,
            },
        );
        other.record(
            "db.b",
            DestinationStats {
                rows: 1,
                bytes: 7,
                files: 0,
                commits: 1,
            },
        );
        other.failed.push(FailedRecord {
            source: None,
            destination: "db.b".into(),
            index: Some(3),
            record: None,
            reason: "id: null in a required column".into(),
        });
        total.merge(other);
        assert_eq!(
            (total.rows_written(), total.bytes_written(), total.files_written()),
            (16, 157, 2)
        );
        assert_eq!(total.destinations["db.a"].commits, 2);
        assert_eq!(total.failed.len(), 1);
        let json = serde_json::to_string(&total).unwrap();
        assert_eq!(serde_json::from_str::<WriteResult>(&json).unwrap(), total);
    }

    #[test]
    fn dead_letter_lines_carry_every_key() {
        let failed = FailedRecord {
            source: None,
            destination: "db.t".into(),
            index: None,
            record: Some(serde_json::json!({"id": 1})),
            reason: "id is odd".into(),
        };
        let line: serde_json::Value = serde_json::from_str(&failed.dead_letter_line()).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"destination": "db.t", "index": null, "record": {"id": 1}, "reason": "id is odd", "source": null})
        );
    }

    #[test]
    fn dead_letter_lines_say_where_the_record_came_from() {
        let failed = FailedRecord {
            source: None,
            destination: "db.t".into(),
            index: Some(4),
            record: None,
            reason: "id is odd".into(),
        };
        let line = |at| {
            let source = RecordSource {
                file: "in/a.csv".into(),
                at,
            };
            let failed = FailedRecord {
                source: Some(source),
                ..failed.clone()
            };
            serde_json::from_str::<serde_json::Value>(&failed.dead_letter_line()).unwrap()
        };
        assert_eq!(
            line(SourcePosition::Line(7)),
            serde_json::json!({"destination": "db.t", "index": 4, "record": null, "reason": "id is odd",
                "source": {"file": "in/a.csv", "line": 7}})
        );
        assert_eq!(
            line(SourcePosition::Row(0))["source"],
            serde_json::json!({"file": "in/a.csv", "row": 0})
        );
    }

    #[test]
    fn rows_become_json() {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("name", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
            ],
        )
        .unwrap();
        assert_eq!(
            row_to_json(&batch, 0).unwrap(),
            serde_json::json!({"id": 1, "name": "a"})
        );
        assert_eq!(row_to_json(&batch, 1).unwrap(), serde_json::json!({"id": 2}));
        assert!(row_to_json(&batch, 2).is_none());
    }

    #[tokio::test]
    async fn an_abort_says_what_it_removed_discarded_and_left() {
        assert_eq!(Aborted::default().describe(), None);
        let mut aborted = Aborted {
            discarded_rows: 1,
            ..Aborted::default()
        };
        aborted.rows_stay("d.kept", true, 4, "applied");
        aborted.rows_stay("d.old", false, 1, "committed");
        aborted
            .remove_if_empty("d.fresh", Ok(true), || async { Ok(()) })
            .await;
        aborted
            .remove_if_empty("d.busy", Ok(false), || async {
                panic!("a table with rows is never deleted")
            })
            .await;
        aborted
            .remove_if_empty(
                "d.gone",
                Err(Error::new(ErrorKind::Transient, "no answer")),
                || async { panic!("an unchecked table is never deleted") },
            )
            .await;
        aborted
            .remove_if_empty("d.stuck", Ok(true), || async {
                Err(Error::new(ErrorKind::Transient, "refused"))
            })
            .await;
        assert_eq!(aborted.removed_tables, ["d.fresh"]);
        assert_eq!(
            aborted.describe().unwrap(),
            "removed table d.fresh, created by this run and never committed to; \
             discarded 1 row not visible yet; \
             left behind: table d.kept (created by this run) keeps 4 rows applied before the run stopped; \
             table d.old keeps 1 row committed before the run stopped; \
             table d.busy, created by this run, holds rows the run did not count as written \
             (a request whose answer was lost, or another writer's); \
             table d.gone, created by this run, could not be checked: no answer; \
             table d.stuck, created by this run: refused"
        );
    }

    #[test]
    fn plans_serialize() {
        let plan = DestinationPlan::new("db.t", PlannedAction::Update).with_detail("add family stats (sum)");
        let json = serde_json::to_string(&plan).unwrap();
        assert_eq!(
            json,
            r#"{"destination":"db.t","action":"update","details":["add family stats (sum)"]}"#
        );
        assert_eq!(serde_json::from_str::<DestinationPlan>(&json).unwrap(), plan);
        let failed = DestinationPlan::failed("db.t", &Error::not_found("table", "db.t"));
        assert_eq!(failed.action, PlannedAction::Fail);
        assert!(failed.error.unwrap().contains("db.t does not exist"));
    }
}
