//! BigQuery's load ledger (see [`outflow_core::loads`]): which source files each table
//! holds, kept in a table `_outflow_loads` of the table's dataset, as dlt keeps `_dlt_loads`.
//!
//! BigQuery cannot make a table's rows and a record elsewhere visible in one commit, so
//! each load writes two rows per table: an *intent* before its rows can become visible,
//! naming how they do (the pending streams to commit, the copy job that swaps them in, or
//! "as sent" for committed and default streams), then an *outcome* once they did. A run
//! killed between the two leaves an open intent, which the next run settles:
//! - pending streams: loaded when BigQuery says every stream has a commit time, abandoned
//!   when none has (their rows never became visible and never will);
//! - a copy job: loaded when it succeeded, abandoned when it failed or is unknown;
//! - rows visible as sent: the table may hold part of the files, and no count or offset
//!   says which rows. The rerun refuses to guess, names the files and says what to do.
//!
//! Rows go in by DML INSERT, so they are visible to the next query at once (a streaming
//! insert's would sit in the streaming buffer).

use outflow_core::loads::{self, LoadOutcome, LoadRecord, Settled};
use outflow_core::{Error, LoadedFile, Result};
use serde::{Deserialize, Serialize};

use crate::admin::{Admin, JobState, QueryParam};
use crate::sink::Shared;
use crate::table_ref::TableRef;

/// The ledger table's name, in each destination's dataset.
pub const LEDGER_TABLE: &str = "_outflow_loads";

/// One run's load: its id and the files it reads.
#[derive(Clone, Debug)]
pub(crate) struct Load {
    pub(crate) id: String,
    pub(crate) files: Vec<LoadedFile>,
}

impl Load {
    pub(crate) fn new(files: Vec<LoadedFile>) -> Load {
        Load {
            id: uuid::Uuid::new_v4().simple().to_string(),
            files,
        }
    }
}

/// How a load's rows become visible in a table, recorded with its intent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Visibility {
    /// As each append is acknowledged (committed and default streams).
    AsSent,
    /// When these pending streams are committed.
    Streams(Vec<String>),
    /// When this copy job (a truncate's swap) succeeds.
    CopyJob(String),
}

/// What a row of a ledger says (of a load, or of a streaming job's checkpoint), in the
/// order a load goes: a later state beats an earlier one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum State {
    /// About to make rows visible.
    Intent,
    /// Its rows never became visible.
    Abandoned,
    /// Its rows are visible.
    Loaded,
}

impl State {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            State::Intent => "intent",
            State::Loaded => "loaded",
            State::Abandoned => "abandoned",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<State> {
        match text {
            "intent" => Some(State::Intent),
            "loaded" => Some(State::Loaded),
            "abandoned" => Some(State::Abandoned),
            _ => None,
        }
    }
}

/// A load of one table as the ledger has it.
#[derive(Clone, Debug)]
struct Entry {
    record: LoadRecord,
    visibility: Option<Visibility>,
}

/// The ledger of one dataset.
pub(crate) struct Ledger<'a> {
    admin: &'a Admin,
    table: TableRef,
}

impl<'a> Ledger<'a> {
    /// The ledger of `destination`'s dataset.
    pub(crate) fn of(admin: &'a Admin, destination: &TableRef) -> Ledger<'a> {
        Ledger {
            admin,
            table: destination.with_table(LEDGER_TABLE),
        }
    }

    /// The files `destination` holds, with the open loads settled where BigQuery can say
    /// how they ended; an open load it cannot say about is an error naming its files.
    pub(crate) async fn held(&self, destination: &TableRef, shared: &Shared) -> Result<Settled> {
        let mut entries = self.entries(destination).await?;
        let open: Vec<usize> = {
            let settled = loads::settle(entries.iter().map(|e| e.record.clone()));
            let open_ids: Vec<&str> = settled.open.iter().map(|r| r.id.as_str()).collect();
            (0..entries.len())
                .filter(|&i| open_ids.contains(&entries[i].record.id.as_str()))
                .collect()
        };
        for i in open {
            let outcome = self.look_into(destination, &entries[i], shared).await?;
            entries[i].record.outcome = outcome;
        }
        let settled = loads::settle(entries.into_iter().map(|e| e.record));
        Ok(settled)
    }

    /// How an open load ended, from BigQuery's own record of its streams or copy job.
    async fn look_into(&self, destination: &TableRef, entry: &Entry, shared: &Shared) -> Result<LoadOutcome> {
        let record = &entry.record;
        let outcome = match &entry.visibility {
            Some(Visibility::Streams(streams)) => {
                let commits = shared.commits().await?;
                let mut committed = 0;
                for stream in streams {
                    let limit = commits.timeout();
                    if commits
                        .is_committed(stream, limit)
                        .await
                        .or_else(gone_is_uncommitted)?
                    {
                        committed += 1;
                    }
                }
                if committed == streams.len() {
                    LoadOutcome::Loaded
                } else if committed == 0 {
                    LoadOutcome::Abandoned
                } else {
                    return Err(self.unknown(destination, record, "only some of its streams were committed"));
                }
            }
            Some(Visibility::CopyJob(job)) => {
                match self.admin.job_state(&destination.project, job, "").await?.0 {
                    JobState::Succeeded => LoadOutcome::Loaded,
                    JobState::Failed(_) | JobState::Unknown => LoadOutcome::Abandoned,
                    JobState::Running => {
                        return Err(self.unknown(
                            destination,
                            record,
                            &format!("its copy job {job} is still running; run again when it is done"),
                        ));
                    }
                }
            }
            Some(Visibility::AsSent) | None => {
                return Err(self.unknown(
                    destination,
                    record,
                    "its rows became visible as they were sent (a committed or default stream), so the \
                     table may hold part of them. Delete that run's rows and run again with --reload (or \
                     reload: true), or run with --reload and accept them twice. A job with \
                     stream_type: pending commits its rows together, and a rerun after a stop then knows",
                ));
            }
        };
        tracing::info!(table = %destination, load = %record.id, ?outcome, "settled an interrupted load");
        // Best effort: the next run then need not ask again.
        let state = match outcome {
            LoadOutcome::Loaded => State::Loaded,
            _ => State::Abandoned,
        };
        if let Err(e) = self
            .write(destination, &record.id, state, None, None, record.replaces)
            .await
        {
            tracing::debug!(error = %e, "could not record how the interrupted load ended");
        }
        Ok(outcome)
    }

    fn unknown(&self, destination: &TableRef, record: &LoadRecord, why: &str) -> Error {
        record.stopped_error(&destination.to_string(), why)
    }

    /// Records that `load` is about to make rows visible in `destination` as `visibility`
    /// says (creating the ledger table when needed).
    pub(crate) async fn intend(
        &self,
        destination: &TableRef,
        load: &Load,
        visibility: &Visibility,
        replaces: bool,
    ) -> Result<()> {
        self.create().await?;
        let files = loads::encode(&load.files);
        let visibility = serde_json::to_string(visibility).unwrap_or_default();
        self.write(
            destination,
            &load.id,
            State::Intent,
            Some(&files),
            Some(&visibility),
            replaces,
        )
        .await
    }

    /// Records that `load`'s rows are in `destination` (with its files, so that a load
    /// that needed no intent is recorded whole).
    pub(crate) async fn loaded(&self, destination: &TableRef, load: &Load, replaces: bool) -> Result<()> {
        self.create().await?;
        let files = loads::encode(&load.files);
        self.write(destination, &load.id, State::Loaded, Some(&files), None, replaces)
            .await
    }

    /// Forgets every load of `destination`: the table was just created, so it holds none.
    pub(crate) async fn forget(&self, destination: &TableRef) -> Result<()> {
        if self.admin.get(&self.table).await?.is_none() {
            return Ok(());
        }
        let what = format!("forgetting the loads of {destination} in {}", self.table);
        let sql = format!(
            "DELETE FROM {} WHERE destination = @destination",
            self.table.sql()
        );
        self.about(destination, &what, &sql).await?;
        Ok(())
    }

    /// Runs `sql`, whose one parameter is `@destination`, about `destination`'s loads.
    async fn about(&self, destination: &TableRef, what: &str, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
        let name = destination.to_string();
        let params = [param("destination", "STRING", &name)];
        self.admin.query(&self.table.project, what, sql, &params).await
    }

    async fn create(&self) -> Result<()> {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (destination STRING NOT NULL, load_id STRING NOT NULL, \
             state STRING NOT NULL, files STRING, visibility STRING, replaces BOOL, \
             recorded_at TIMESTAMP NOT NULL)",
            self.table.sql()
        );
        self.admin.create_once(&self.table, &sql).await
    }

    async fn write(
        &self,
        destination: &TableRef,
        load_id: &str,
        state: State,
        files: Option<&str>,
        visibility: Option<&str>,
        replaces: bool,
    ) -> Result<()> {
        let what = format!("recording load {load_id} of {destination} in {}", self.table);
        let name = destination.to_string();
        let replaces = if replaces { "true" } else { "false" };
        let columns = [
            ("destination", "STRING", Some(name.as_str())),
            ("load_id", "STRING", Some(load_id)),
            ("state", "STRING", Some(state.as_str())),
            ("files", "STRING", files),
            ("visibility", "STRING", visibility),
            ("replaces", "BOOL", Some(replaces)),
        ];
        insert_recorded(self.admin, &self.table, &what, &columns).await
    }

    /// `destination`'s loads in the order they began; none when there is no ledger yet.
    async fn entries(&self, destination: &TableRef) -> Result<Vec<Entry>> {
        if self.admin.get(&self.table).await?.is_none() {
            return Ok(Vec::new());
        }
        let what = format!("reading the loads of {destination} from {}", self.table);
        let sql = format!(
            "SELECT load_id, state, files, visibility, replaces FROM {} \
             WHERE destination = @destination ORDER BY recorded_at",
            self.table.sql()
        );
        let rows = self.about(destination, &what, &sql).await?;
        entries(rows, &what)
    }
}

/// Inserts one row into ledger table `table`: each column's value as a query parameter
/// (NULL when `None`), and `recorded_at` the statement's time.
pub(crate) async fn insert_recorded(
    admin: &Admin,
    table: &TableRef,
    what: &str,
    columns: &[(&str, &str, Option<&str>)],
) -> Result<()> {
    let names: Vec<&str> = columns.iter().map(|(name, _, _)| *name).collect();
    let values: Vec<String> = columns
        .iter()
        .map(|(name, _, value)| match value {
            Some(_) => format!("@{name}"),
            None => "NULL".to_string(),
        })
        .collect();
    let sql = format!(
        "INSERT INTO {} ({}, recorded_at) VALUES ({}, CURRENT_TIMESTAMP())",
        table.sql(),
        names.join(", "),
        values.join(", ")
    );
    let params: Vec<QueryParam<'_>> = columns
        .iter()
        .filter_map(|(name, kind, value)| value.map(|v| param(name, kind, v)))
        .collect();
    admin
        .query(&table.project, what, &sql, &params)
        .await
        .map_err(|e| e.with_context("table", table.to_string()))?;
    Ok(())
}

/// A named query parameter.
pub(crate) fn param<'a>(name: &'a str, kind: &'a str, value: &'a str) -> QueryParam<'a> {
    QueryParam { name, kind, value }
}

/// A stream BigQuery no longer knows was never committed: committed streams stay known,
/// uncommitted ones are garbage-collected.
fn gone_is_uncommitted(e: Error) -> Result<bool> {
    if crate::client::is_unknown_stream(&e) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// The loads in ledger rows (`load_id, state, files, visibility, replaces`, in the order
/// recorded): one entry per load, in the order its first row was recorded.
fn entries(rows: Vec<Vec<Option<String>>>, what: &str) -> Result<Vec<Entry>> {
    let mut out: Vec<Entry> = Vec::new();
    for row in rows {
        let column = |i: usize| row.get(i).cloned().flatten();
        let (Some(id), Some(state)) = (column(0), column(1)) else {
            continue;
        };
        let Some(state) = State::parse(&state) else {
            return Err(Error::invalid_input(format!(
                "{what}: load {id} has an unknown state {state:?}"
            )));
        };
        let position = match out.iter().position(|e| e.record.id == id) {
            Some(p) => p,
            None => {
                out.push(Entry {
                    record: LoadRecord {
                        id: id.clone(),
                        files: Vec::new(),
                        replaces: false,
                        outcome: LoadOutcome::Open,
                    },
                    visibility: None,
                });
                out.len() - 1
            }
        };
        let entry = &mut out[position];
        if let Some(files) = column(2)
            && entry.record.files.is_empty()
        {
            entry.record.files = loads::decode(&files, &format!("{what}: load {id}"))?;
        }
        if let Some(visibility) = column(3) {
            entry.visibility = serde_json::from_str(&visibility).ok();
        }
        entry.record.replaces |= column(4).as_deref() == Some("true");
        match state {
            State::Intent => {}
            State::Loaded => entry.record.outcome = LoadOutcome::Loaded,
            State::Abandoned if entry.record.outcome != LoadOutcome::Loaded => {
                entry.record.outcome = LoadOutcome::Abandoned;
            }
            State::Abandoned => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        id: &str,
        state: &str,
        files: Option<&str>,
        visibility: Option<&str>,
        replaces: bool,
    ) -> Vec<Option<String>> {
        vec![
            Some(id.into()),
            Some(state.into()),
            files.map(Into::into),
            visibility.map(Into::into),
            Some(replaces.to_string()),
        ]
    }

    const FILES: &str = r#"[{"path":"/a.csv","size":1,"modified_ms":10}]"#;

    #[test]
    fn rows_group_into_loads_in_the_order_they_began() {
        let streams = serde_json::to_string(&Visibility::Streams(vec!["s1".into()])).unwrap();
        let rows = vec![
            row("l1", "intent", Some(FILES), Some(&streams), false),
            row("l2", "loaded", Some(FILES), None, true),
            row("l1", "loaded", None, None, false),
        ];
        let entries = entries(rows, "reading").unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].record.id, "l1");
        assert_eq!(entries[0].record.outcome, LoadOutcome::Loaded);
        assert_eq!(entries[0].record.files.len(), 1);
        assert_eq!(
            entries[0].visibility,
            Some(Visibility::Streams(vec!["s1".into()]))
        );
        assert!(!entries[0].record.replaces);
        assert!(entries[1].record.replaces);
    }

    #[test]
    fn an_intent_alone_is_open_and_a_loaded_load_stays_loaded() {
        let rows = vec![
            row("l1", "intent", Some(FILES), Some(r#""as_sent""#), false),
            row("l2", "intent", Some(FILES), Some(r#""as_sent""#), false),
            row("l2", "loaded", None, None, false),
            row("l2", "abandoned", None, None, false),
        ];
        let entries = entries(rows, "reading").unwrap();
        assert_eq!(entries[0].record.outcome, LoadOutcome::Open);
        assert_eq!(entries[0].visibility, Some(Visibility::AsSent));
        assert_eq!(entries[1].record.outcome, LoadOutcome::Loaded);
    }

    #[test]
    fn an_unknown_state_names_the_load() {
        let err = entries(vec![row("l9", "maybe", None, None, false)], "reading d.t").unwrap_err();
        assert!(
            err.message().contains("l9") && err.message().contains("maybe"),
            "{err}"
        );
    }

    #[test]
    fn visibility_is_recorded_as_json() {
        assert_eq!(
            serde_json::to_string(&Visibility::AsSent).unwrap(),
            r#""as_sent""#
        );
        assert_eq!(
            serde_json::to_string(&Visibility::CopyJob("j".into())).unwrap(),
            r#"{"copy_job":"j"}"#
        );
    }
}
