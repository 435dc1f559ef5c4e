//! Change data: rows that insert, upsert or delete earlier rows by key.
//!
//! A change is a row, an operation ([`ChangeOp`]) read from a column of the row
//! ([`OperationColumn`]), and a key (one or more columns). [`reduce`] is the pure step every
//! sink's upsert mode shares: within one batch (one flush, one checkpoint) the last change
//! to a key wins, in source order, and what is left is
//!
//! - the rows to write: for each key whose last change is not a delete, that change's row;
//! - the keys whose earlier rows go: every key an upsert or a delete touched in the batch
//!   (an Iceberg equality delete, a BigQuery `DELETE`, a Bigtable row deletion).
//!
//! A key only inserted in the batch deletes nothing: an insert says the key is new, as in
//! Flink's non-upsert writes. A row the batch cannot apply (an operation value the column's
//! mapping does not name, a null in a key column) is a failed record naming the column; the
//! others are applied.
//!
//! [`debezium`] unwraps Debezium's change event envelope into such rows.

pub mod debezium;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, UInt32Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Schema, SchemaRef};
use serde::{Deserialize, Serialize};

use crate::{Error, ErrorKind, Result};

/// What a change does to the rows of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeOp {
    /// A new key: the row is written, nothing is deleted.
    Insert,
    /// The row replaces whatever the key held (an update, or an insert that may repeat).
    Upsert,
    /// The key's rows go.
    Delete,
}

/// The column that holds each row's operation, and which of its values mean which
/// operation. The defaults cover Outflow's own words and Debezium's `op` codes (`c` create
/// and `r` snapshot read insert, `u` upserts, `d` deletes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationColumn {
    /// The column's name. It is not written to the table.
    pub column: String,
    /// Values that mean insert.
    #[serde(default = "default_insert")]
    pub insert: Vec<String>,
    /// Values that mean upsert.
    #[serde(default = "default_upsert")]
    pub upsert: Vec<String>,
    /// Values that mean delete.
    #[serde(default = "default_delete")]
    pub delete: Vec<String>,
}

fn default_insert() -> Vec<String> {
    ["insert", "c", "r"].map(String::from).to_vec()
}

fn default_upsert() -> Vec<String> {
    ["upsert", "update", "u"].map(String::from).to_vec()
}

fn default_delete() -> Vec<String> {
    ["delete", "d"].map(String::from).to_vec()
}

impl OperationColumn {
    /// The column `column` with the default values.
    pub fn new(column: impl Into<String>) -> OperationColumn {
        OperationColumn {
            column: column.into(),
            insert: default_insert(),
            upsert: default_upsert(),
            delete: default_delete(),
        }
    }

    /// Checks the mapping: a column name that is not blank, each value under one operation.
    pub fn validate(&self) -> Result<()> {
        if self.column.trim().is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "changes.operation.column: the name is blank",
            ));
        }
        let mut seen: HashMap<&str, ChangeOp> = HashMap::new();
        for (op, values) in self.values() {
            for value in values {
                if let Some(other) = seen.insert(value, op).filter(|other| *other != op) {
                    return Err(Error::new(
                        ErrorKind::InvalidConfig,
                        format!("changes.operation: the value {value:?} means both {other:?} and {op:?}"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn values(&self) -> [(ChangeOp, &Vec<String>); 3] {
        [
            (ChangeOp::Insert, &self.insert),
            (ChangeOp::Upsert, &self.upsert),
            (ChangeOp::Delete, &self.delete),
        ]
    }

    /// The operation `value` names, if any.
    pub fn op_of(&self, value: &str) -> Option<ChangeOp> {
        self.values()
            .into_iter()
            .find(|(_, values)| values.iter().any(|v| v == value))
            .map(|(op, _)| op)
    }
}

/// How a sink applies change data: the key its changes replace and delete by, and the
/// column that says what each row does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeConfig {
    /// The key columns. Empty: the destination's own key (an Iceberg table's identifier
    /// fields), where it has one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    /// The operation column and its values.
    pub operation: OperationColumn,
}

impl ChangeConfig {
    /// Changes keyed by `key`, their operation in `operation`'s column.
    pub fn new(key: impl IntoIterator<Item = impl Into<String>>, operation: OperationColumn) -> ChangeConfig {
        ChangeConfig {
            key: key.into_iter().map(Into::into).collect(),
            operation,
        }
    }

    /// The columns written for input of `schema`: all but the operation column, which is
    /// read and never written.
    pub fn written_schema(&self, schema: &SchemaRef) -> SchemaRef {
        let fields: Vec<_> = schema
            .fields()
            .iter()
            .filter(|f| *f.name() != self.operation.column)
            .cloned()
            .collect();
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
    }

    /// Checks that input of `schema` has the operation column and the key columns, naming
    /// the option and the column it lacks (what `outflow check` adds for change data).
    pub fn check_input(&self, schema: &Schema) -> Result<()> {
        let columns = std::iter::once(("changes.operation.column", &self.operation.column))
            .chain(self.key.iter().map(|k| ("changes.key", k)));
        for (option, column) in columns {
            if schema.index_of(column).is_err() {
                return Err(Error::invalid_config(
                    option,
                    format!("{column:?} is not a column of the input"),
                )
                .with_context("column", column.clone()));
            }
        }
        Ok(())
    }

    /// Checks the config without I/O: no blank key column, the operation column not among
    /// them, and the operation values as [`OperationColumn::validate`] checks them.
    pub fn validate(&self) -> Result<()> {
        self.operation.validate()?;
        for name in &self.key {
            if name.trim().is_empty() {
                return Err(Error::invalid_config(
                    "changes.key",
                    "a key column's name is blank",
                ));
            }
            if *name == self.operation.column {
                return Err(Error::invalid_config(
                    "changes.key",
                    format!("the operation column {name:?} cannot be a key column"),
                ));
            }
        }
        Ok(())
    }
}

/// What one batch of changes comes to, once the last change to each key has won.
#[derive(Debug)]
pub struct Reduced {
    /// For each key whose last change is an insert or an upsert, that change's row, in the
    /// order of those last changes; without the operation column.
    pub rows: RecordBatch,
    /// The operation of each row of `rows`.
    pub row_ops: Vec<ChangeOp>,
    /// The index in the input batch of each row of `rows`.
    pub sources: Vec<usize>,
    /// The key columns of each key whose earlier rows this batch replaces or deletes (the
    /// keys an upsert or a delete touched), in the order each was first touched.
    pub deletes: RecordBatch,
    /// For each key a delete touched, its last delete's row (without the operation
    /// column): what a sink that deletes before it writes applies first (Bigtable, whose
    /// delete may name the columns to clear by the values the row holds).
    pub removed: RecordBatch,
    /// The index in the input batch of each row of `removed`.
    pub removed_sources: Vec<usize>,
    /// Rows that could not be applied, by their index in the input batch, and why (naming
    /// the column).
    pub failed: Vec<(usize, String)>,
}

/// Reduces `batch` to the rows it writes and the keys it deletes (see the module docs).
/// Errors when `operation.column` or a key column is not in the batch, or the operation
/// column does not hold text.
pub fn reduce(batch: &RecordBatch, operation: &OperationColumn, key: &[String]) -> Result<Reduced> {
    Ok(reduce_batches(std::slice::from_ref(batch), operation, key)?
        .pop()
        .expect("one result per batch"))
}

/// [`reduce`] over several batches taken as one, in order (one flush's or checkpoint's
/// changes, whose schemas may differ): one [`Reduced`] per batch, with indexes into that
/// batch. A key's row is in the result of the batch that holds its last change, and its
/// delete in that of the batch that first touched it, so each key is written and deleted at
/// most once across them all. Key columns must be of one type in every batch.
pub fn reduce_batches(
    batches: &[RecordBatch],
    operation: &OperationColumn,
    key: &[String],
) -> Result<Vec<Reduced>> {
    if key.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            "changes.key: no key columns are named",
        ));
    }
    let inputs = batches
        .iter()
        .map(|batch| ChangeColumns::of(batch, operation, key))
        .collect::<Result<Vec<_>>>()?;
    let Some(first) = inputs.first() else {
        return Ok(Vec::new());
    };
    // One byte string per row for the whole key, whatever its columns' types.
    let converter = RowConverter::new(
        first
            .keys
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect(),
    )
    .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the key columns {key:?}: {e}")))?;
    let keys = inputs
        .iter()
        .map(|input| {
            for ((name, column), expected) in key.iter().zip(&input.keys).zip(&first.keys) {
                if column.data_type() != expected.data_type() {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!(
                            "the key column {name:?} holds {} in one batch and {} in another",
                            expected.data_type(),
                            column.data_type()
                        ),
                    ));
                }
            }
            converter
                .convert_columns(&input.keys)
                .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the key columns {key:?}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;

    /// Per key: its first and last change (batch, row), and whether any change replaced
    /// or deleted earlier rows.
    struct Touched {
        first: (usize, usize),
        last: (usize, usize),
        last_op: ChangeOp,
        replaces: bool,
        /// The key's last delete.
        last_delete: Option<(usize, usize)>,
    }
    let mut failed: Vec<Vec<(usize, String)>> = vec![Vec::new(); batches.len()];
    let mut touched: HashMap<&[u8], Touched> = HashMap::new();
    for (b, (input, keys)) in inputs.iter().zip(&keys).enumerate() {
        'rows: for row in 0..input.ops.len() {
            let op = match input.ops.is_valid(row).then(|| input.ops.value(row)) {
                None => {
                    failed[b].push((row, format!("{}: the operation is null", operation.column)));
                    continue;
                }
                Some(value) => match operation.op_of(value) {
                    Some(op) => op,
                    None => {
                        failed[b].push((row, format!("{}: unknown operation {value:?}", operation.column)));
                        continue;
                    }
                },
            };
            for (name, column) in key.iter().zip(&input.keys) {
                if column.is_null(row) {
                    failed[b].push((row, format!("{name}: the key column is null")));
                    continue 'rows;
                }
            }
            let replaces = op != ChangeOp::Insert;
            let delete = (op == ChangeOp::Delete).then_some((b, row));
            touched
                .entry(keys.row(row).data())
                .and_modify(|t| {
                    t.last = (b, row);
                    t.last_op = op;
                    t.replaces |= replaces;
                    t.last_delete = delete.or(t.last_delete);
                })
                .or_insert(Touched {
                    first: (b, row),
                    last: (b, row),
                    last_op: op,
                    replaces,
                    last_delete: delete,
                });
        }
    }

    // Per batch, in source order: the rows it writes (each key's last change, unless a
    // delete), the keys it deletes (each first touched there, if a change replaced) and
    // the keys' last deletes.
    let mut written: Vec<Vec<(usize, ChangeOp)>> = vec![Vec::new(); batches.len()];
    let mut deleted: Vec<Vec<usize>> = vec![Vec::new(); batches.len()];
    let mut removed: Vec<Vec<usize>> = vec![Vec::new(); batches.len()];
    for t in touched.values() {
        if t.last_op != ChangeOp::Delete {
            written[t.last.0].push((t.last.1, t.last_op));
        }
        if t.replaces {
            deleted[t.first.0].push(t.first.1);
        }
        if let Some((b, row)) = t.last_delete {
            removed[b].push(row);
        }
    }
    inputs
        .into_iter()
        .zip(failed)
        .zip(written.into_iter().zip(deleted).zip(removed))
        .map(|((input, failed), ((mut rows, mut deletes), mut removed))| {
            rows.sort_unstable_by_key(|(row, _)| *row);
            deletes.sort_unstable();
            removed.sort_unstable();
            Ok(Reduced {
                rows: take(&input.data, rows.iter().map(|(row, _)| *row))?,
                row_ops: rows.iter().map(|(_, op)| *op).collect(),
                sources: rows.iter().map(|(row, _)| *row).collect(),
                deletes: take(&input.key_batch, deletes.into_iter())?,
                removed: take(&input.data, removed.iter().copied())?,
                removed_sources: removed,
                failed,
            })
        })
        .collect()
}

/// One batch's parts that [`reduce_batches`] reads.
struct ChangeColumns {
    ops: StringArray,
    keys: Vec<ArrayRef>,
    /// The batch without its operation column.
    data: RecordBatch,
    /// Its key columns.
    key_batch: RecordBatch,
}

impl ChangeColumns {
    fn of(batch: &RecordBatch, operation: &OperationColumn, key: &[String]) -> Result<ChangeColumns> {
        let schema = batch.schema();
        let column_of = |name: &str, what: &str| {
            schema.index_of(name).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("{what} {name:?} is not a column of the input"),
                )
            })
        };
        let op_index = column_of(&operation.column, "the operation column")?;
        let key_indexes = key
            .iter()
            .map(|name| column_of(name, "the key column"))
            .collect::<Result<Vec<_>>>()?;
        if key_indexes.contains(&op_index) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "the operation column {:?} cannot be a key column",
                    operation.column
                ),
            ));
        }
        let data_columns: Vec<usize> = (0..batch.num_columns()).filter(|i| *i != op_index).collect();
        Ok(ChangeColumns {
            ops: text_column(batch.column(op_index), &operation.column)?,
            keys: key_indexes.iter().map(|i| batch.column(*i).clone()).collect(),
            data: batch.project(&data_columns).map_err(|e| {
                Error::new(ErrorKind::Internal, format!("dropping the operation column: {e}"))
            })?,
            key_batch: batch
                .project(&key_indexes)
                .map_err(|e| Error::new(ErrorKind::Internal, format!("taking the key columns: {e}")))?,
        })
    }
}

fn text_column(column: &ArrayRef, name: &str) -> Result<StringArray> {
    match column.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Dictionary(..) => {
            let text = arrow_cast::cast(column, &DataType::Utf8).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("the operation column {name:?}: {e}"),
                )
            })?;
            Ok(text
                .as_any()
                .downcast_ref::<StringArray>()
                .cloned()
                .expect("cast to Utf8 gives a StringArray"))
        }
        other => Err(Error::new(
            ErrorKind::InvalidInput,
            format!("the operation column {name:?} holds {other}, not text"),
        )),
    }
}

fn take(batch: &RecordBatch, rows: impl Iterator<Item = usize>) -> Result<RecordBatch> {
    let indices = UInt32Array::from_iter_values(rows.map(|row| row as u32));
    arrow_select::take::take_record_batch(batch, &indices)
        .map_err(|e| Error::new(ErrorKind::Internal, format!("taking the reduced rows: {e}")))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow_array::{Int64Array, cast::AsArray, types::Int64Type};
    use arrow_schema::{Field, Schema};
    use proptest::prelude::*;

    use super::*;

    fn batch(rows: &[(Option<i64>, Option<&str>, i64)]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("op", DataType::Utf8, true),
            Field::new("value", DataType::Int64, false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>())),
                Arc::new(StringArray::from(rows.iter().map(|r| r.1).collect::<Vec<_>>())),
                Arc::new(Int64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>())),
            ],
        )
        .unwrap()
    }

    fn ints(batch: &RecordBatch, column: &str) -> Vec<i64> {
        batch
            .column_by_name(column)
            .unwrap()
            .as_primitive::<Int64Type>()
            .values()
            .to_vec()
    }

    fn reduced(rows: &[(Option<i64>, Option<&str>, i64)]) -> Reduced {
        reduce(&batch(rows), &OperationColumn::new("op"), &["id".to_string()]).unwrap()
    }

    #[test]
    fn the_last_change_to_a_key_wins_in_source_order() {
        let r = reduced(&[
            (Some(1), Some("c"), 10),
            (Some(2), Some("c"), 20),
            (Some(1), Some("u"), 11),
            (Some(3), Some("c"), 30),
            (Some(2), Some("d"), 0),
            (Some(1), Some("u"), 12),
        ]);
        assert_eq!(
            r.rows.schema().fields().len(),
            2,
            "the operation column is dropped"
        );
        assert_eq!(ints(&r.rows, "id"), [3, 1]);
        assert_eq!(ints(&r.rows, "value"), [30, 12]);
        assert_eq!(r.row_ops, [ChangeOp::Insert, ChangeOp::Upsert]);
        assert_eq!(r.sources, [3, 5]);
        assert_eq!(r.removed_sources, [4], "key 2's delete");
        assert_eq!(ints(&r.removed, "id"), [2]);
        assert_eq!(
            ints(&r.deletes, "id"),
            [1, 2],
            "keys an upsert or a delete touched"
        );
        assert!(r.failed.is_empty());
    }

    #[test]
    fn an_insert_after_a_delete_still_deletes_the_earlier_rows() {
        let r = reduced(&[(Some(7), Some("d"), 0), (Some(7), Some("insert"), 70)]);
        assert_eq!(ints(&r.rows, "value"), [70]);
        assert_eq!(ints(&r.deletes, "id"), [7]);
        assert_eq!(r.removed_sources, [0]);
    }

    #[test]
    fn bad_rows_are_failed_by_column_and_the_rest_applied() {
        let r = reduced(&[
            (Some(1), Some("c"), 10),
            (None, Some("c"), 20),
            (Some(3), Some("merge"), 30),
            (Some(4), None, 40),
            (Some(5), Some("u"), 50),
        ]);
        assert_eq!(ints(&r.rows, "id"), [1, 5]);
        assert_eq!(
            r.failed,
            [
                (1, "id: the key column is null".to_string()),
                (2, "op: unknown operation \"merge\"".to_string()),
                (3, "op: the operation is null".to_string()),
            ]
        );
    }

    #[test]
    fn missing_columns_and_bad_mappings_are_named() {
        let input = batch(&[(Some(1), Some("c"), 1)]);
        let err = reduce(&input, &OperationColumn::new("op"), &["account".into()]).unwrap_err();
        assert!(err.to_string().contains("the key column \"account\""), "{err}");
        let err = reduce(&input, &OperationColumn::new("kind"), &["id".into()]).unwrap_err();
        assert!(err.to_string().contains("the operation column \"kind\""), "{err}");
        let err = reduce(&input, &OperationColumn::new("value"), &["id".into()]).unwrap_err();
        assert!(err.to_string().contains("holds Int64, not text"), "{err}");
        let mut twice = OperationColumn::new("op");
        twice.delete.push("u".into());
        assert!(
            twice
                .validate()
                .unwrap_err()
                .to_string()
                .contains("\"u\" means both")
        );
        assert!(OperationColumn::new(" ").validate().is_err());
        OperationColumn::new("op").validate().unwrap();
    }

    #[test]
    fn the_mapping_reads_from_config_with_defaults() {
        let spec: OperationColumn =
            serde_json::from_str(r#"{"column": "kind", "delete": ["gone"]}"#).unwrap();
        assert_eq!(spec.op_of("gone"), Some(ChangeOp::Delete));
        assert_eq!(spec.op_of("d"), None);
        assert_eq!(spec.op_of("u"), Some(ChangeOp::Upsert));
        assert!(serde_json::from_str::<OperationColumn>(r#"{"column": "k", "merge": []}"#).is_err());
    }

    proptest! {
        /// Writing the rows after deleting the keys of the changes cut into batches (none
        /// cut: one batch) and reduced together, from any earlier state, gives what applying
        /// every change one by one to a map gives; each key is written and deleted at most
        /// once across the batches.
        #[test]
        fn reducing_batches_together_equals_applying_one_by_one(
            before in prop::collection::btree_map(0i64..20, 0i64..1000, 0..20),
            changes in prop::collection::vec((0i64..20, 0usize..3, 0i64..1000), 0..60),
            cuts in prop::collection::vec(0usize..60, 0..5),
        ) {
            let words = ["c", "u", "d"];
            // An insert of a key already held is not a valid input: make it an upsert.
            let mut state = before.clone();
            let mut rows = Vec::new();
            for (id, op, value) in &changes {
                let op = if *op == 0 && state.contains_key(id) { 1 } else { *op };
                match op {
                    2 => { state.remove(id); }
                    _ => { state.insert(*id, *value); }
                }
                rows.push((Some(*id), Some(words[op]), *value));
            }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(rows.len())).collect();
            cuts.extend([0, rows.len()]);
            cuts.sort_unstable();
            let batches: Vec<RecordBatch> = cuts.windows(2).map(|w| batch(&rows[w[0]..w[1]])).collect();
            let reduced = reduce_batches(&batches, &OperationColumn::new("op"), &["id".to_string()]).unwrap();
            prop_assert_eq!(reduced.len(), batches.len());
            let before_copy = before.clone();
            let mut applied: BTreeMap<i64, i64> = before;
            let mut deleted = std::collections::BTreeSet::new();
            for r in &reduced {
                for id in ints(&r.deletes, "id") {
                    prop_assert!(deleted.insert(id), "key {} deleted twice", id);
                    applied.remove(&id);
                }
            }
            for r in &reduced {
                for (id, value) in ints(&r.rows, "id").into_iter().zip(ints(&r.rows, "value")) {
                    prop_assert!(applied.insert(id, value).is_none(), "a row of key {} written over another", id);
                }
            }
            prop_assert_eq!(&applied, &state);
            // Deleting each key's last delete, then writing the rows over what is there
            // (as Bigtable's cells are written), gives the same.
            let mut overwritten: BTreeMap<i64, i64> = before_copy;
            for r in &reduced {
                for id in ints(&r.removed, "id") {
                    overwritten.remove(&id);
                }
            }
            for r in &reduced {
                for (id, value) in ints(&r.rows, "id").into_iter().zip(ints(&r.rows, "value")) {
                    overwritten.insert(id, value);
                }
            }
            prop_assert_eq!(overwritten, state);
        }
    }

    #[test]
    fn key_columns_of_another_type_in_a_later_batch_are_named() {
        let first = batch(&[(Some(1), Some("c"), 1)]);
        let schema = Schema::new(vec![
            Field::new("id", DataType::Utf8, true),
            Field::new("op", DataType::Utf8, true),
        ]);
        let second = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringArray::from(vec!["1"])),
                Arc::new(StringArray::from(vec!["u"])),
            ],
        )
        .unwrap();
        let err = reduce_batches(&[first, second], &OperationColumn::new("op"), &["id".into()]).unwrap_err();
        assert!(
            err.to_string()
                .contains("\"id\" holds Int64 in one batch and Utf8"),
            "{err}"
        );
    }

    #[test]
    fn a_change_config_names_what_is_wrong() {
        ChangeConfig::new(["id"], OperationColumn::new("op"))
            .validate()
            .unwrap();
        let err = ChangeConfig::new(["op"], OperationColumn::new("op"))
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("changes.key"), "{err}");
        assert!(
            ChangeConfig::new([" "], OperationColumn::new("op"))
                .validate()
                .is_err()
        );
        let parsed: ChangeConfig =
            serde_json::from_str(r#"{"key": ["id"], "operation": {"column": "op"}}"#).unwrap();
        assert_eq!(parsed, ChangeConfig::new(["id"], OperationColumn::new("op")));
        assert!(
            serde_json::from_str::<ChangeConfig>(r#"{"keys": ["id"], "operation": {"column": "op"}}"#)
                .is_err()
        );
    }
}
