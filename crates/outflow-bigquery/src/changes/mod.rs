//! Change data into BigQuery: BigQuery's change data capture, which applies each row sent
//! as an upsert or a delete of the row with the same primary key.
//!
//! BigQuery takes change data only through a table's default stream, as protobuf rows
//! (not Arrow), each carrying two pseudo-columns:
//! - `_CHANGE_TYPE`: `UPSERT` or `DELETE` (an insert is sent as an upsert);
//! - `_CHANGE_SEQUENCE_NUMBER`: BigQuery keeps, for each key, the change with the greatest
//!   number, whatever order the rows arrive in. Outflow numbers changes in source order
//!   ([`SequenceNumbers`]), so a row sent again (a retried request, a rerun) changes nothing.
//!
//! Each batch is reduced first ([`outflow_core::changes::reduce`]): a key is written by its
//! last change only, and deleted (by its key columns alone) when a delete came before.
//! The table must have a primary key, the key the changes apply by: a table the sink
//! creates gets the configured key as its primary key.

pub mod proto;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use outflow_core::changes::ChangeConfig;
use outflow_core::{Error, ErrorKind, Result};

pub use proto::RowType;

use crate::request::Rows;

/// The pseudo-column saying what a row does.
pub const CHANGE_TYPE: &str = "_CHANGE_TYPE";
/// The pseudo-column ordering the changes of one key.
pub const CHANGE_SEQUENCE_NUMBER: &str = "_CHANGE_SEQUENCE_NUMBER";
/// The pseudo-columns every change row carries, in this order.
pub const PSEUDO_COLUMNS: [&str; 2] = [CHANGE_TYPE, CHANGE_SEQUENCE_NUMBER];

/// What a change row does to the row with its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    /// Inserts the row, or replaces the one with its key.
    Upsert,
    /// Deletes the row with its key.
    Delete,
}

impl ChangeType {
    /// The `_CHANGE_TYPE` value.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Upsert => "UPSERT",
            ChangeType::Delete => "DELETE",
        }
    }
}

/// `_CHANGE_SEQUENCE_NUMBER`s in source order: BigQuery compares them as up to four
/// `/`-separated hexadecimal sections of at most 16 digits, section by section. The first
/// section is when the sink started (microseconds since the epoch), the second the row's
/// index in the sink's input, so a later run's changes win over an earlier run's and, within
/// a run, a later row's over an earlier row's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceNumbers {
    run: u64,
}

impl SequenceNumbers {
    /// Numbers for a run starting now.
    pub fn starting_now() -> SequenceNumbers {
        let micros = chrono::Utc::now().timestamp_micros();
        SequenceNumbers::of_run(u64::try_from(micros).unwrap_or(0))
    }

    /// Numbers for a run that started at `run` (microseconds since the epoch).
    pub fn of_run(run: u64) -> SequenceNumbers {
        SequenceNumbers { run }
    }

    /// The number of the row at `index` of the sink's input.
    pub fn of(&self, index: u64) -> String {
        format!("{:X}/{:X}", self.run, index)
    }
}

/// The key changes apply by on a table with primary key `primary_key` (`None` while the
/// table does not exist and the sink would create it): the configured key (which must be the
/// primary key, compared without case as BigQuery compares names), or the table's primary
/// key when none is configured. Errors name the table and what to change.
pub fn table_key(table: &str, changes: &ChangeConfig, primary_key: Option<&[String]>) -> Result<Vec<String>> {
    let refused = |message: String| {
        Error::new(ErrorKind::InvalidConfig, message)
            .with_context("table", table.to_string())
            .with_context("field", "changes.key")
            .with_retryable(false)
    };
    match primary_key {
        None if changes.key.is_empty() => Err(refused(format!(
            "table {table} would be created for change data, and changes.key names no column: name the \
             key columns, which become its primary key"
        ))),
        None => Ok(changes.key.clone()),
        Some([]) => Err(refused(format!(
            "table {table} has no primary key: BigQuery applies change data by primary key (add one with \
             ALTER TABLE ... ADD PRIMARY KEY (...) NOT ENFORCED)"
        ))),
        Some(primary) if changes.key.is_empty() => Ok(primary.to_vec()),
        Some(primary) => {
            let same = primary.len() == changes.key.len()
                && primary
                    .iter()
                    .zip(&changes.key)
                    .all(|(a, b)| a.eq_ignore_ascii_case(b));
            if same {
                Ok(changes.key.clone())
            } else {
                Err(refused(format!(
                    "table {table}'s primary key is ({}), and changes.key is ({}): BigQuery applies change \
                     data by the primary key",
                    primary.join(", "),
                    changes.key.join(", ")
                )))
            }
        }
    }
}

/// The columns of the rows the table is written with: the input's without the operation
/// column (what `plan` and `prepare` check).
pub fn written_schema(input: &SchemaRef, changes: Option<&ChangeConfig>) -> SchemaRef {
    changes.map_or_else(|| input.clone(), |c| c.written_schema(input))
}

/// One table's changes of one batch: the rows to upsert and the keys to delete, each with
/// its index in the sink's input, and the rows that could not be applied.
#[derive(Debug)]
pub struct BatchChanges {
    /// Each key's last change when it writes the row, in source order.
    pub upserts: Rows,
    /// The key columns of each key whose last delete is sent, in source order.
    pub deletes: Rows,
    /// Rows that cannot be applied (an unknown operation, a null key), by position in the
    /// batch, with the reason naming the column.
    pub failed: Vec<(usize, String)>,
}

/// Reduces `rows` (one table's part of a batch) to what is sent for them, by `key` (whose
/// names are matched with the batch's columns without case, as BigQuery matches them).
pub fn batch_changes(rows: &Rows, changes: &ChangeConfig, key: &[String]) -> Result<BatchChanges> {
    let schema = rows.batch.schema();
    let key: Vec<String> = key
        .iter()
        .map(|k| {
            schema
                .fields()
                .iter()
                .find(|f| f.name().eq_ignore_ascii_case(k))
                .map_or_else(|| k.clone(), |f| f.name().clone())
        })
        .collect();
    let key = key.as_slice();
    let reduced = outflow_core::changes::reduce(&rows.batch, &changes.operation, key)?;
    let upserts = Rows {
        indices: reduced.sources.iter().map(|&i| rows.indices[i]).collect(),
        batch: reduced.rows,
    };
    // Deletes name the key alone: the rest of a delete's row may be anything, even nulls
    // in columns the table requires.
    let columns = key
        .iter()
        .map(|k| reduced.removed.schema().index_of(k))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let keys = reduced.removed.project(&columns)?;
    let mut order: Vec<usize> = (0..keys.num_rows()).collect();
    order.sort_by_key(|&p| reduced.removed_sources[p]);
    let deletes = Rows {
        indices: reduced.removed_sources.iter().map(|&i| rows.indices[i]).collect(),
        batch: keys,
    }
    .take(&order)?;
    Ok(BatchChanges {
        upserts,
        deletes,
        failed: reduced.failed,
    })
}

/// Change rows ready to append: one row type, each row encoded with its pseudo-columns.
#[derive(Debug)]
pub struct ChangeRows {
    /// The rows' message type.
    pub row_type: RowType,
    /// The encoded rows, in the order of `indices`.
    pub rows: Vec<Vec<u8>>,
    /// Each row's index in the sink's input.
    pub indices: Vec<u64>,
}

/// Encodes `rows` (converted to the Arrow types the table takes) as `change` rows numbered
/// by `sequence`.
pub fn encode(rows: &Rows, change: ChangeType, sequence: &SequenceNumbers) -> Result<ChangeRows> {
    let batch: &RecordBatch = &rows.batch;
    let row_type = RowType::of(batch.schema().fields(), &PSEUDO_COLUMNS)?;
    let encoded = rows
        .indices
        .iter()
        .enumerate()
        .map(|(position, &index)| {
            let pseudo = [
                (CHANGE_TYPE, change.as_str().to_string()),
                (CHANGE_SEQUENCE_NUMBER, sequence.of(index)),
            ];
            row_type.encode(batch, position, &pseudo)
        })
        .collect();
    Ok(ChangeRows {
        row_type,
        rows: encoded,
        indices: rows.indices.clone(),
    })
}

/// Cuts `sizes` (encoded row sizes, in order) into runs of consecutive rows of at most
/// `limit` bytes in all; a row over `limit` alone is in `oversize`.
pub fn requests_of(sizes: &[usize], limit: usize) -> (Vec<std::ops::Range<usize>>, Vec<usize>) {
    let mut runs = Vec::new();
    let mut oversize = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, &size) in sizes.iter().enumerate() {
        if size > limit {
            if start < i {
                runs.push(start..i);
            }
            oversize.push(i);
            start = i + 1;
            bytes = 0;
            continue;
        }
        if bytes + size > limit && start < i {
            runs.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < sizes.len() {
        runs.push(start..sizes.len());
    }
    (runs, oversize)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema as ArrowSchema};
    use outflow_core::changes::OperationColumn;

    use super::*;

    fn config(key: &[&str]) -> ChangeConfig {
        ChangeConfig::new(key.iter().copied(), OperationColumn::new("op"))
    }

    /// Google documents the comparison: sections left to right, each as a hexadecimal
    /// number, so a later row and a later run both compare greater.
    #[test]
    fn sequence_numbers_grow_with_the_row_and_with_the_run() {
        let compare = |a: &str, b: &str| {
            let parse = |s: &str| -> Vec<u64> {
                s.split('/')
                    .map(|x| u64::from_str_radix(x, 16).unwrap())
                    .collect()
            };
            parse(a).cmp(&parse(b))
        };
        let run = SequenceNumbers::of_run(0x1234);
        assert_eq!(run.of(0), "1234/0");
        assert_eq!(run.of(255), "1234/FF");
        assert_eq!(compare(&run.of(9), &run.of(10)), std::cmp::Ordering::Less);
        let later = SequenceNumbers::of_run(0x1235);
        assert_eq!(
            compare(&run.of(1_000_000), &later.of(0)),
            std::cmp::Ordering::Less
        );
        // At most 16 hexadecimal digits a section, whatever the numbers.
        let widest = SequenceNumbers::of_run(u64::MAX).of(u64::MAX);
        assert!(widest.split('/').all(|s| s.len() <= 16), "{widest}");
        let now = SequenceNumbers::starting_now();
        assert!(
            now.run > 1_700_000_000_000_000,
            "microseconds since the epoch: {now:?}"
        );
    }

    #[test]
    fn the_key_is_the_configured_one_or_the_tables_and_they_must_agree() {
        let keyed = config(&["id"]);
        let unkeyed = config(&[]);
        let pk = vec!["ID".to_string()];
        assert_eq!(table_key("p.d.t", &keyed, None).unwrap(), ["id"]);
        assert_eq!(table_key("p.d.t", &keyed, Some(&pk)).unwrap(), ["id"]);
        assert_eq!(table_key("p.d.t", &unkeyed, Some(&pk)).unwrap(), ["ID"]);
        let cases = [
            (table_key("p.d.t", &unkeyed, None), "would be created"),
            (table_key("p.d.t", &keyed, Some(&[])), "has no primary key"),
            (
                table_key("p.d.t", &config(&["id", "region"]), Some(&pk)),
                "primary key is (ID), and changes.key is (id, region)",
            ),
        ];
        for (result, says) in cases {
            let err = result.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
            assert!(
                err.message().contains("p.d.t") && err.message().contains(says),
                "{err}"
            );
            assert_eq!(err.context_value("table"), Some("p.d.t"));
        }
    }

    #[test]
    fn the_operation_column_is_not_written() {
        let input = Arc::new(ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("op", DataType::Utf8, true),
            Field::new("v", DataType::Utf8, true),
        ]));
        let written = written_schema(&input, Some(&config(&["id"])));
        let names: Vec<&String> = written.fields().iter().map(|f| f.name()).collect();
        assert_eq!(names, ["id", "v"]);
        assert_eq!(written_schema(&input, None), input);
    }

    #[test]
    fn a_batch_sends_each_keys_last_change_and_deletes_by_key_alone() {
        let batch = RecordBatch::try_new(
            Arc::new(ArrowSchema::new(vec![
                Field::new("id", DataType::Int64, true),
                Field::new("op", DataType::Utf8, true),
                Field::new("v", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![
                    Some(1),
                    Some(2),
                    Some(1),
                    Some(3),
                    Some(2),
                    None,
                    Some(3),
                ])),
                Arc::new(StringArray::from(vec!["c", "c", "u", "c", "d", "u", "x"])),
                Arc::new(StringArray::from(vec!["a", "b", "c", "d", "e", "f", "g"])),
            ],
        )
        .unwrap();
        let rows = Rows::numbered(batch, 100);
        // The table's primary key spelled otherwise: names match without case.
        let out = batch_changes(&rows, &config(&[]), &["ID".to_string()]).unwrap();
        // Key 1 ends upserted (row 2), key 3 inserted (row 3); key 2 ends deleted (row 4).
        assert_eq!(out.upserts.indices, [102, 103]);
        let names: Vec<&String> = out
            .upserts
            .batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name())
            .collect();
        assert_eq!(names, ["id", "v"]);
        assert_eq!(out.deletes.indices, [104]);
        assert_eq!(out.deletes.batch.num_columns(), 1);
        let failed: Vec<(usize, &str)> = out.failed.iter().map(|(i, r)| (*i, r.as_str())).collect();
        assert_eq!(
            failed,
            [
                (5, "id: the key column is null"),
                (6, "op: unknown operation \"x\"")
            ]
        );

        let sequence = SequenceNumbers::of_run(7);
        let deletes = encode(&out.deletes, ChangeType::Delete, &sequence).unwrap();
        let row = deletes.row_type.decode(&deletes.rows[0]).unwrap();
        assert_eq!(row.get_field_by_name("id").unwrap().as_i64(), Some(2));
        assert_eq!(
            row.get_field_by_name(CHANGE_TYPE).unwrap().as_str(),
            Some("DELETE")
        );
        assert_eq!(
            row.get_field_by_name(CHANGE_SEQUENCE_NUMBER).unwrap().as_str(),
            Some("7/68")
        );
    }

    #[test]
    fn requests_hold_whole_rows_under_the_limit_and_an_oversize_row_goes_alone() {
        assert_eq!(requests_of(&[4, 4, 4, 4], 8), (vec![0..2, 2..4], vec![]));
        assert_eq!(
            requests_of(&[4, 20, 4, 4, 4], 8),
            (vec![0..1, 2..4, 4..5], vec![1])
        );
        assert_eq!(requests_of(&[20], 8), (vec![], vec![0]));
        assert_eq!(requests_of(&[], 8), (vec![], vec![]));
    }
}
