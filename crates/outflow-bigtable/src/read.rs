//! Reading rows back: ReadRows and the merging of its cell chunks into rows.
//!
//! Outflow writes; it reads only to check (tests, `ensure-table` callers, small tools). A
//! ReadRows response is a stream of cell chunks. The service sends them compactly: a chunk
//! inherits the row key, family and qualifier of the previous one when it leaves them out,
//! a large value arrives split over several chunks (`value_size` announces the total on all
//! but the last), and a row may be reset mid-way and sent again. The emulator never does
//! any of that (one whole cell per chunk), so the merger is unit-tested on synthetic chunks.

use gcloud_sdk::google::bigtable::v2::read_rows_response::CellChunk;
use gcloud_sdk::google::bigtable::v2::read_rows_response::cell_chunk::RowStatus;
use gcloud_sdk::google::bigtable::v2::row_range::{EndKey, StartKey};
use gcloud_sdk::google::bigtable::v2::{ReadRowsRequest, RowRange, RowSet};
use outflow_core::{Error, ErrorKind, Result};

use crate::client::{BigtableClient, status_error};

/// One cell version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// The column family.
    pub family: String,
    /// The column qualifier.
    pub qualifier: Vec<u8>,
    /// The version's timestamp, in microseconds.
    pub timestamp_micros: i64,
    /// The value (8-byte big-endian integers in aggregate families).
    pub value: Vec<u8>,
    /// Labels a read filter attached.
    pub labels: Vec<String>,
}

/// One row: its key and its cells, in the order the server sent them (by family, then
/// qualifier, newest version first within a column).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The row key.
    pub key: Vec<u8>,
    /// The cells.
    pub cells: Vec<Cell>,
}

impl Row {
    /// The versions of one column, newest first.
    pub fn column(&self, family: &str, qualifier: &[u8]) -> Vec<&Cell> {
        self.cells
            .iter()
            .filter(|c| c.family == family && c.qualifier == qualifier)
            .collect()
    }

    /// The newest value of one column.
    pub fn latest(&self, family: &str, qualifier: &[u8]) -> Option<&[u8]> {
        self.cells
            .iter()
            .filter(|c| c.family == family && c.qualifier == qualifier)
            .max_by_key(|c| c.timestamp_micros)
            .map(|c| c.value.as_slice())
    }
}

/// Rebuilds rows from ReadRows chunks; feed chunks in order, collect committed rows.
#[derive(Debug, Default)]
pub(crate) struct RowMerger {
    key: Option<Vec<u8>>,
    family: Option<String>,
    qualifier: Option<Vec<u8>>,
    /// A cell whose value is still arriving.
    partial: Option<Cell>,
    cells: Vec<Cell>,
    last_key: Option<Vec<u8>>,
}

impl RowMerger {
    /// Takes one chunk; returns the row it commits, if any.
    pub(crate) fn push(&mut self, chunk: CellChunk) -> std::result::Result<Option<Row>, String> {
        if let Some(RowStatus::ResetRow(true)) = chunk.row_status {
            if !chunk.row_key.is_empty()
                || chunk.family_name.is_some()
                || chunk.qualifier.is_some()
                || !chunk.value.is_empty()
                || chunk.timestamp_micros != 0
            {
                return Err("a reset chunk carries data".into());
            }
            if self.key.is_none() {
                return Err("a reset chunk outside a row".into());
            }
            // Forget the uncommitted row entirely; the server sends it again.
            *self = RowMerger {
                last_key: self.last_key.take(),
                ..RowMerger::default()
            };
            return Ok(None);
        }
        let commit = matches!(chunk.row_status, Some(RowStatus::CommitRow(true)));
        match self.partial.as_mut() {
            Some(partial) => {
                if !chunk.row_key.is_empty() || chunk.family_name.is_some() || chunk.qualifier.is_some() {
                    return Err("a chunk continuing a split value names a row or column".into());
                }
                partial.value.extend_from_slice(&chunk.value);
                if chunk.value_size == 0 {
                    let cell = self.partial.take().expect("checked above");
                    self.cells.push(cell);
                }
            }
            None => self.start_cell(chunk)?,
        }
        if commit {
            if self.partial.is_some() {
                return Err("a row committed in the middle of a split value".into());
            }
            let key = self.key.take().ok_or("a commit outside a row")?;
            self.family = None;
            self.qualifier = None;
            self.last_key = Some(key.clone());
            return Ok(Some(Row {
                key,
                cells: std::mem::take(&mut self.cells),
            }));
        }
        Ok(None)
    }

    fn start_cell(&mut self, chunk: CellChunk) -> std::result::Result<(), String> {
        if chunk.row_key.is_empty() {
            if self.key.is_none() {
                return Err("the first chunk of a row has no row key".into());
            }
        } else {
            match &self.key {
                Some(key) if *key != chunk.row_key => {
                    return Err("a new row key before the row was committed".into());
                }
                Some(_) => {}
                None => {
                    if self.last_key.as_ref().is_some_and(|last| chunk.row_key <= *last) {
                        return Err("row keys out of order".into());
                    }
                    self.key = Some(chunk.row_key);
                }
            }
        }
        match (chunk.family_name, chunk.qualifier) {
            (Some(family), Some(qualifier)) => {
                self.family = Some(family);
                self.qualifier = Some(qualifier);
            }
            (Some(_), None) => return Err("a chunk names a family without a qualifier".into()),
            (None, Some(qualifier)) => self.qualifier = Some(qualifier),
            (None, None) => {}
        }
        let (Some(family), Some(qualifier)) = (self.family.clone(), self.qualifier.clone()) else {
            return Err("a cell without a family or qualifier".into());
        };
        let mut value = Vec::with_capacity(
            usize::try_from(chunk.value_size)
                .unwrap_or(0)
                .max(chunk.value.len()),
        );
        value.extend_from_slice(&chunk.value);
        let cell = Cell {
            family,
            qualifier,
            timestamp_micros: chunk.timestamp_micros,
            value,
            labels: chunk.labels,
        };
        if chunk.value_size > 0 {
            self.partial = Some(cell);
        } else {
            self.cells.push(cell);
        }
        Ok(())
    }

    /// Checks the stream did not end inside a row.
    pub(crate) fn finish(&self) -> std::result::Result<(), String> {
        if self.key.is_some() || self.partial.is_some() {
            Err("the stream ended inside a row".into())
        } else {
            Ok(())
        }
    }
}

impl BigtableClient {
    /// Reads a whole table into memory, rows in key order. Meant for checks and tests of
    /// modest tables, not for exporting data.
    pub async fn read_rows(&self, table: &str) -> Result<Vec<Row>> {
        self.read(table, None, 0).await
    }

    /// Reads the rows whose keys start with `prefix` (none when the table does not exist).
    pub(crate) async fn read_prefix(&self, table: &str, prefix: &[u8]) -> Result<Vec<Row>> {
        if self.describe_table(table).await?.is_none() {
            return Ok(Vec::new());
        }
        let mut end = prefix.to_vec();
        // The first key after every key with the prefix; a prefix of 0xff bytes only runs
        // to the end of the table.
        let end_key = loop {
            match end.pop() {
                Some(0xff) => continue,
                Some(b) => {
                    end.push(b + 1);
                    break Some(EndKey::EndKeyOpen(end));
                }
                None => break None,
            }
        };
        let set = RowSet {
            row_keys: Vec::new(),
            row_ranges: vec![RowRange {
                start_key: Some(StartKey::StartKeyClosed(prefix.to_vec())),
                end_key,
            }],
        };
        self.read_set(table, Some(set), 0).await
    }

    /// Whether `table` holds no row, reading at most one.
    pub(crate) async fn is_empty(&self, table: &str) -> Result<bool> {
        Ok(self.read(table, None, 1).await?.is_empty())
    }

    /// Reads the rows with the given keys (in key order; missing keys are skipped).
    pub async fn read_rows_by_key(&self, table: &str, keys: &[Vec<u8>]) -> Result<Vec<Row>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.read(table, Some(keys.to_vec()), 0).await
    }

    async fn read(&self, table: &str, keys: Option<Vec<Vec<u8>>>, limit: i64) -> Result<Vec<Row>> {
        let set = keys.map(|row_keys| RowSet {
            row_keys,
            row_ranges: Vec::new(),
        });
        self.read_set(table, set, limit).await
    }

    /// ReadRows of the whole table or of the row set, at most `limit` rows (0: no limit). A read
    /// that fails in a way worth retrying starts again from the beginning (under the
    /// client's retry policy, each attempt within the request timeout).
    async fn read_set(&self, table: &str, rows: Option<RowSet>, limit: i64) -> Result<Vec<Row>> {
        let name = self.table_path(table);
        let doing = format!("reading rows of table {name}");
        let endpoint = self.data_endpoint();
        self.retry
            .retry_within(&doing, self.request_timeout, |timeout| {
                let message = ReadRowsRequest {
                    table_name: name.clone(),
                    app_profile_id: self.connection().app_profile_id().unwrap_or_default().to_string(),
                    rows: rows.clone(),
                    rows_limit: limit,
                    ..Default::default()
                };
                let request = self.request(message, "table_name", &name, timeout);
                let mut data = self.data.clone();
                let doing = &doing;
                async move {
                    let mut stream = data
                        .read_rows(request)
                        .await
                        .map_err(|s| status_error(s, doing, endpoint))?
                        .into_inner();
                    let mut merger = RowMerger::default();
                    let mut rows = Vec::new();
                    while let Some(response) = stream
                        .message()
                        .await
                        .map_err(|s| status_error(s, doing, endpoint))?
                    {
                        for chunk in response.chunks {
                            let row = merger.push(chunk).map_err(|why| {
                                Error::new(ErrorKind::Internal, format!("{doing}: malformed response: {why}"))
                            })?;
                            rows.extend(row);
                        }
                    }
                    merger
                        .finish()
                        .map_err(|why| Error::new(ErrorKind::Internal, format!("{doing}: {why}")))?;
                    Ok(rows)
                }
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(key: &[u8], family: Option<&str>, qualifier: Option<&[u8]>, ts: i64, value: &[u8]) -> CellChunk {
        CellChunk {
            row_key: key.to_vec(),
            family_name: family.map(str::to_string),
            qualifier: qualifier.map(<[u8]>::to_vec),
            timestamp_micros: ts,
            labels: Vec::new(),
            value: value.to_vec(),
            value_size: 0,
            row_status: None,
        }
    }

    fn split(mut c: CellChunk, total: i32) -> CellChunk {
        c.value_size = total;
        c
    }

    fn commit(mut c: CellChunk) -> CellChunk {
        c.row_status = Some(RowStatus::CommitRow(true));
        c
    }

    fn reset() -> CellChunk {
        CellChunk {
            row_status: Some(RowStatus::ResetRow(true)),
            ..Default::default()
        }
    }

    fn merge(chunks: Vec<CellChunk>) -> std::result::Result<Vec<Row>, String> {
        let mut merger = RowMerger::default();
        let mut rows = Vec::new();
        for c in chunks {
            rows.extend(merger.push(c)?);
        }
        merger.finish()?;
        Ok(rows)
    }

    fn cells(row: &Row) -> Vec<(&str, &[u8], i64, &[u8])> {
        row.cells
            .iter()
            .map(|c| {
                (
                    c.family.as_str(),
                    c.qualifier.as_slice(),
                    c.timestamp_micros,
                    c.value.as_slice(),
                )
            })
            .collect()
    }

    #[test]
    fn one_cell_per_chunk_as_the_emulator_sends() {
        let rows = merge(vec![
            chunk(b"a", Some("f"), Some(b"q"), 2000, b"1"),
            commit(chunk(b"a", Some("g"), Some(b"r"), 1000, b"2")),
            commit(chunk(b"b", Some("f"), Some(b"q"), 1000, b"3")),
        ])
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            cells(&rows[0]),
            [("f", &b"q"[..], 2000, &b"1"[..]), ("g", b"r", 1000, b"2")]
        );
        assert_eq!(rows[1].latest("f", b"q"), Some(&b"3"[..]));
    }

    #[test]
    fn inherited_key_family_and_qualifier() {
        let rows = merge(vec![
            chunk(b"a", Some("f"), Some(b"q"), 3000, b"new"),
            chunk(b"", None, None, 2000, b"old"),
            chunk(b"", None, Some(b"r"), 1000, b"x"),
            commit(chunk(b"", Some("g"), Some(b"q"), 1000, b"y")),
        ])
        .unwrap();
        assert_eq!(
            cells(&rows[0]),
            [
                ("f", &b"q"[..], 3000, &b"new"[..]),
                ("f", b"q", 2000, b"old"),
                ("f", b"r", 1000, b"x"),
                ("g", b"q", 1000, b"y"),
            ]
        );
        assert_eq!(rows[0].column("f", b"q").len(), 2);
        assert_eq!(rows[0].latest("f", b"q"), Some(&b"new"[..]));
    }

    #[test]
    fn split_values_are_joined() {
        let rows = merge(vec![
            split(chunk(b"a", Some("f"), Some(b"q"), 1000, b"hel"), 11),
            split(chunk(b"", None, None, 0, b"lo wo"), 11),
            chunk(b"", None, None, 0, b"rld"),
            commit(chunk(b"", None, Some(b"r"), 1000, b"!")),
        ])
        .unwrap();
        assert_eq!(
            cells(&rows[0]),
            [
                ("f", &b"q"[..], 1000, &b"hello world"[..]),
                ("f", b"r", 1000, b"!")
            ]
        );
    }

    #[test]
    fn a_reset_drops_the_uncommitted_row_even_mid_value() {
        let rows = merge(vec![
            commit(chunk(b"a", Some("f"), Some(b"q"), 1000, b"kept")),
            chunk(b"b", Some("f"), Some(b"q"), 1000, b"dropped"),
            split(chunk(b"", None, Some(b"r"), 1000, b"half"), 8),
            reset(),
            commit(chunk(b"b", Some("f"), Some(b"q"), 1000, b"again")),
        ])
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(cells(&rows[1]), [("f", &b"q"[..], 1000, &b"again"[..])]);
    }

    #[test]
    fn malformed_streams_are_errors() {
        let cases: Vec<(&str, Vec<CellChunk>)> = vec![
            ("no key", vec![chunk(b"", Some("f"), Some(b"q"), 0, b"x")]),
            (
                "family without qualifier",
                vec![chunk(b"a", Some("f"), None, 0, b"x")],
            ),
            ("no family", vec![chunk(b"a", None, Some(b"q"), 0, b"x")]),
            (
                "ends inside a row",
                vec![chunk(b"a", Some("f"), Some(b"q"), 0, b"x")],
            ),
            (
                "ends inside a value",
                vec![split(chunk(b"a", Some("f"), Some(b"q"), 0, b"x"), 4)],
            ),
            (
                "commit inside a value",
                vec![commit(split(chunk(b"a", Some("f"), Some(b"q"), 0, b"x"), 4))],
            ),
            (
                "keys out of order",
                vec![
                    commit(chunk(b"b", Some("f"), Some(b"q"), 0, b"x")),
                    commit(chunk(b"a", Some("f"), Some(b"q"), 0, b"x")),
                ],
            ),
            (
                "new key before commit",
                vec![
                    chunk(b"a", Some("f"), Some(b"q"), 0, b"x"),
                    chunk(b"b", Some("f"), Some(b"q"), 0, b"x"),
                ],
            ),
            ("reset outside a row", vec![reset()]),
        ];
        for (what, chunks) in cases {
            assert!(merge(chunks).is_err(), "{what}");
        }
    }
}
