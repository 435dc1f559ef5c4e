//! Bigtable's load ledger (see [`outflow_core::loads`]): which source files each table
//! holds, kept in a table `_outflow_loads` of the instance (family `loads`, a row
//! `{table}#{load id}` per table and load).
//!
//! Bigtable applies rows as they arrive, so a load records its *intent* in the ledger before
//! the first row of a table is sent (its files, and how its cells are timed), and that it
//! was *loaded* after its last row was applied. A run killed in between leaves the load
//! open, and what the next run does depends on whether writing the same rows again gives
//! the same cells:
//! - cells at the write time: every cell of a load has the load's one write time, recorded
//!   with the intent. The next run writes at that same time, so rows the killed run had
//!   applied are rewritten cell for cell, not doubled;
//! - cells at a field's time: the rows name their own cells; writing them again rewrites;
//! - server-time cells, or aggregate (AddToCell) families: writing again would add new
//!   versions or count twice, so the next run refuses, naming the files.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use gcloud_sdk::google::bigtable::admin::v2::DropRowRangeRequest;
use gcloud_sdk::google::bigtable::admin::v2::drop_row_range_request::Target;
use gcloud_sdk::google::bigtable::v2::Mutation;
use gcloud_sdk::google::bigtable::v2::mutate_rows_request::Entry;
use gcloud_sdk::google::bigtable::v2::mutation::{Mutation as Kind, SetCell};
use outflow_core::loads::{self, LoadOutcome, LoadRecord, Settled};
use outflow_core::{CreateDisposition, Error, ErrorKind, LoadedFile, Result};

use crate::client::{BigtableClient, EntryStatus, status_error};
use crate::options::{ColumnFamily, GcRule, TableCreateOptions};
use crate::read::Row;

/// The ledger table's name, in each destination's instance.
pub const LEDGER_TABLE: &str = "_outflow_loads";
pub(crate) const FAMILY: &str = "loads";

/// One run's load: its id and the files it reads.
#[derive(Clone, Debug)]
pub(crate) struct Load {
    pub(crate) id: String,
    pub(crate) files: Vec<LoadedFile>,
}

/// The write time of a load's cells: one for the whole load, so that it can be written
/// again cell for cell. It may still change (to an open load's) until the first row is
/// encoded with it.
#[derive(Debug)]
pub(crate) struct LoadTime {
    state: Mutex<(i64, bool)>,
}

impl LoadTime {
    pub(crate) fn now() -> LoadTime {
        LoadTime {
            state: Mutex::new((now_millis_as_micros(), false)),
        }
    }

    /// The time, fixed from now on.
    pub(crate) fn fix(&self) -> i64 {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 = true;
        state.0
    }

    /// Takes an open load's time, so its rows are written again at it; fails when rows were
    /// written at another time already.
    fn adopt(&self, micros: i64, table: &str, record: &LoadRecord) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.0 == micros {
            return Ok(());
        }
        if state.1 {
            return Err(open_load(
                table,
                record,
                "its cells have another write time than the rows this run has written already \
                 (several earlier runs stopped at once?)",
            ));
        }
        state.0 = micros;
        Ok(())
    }
}

/// Now, in microseconds floored to milliseconds (Bigtable's default granularity).
pub(crate) fn now_millis_as_micros() -> i64 {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    micros - micros % 1000
}

/// A load of one table as the ledger has it.
#[derive(Clone, Debug, PartialEq)]
struct LedgerEntry {
    record: LoadRecord,
    /// The load's cell time, under write_time.
    write_time: Option<i64>,
    /// Whether writing its rows again gives the same cells.
    replays: bool,
    began: i64,
}

/// The files `table` holds. An open load that can be written again cell for cell is
/// written again (at its write time, which `time` takes); one that cannot is an error.
pub(crate) async fn held(client: &BigtableClient, table: &str, time: &LoadTime) -> Result<Settled> {
    let rows = client
        .read_prefix(LEDGER_TABLE, format!("{table}#").as_bytes())
        .await?;
    let mut entries: Vec<LedgerEntry> = rows.iter().filter_map(entry).collect::<Result<_>>()?;
    entries.sort_by_key(|e| e.began);
    let settled = loads::settle(entries.iter().map(|e| e.record.clone()));
    for open in &settled.open {
        let entry = entries
            .iter()
            .find(|e| e.record.id == open.id)
            .expect("settled from these");
        if !entry.replays {
            return Err(open_load(
                table,
                open,
                "its cells are at the server's time or go to an aggregate (AddToCell) family, so \
                 writing the rows again would add versions or count them twice. Delete what it \
                 wrote and run again with --reload (or reload: true), or run with --reload and \
                 accept them twice",
            ));
        }
        if let Some(micros) = entry.write_time {
            time.adopt(micros, table, open)?;
        }
        tracing::info!(table, load = %open.id, "writing the rows of an interrupted load again, cell for cell");
    }
    Ok(settled)
}

fn open_load(table: &str, record: &LoadRecord, why: &str) -> Error {
    record.stopped_error(table, why)
}

/// The load in a ledger row, or `None` for a row that is not one.
fn entry(row: &Row) -> Option<Result<LedgerEntry>> {
    let key = String::from_utf8_lossy(&row.key).to_string();
    let (_, id) = key.rsplit_once('#')?;
    let files = row.column(FAMILY, b"files").into_iter().next()?;
    let text = String::from_utf8_lossy(&files.value);
    let parsed = match loads::decode(&text, &format!("{LEDGER_TABLE} row {key}")) {
        Ok(parsed) => parsed,
        Err(e) => return Some(Err(e)),
    };
    let text_of = |q: &[u8]| {
        row.latest(FAMILY, q)
            .map(|v| String::from_utf8_lossy(v).to_string())
    };
    Some(Ok(LedgerEntry {
        record: LoadRecord {
            id: id.to_string(),
            files: parsed,
            replaces: false,
            outcome: if text_of(b"loaded").is_some() {
                LoadOutcome::Loaded
            } else {
                LoadOutcome::Open
            },
        },
        write_time: text_of(b"write_time").and_then(|t| t.parse().ok()),
        replays: text_of(b"replays").as_deref() == Some("1"),
        began: files.timestamp_micros,
    }))
}

impl BigtableClient {
    /// Creates the ledger table, or gives it the family it lacks.
    pub(crate) async fn make_ledger(&self) -> Result<()> {
        let options = TableCreateOptions::builder()
            .column_family(ColumnFamily::new(FAMILY).with_gc_rule(GcRule::MaxVersions(1)))
            .build()?;
        self.prepare_table(LEDGER_TABLE, CreateDisposition::CreateIfNeeded, Some(&options))
            .await?;
        Ok(())
    }

    /// Records that `load` is about to write rows to `table`, at `write_time` (under
    /// write_time cells), and whether writing them again gives the same cells. The ledger
    /// table exists ([`BigtableClient::make_ledger`]).
    pub(crate) async fn record_intent(
        &self,
        table: &str,
        load: &Load,
        write_time: Option<i64>,
        replays: bool,
    ) -> Result<()> {
        let mut cells = vec![
            ("files", loads::encode(&load.files)),
            ("replays", if replays { "1" } else { "0" }.to_string()),
        ];
        if let Some(micros) = write_time {
            cells.push(("write_time", micros.to_string()));
        }
        self.put_ledger_row(table, load, &cells).await
    }

    /// Records that every row of `load` for `table` was applied.
    pub(crate) async fn record_loaded(&self, table: &str, load: &Load) -> Result<()> {
        self.put_ledger_row(table, load, &[("loaded", "1".to_string())])
            .await
    }

    /// Forgets every load of `table`: it was just created, so it holds none.
    pub(crate) async fn forget_loads(&self, table: &str) -> Result<()> {
        if self.describe_table(LEDGER_TABLE).await?.is_none() {
            return Ok(());
        }
        let name = self.table_path(LEDGER_TABLE);
        let doing = format!("forgetting the loads of {table} in {name}");
        let prefix = format!("{table}#").into_bytes();
        let message = || DropRowRangeRequest {
            name: name.clone(),
            target: Some(Target::RowKeyPrefix(prefix.clone())),
        };
        self.admin_call(
            &doing,
            ("name", &name),
            message,
            |mut admin, request| async move { admin.drop_row_range(request).await.map(|_| ()) },
        )
        .await
    }

    async fn put_ledger_row(&self, table: &str, load: &Load, cells: &[(&str, String)]) -> Result<()> {
        let key = format!("{table}#{}", load.id).into_bytes();
        let cells: Vec<(String, String)> = cells.iter().map(|(q, v)| (q.to_string(), v.clone())).collect();
        let doing = format!(
            "recording load {} of {table} in {}",
            load.id,
            self.table_path(LEDGER_TABLE)
        );
        self.put_ledger_cells(key, &cells, &doing).await
    }

    /// Writes `cells` (qualifier, value) to ledger row `key`, at the time now; `doing` says
    /// what for, in errors.
    pub(crate) async fn put_ledger_cells(
        &self,
        key: Vec<u8>,
        cells: &[(String, String)],
        doing: &str,
    ) -> Result<()> {
        let at = now_millis_as_micros();
        let entry = Entry {
            row_key: key,
            mutations: cells
                .iter()
                .map(|(qualifier, value)| Mutation {
                    mutation: Some(Kind::SetCell(SetCell {
                        family_name: FAMILY.to_string(),
                        column_qualifier: qualifier.as_bytes().to_vec(),
                        timestamp_micros: at,
                        value: value.clone().into_bytes(),
                    })),
                    ..Default::default()
                })
                .collect(),
            idempotency: None,
        };
        let endpoint = self.data_endpoint();
        // The cells have explicit timestamps: writing them again is harmless.
        self.retry
            .retry_within(doing, self.request_timeout, |timeout| {
                let entry = entry.clone();
                async move {
                    let outcome = self.mutate_rows(LEDGER_TABLE, vec![entry], timeout).await;
                    if let Some(status) = outcome.error {
                        return Err(status_error(status, doing, endpoint));
                    }
                    match outcome.statuses.into_iter().next().flatten() {
                        Some(EntryStatus::Ok) => Ok(()),
                        Some(EntryStatus::Failed { code, message }) => Err(status_error(
                            gcloud_sdk::tonic::Status::new(code.into(), message),
                            doing,
                            endpoint,
                        )),
                        None => Err(Error::new(ErrorKind::Transient, format!("{doing}: no answer"))),
                    }
                }
            })
            .await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::read::Cell;

    /// A cell of the ledger's family (for the ledger's and the offsets' tests).
    pub(crate) fn cell(qualifier: &str, value: &str, ts: i64) -> Cell {
        Cell {
            family: FAMILY.into(),
            qualifier: qualifier.as_bytes().to_vec(),
            timestamp_micros: ts,
            value: value.as_bytes().to_vec(),
            labels: Vec::new(),
        }
    }

    const FILES: &str = r#"[{"path":"/a.csv","size":1,"modified_ms":10}]"#;

    #[test]
    fn a_ledger_row_is_a_load_open_until_loaded() {
        let open = Row {
            key: b"t#l1".to_vec(),
            cells: vec![
                cell("files", FILES, 5000),
                cell("replays", "1", 5000),
                cell("write_time", "42000", 5000),
            ],
        };
        let e = entry(&open).unwrap().unwrap();
        assert_eq!(e.record.id, "l1");
        assert_eq!(e.record.outcome, LoadOutcome::Open);
        assert_eq!((e.write_time, e.replays, e.began), (Some(42000), true, 5000));
        let mut loaded = open.clone();
        loaded.cells.push(cell("loaded", "1", 6000));
        assert_eq!(
            entry(&loaded).unwrap().unwrap().record.outcome,
            LoadOutcome::Loaded
        );
        let other = Row {
            key: b"t#l2".to_vec(),
            cells: vec![cell("loaded", "1", 1)],
        };
        assert!(entry(&other).is_none(), "a row without files is no load");
    }

    #[test]
    fn an_open_load_lends_its_time_until_rows_are_written() {
        let time = LoadTime::now();
        let record = LoadRecord {
            id: "l1".into(),
            files: Vec::new(),
            replaces: false,
            outcome: LoadOutcome::Open,
        };
        time.adopt(42_000, "t", &record).unwrap();
        assert_eq!(time.fix(), 42_000);
        time.adopt(42_000, "t", &record).unwrap();
        let err = time.adopt(43_000, "t", &record).unwrap_err();
        assert!(err.message().contains("another write time"), "{err}");
    }
}
