//! Conforming an input batch to a table's Arrow schema.
//!
//! Sinks write what users give them into tables whose schema may differ in small, allowed
//! ways: columns in another order, an optional column missing, a narrower type (`int` into
//! `long`, milliseconds into microseconds), a dictionary, run-end or view encoding, another
//! kind of list (fixed-size, large, view). [`conform_batch`]
//! produces a batch in exactly the target schema (names, order, types, field metadata such
//! as Iceberg field ids) or fails naming the column, and the row where a value is to blame.
//! It is where nulls in required columns are caught: some writers would store them as zeros.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, ListArray, MapArray, RecordBatch, StructArray, UInt32Array, new_null_array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, SchemaRef};
use arrow_select::take::take;

use super::{
    ColumnKey, FIELD_ID_KEY, LIST_ELEMENT, MAP_KEY, MAP_VALUE, MappedField, NameMapping, Schema, join_path,
    match_level, quote_name, trusts_ids,
};
use crate::{Error, Result};

/// Returns `batch` in exactly the `target` schema: columns matched by name at every level,
/// optional columns the batch lacks filled with nulls, types cast (overflow and unparsable
/// values are errors), and nulls in non-nullable target fields rejected.
pub fn conform_batch(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    conform_batch_mapped(batch, target, None)
}

/// [`conform_batch`] for a table with a name mapping: columns are matched as the evolution
/// planner matches them ([`match_level`]): by field id when the batch's ids can be trusted,
/// else through the mapping (a column renamed since still matches its old name), else by
/// name, so every column the planner found is written.
pub fn conform_batch_mapped(
    batch: &RecordBatch,
    target: &SchemaRef,
    mapping: Option<&NameMapping>,
) -> Result<RecordBatch> {
    // An input the planner could not read is refused here too, naming the column; the
    // table's schema came from the table, so it always converts.
    let input = Schema::from_arrow(&batch.schema())?;
    let by_id = Schema::from_arrow(target).is_ok_and(|table| trusts_ids(&table, mapping, &input));
    let cx = Conform { by_id };
    let level = mapping.map(|m| m.fields.as_slice()).unwrap_or_default();
    let sources = cx.pick(
        target.fields(),
        level,
        batch.schema().fields(),
        batch.columns(),
        "",
    )?;
    let columns = target
        .fields()
        .iter()
        .zip(sources)
        .map(|(field, source)| {
            let place = Place {
                len: batch.num_rows(),
                parent_valid: None,
                rows: &Rows::Batch,
            };
            cx.column(source, field, &join_path("", field.name()), place, level)
        })
        .collect::<Result<Vec<_>>>()?;
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        target.clone(),
        columns,
        &options,
    )?)
}

/// The field id an Arrow field carries in its metadata.
fn arrow_id(field: &Field) -> Option<i32> {
    field.metadata().get(FIELD_ID_KEY).and_then(|v| v.parse().ok())
}

/// One batch's conforming: how its columns are matched.
struct Conform {
    by_id: bool,
}

impl Conform {
    /// For each target field of one level, the source column matched to it.
    fn pick<'a>(
        &self,
        targets: &Fields,
        level: &[MappedField],
        source_fields: &Fields,
        columns: &'a [ArrayRef],
        prefix: &str,
    ) -> Result<Vec<Option<&'a ArrayRef>>> {
        fn key(f: &FieldRef) -> ColumnKey<'_> {
            ColumnKey {
                id: arrow_id(f),
                name: f.name(),
            }
        }
        let table: Vec<ColumnKey> = targets.iter().map(key).collect();
        let input: Vec<ColumnKey> = source_fields.iter().map(key).collect();
        let found = match_level(self.by_id, &table, level, &input);
        if let Some(&(t, first, later)) = found.duplicates.first() {
            let path = join_path(prefix, targets[t].name());
            return Err(Error::invalid_input(format!(
                "input columns {} and {} both resolve to column {path}",
                quote_name(source_fields[first].name()),
                quote_name(source_fields[later].name())
            ))
            .with_context("column", path));
        }
        Ok(found
            .table_to_input
            .iter()
            .map(|i| i.map(|i| &columns[i]))
            .collect())
    }

    /// Conforms one column; `level` is the name mapping's entries among which `target` is.
    fn column(
        &self,
        source: Option<&ArrayRef>,
        target: &Field,
        path: &str,
        place: Place<'_>,
        level: &[MappedField],
    ) -> Result<ArrayRef> {
        let children_level = arrow_id(target)
            .map(|id| NameMapping::children(level, id))
            .unwrap_or_default();
        let Some(source) = source else {
            if !target.is_nullable() {
                return Err(Error::invalid_input(format!(
                    "column {path} is required, but the input lacks it"
                ))
                .with_context("column", path.to_string()));
            }
            return Ok(new_null_array(target.data_type(), place.len));
        };
        let at = |e: ArrowError| arrow_error(path, e);
        let source = plain_layout(source).map_err(at)?;
        let out: ArrayRef = match (source.data_type(), target.data_type()) {
            (DataType::Struct(_), DataType::Struct(children)) => {
                let structs = source.as_any().downcast_ref::<StructArray>().expect("struct");
                // The struct is absent wherever an enclosing one is: a required child may hold
                // a null there, and Arrow accepts it only when this struct's own nulls hide it.
                let valid = NullBuffer::union(place.parent_valid, structs.nulls());
                let sources = self.pick(
                    children,
                    children_level,
                    structs.fields(),
                    structs.columns(),
                    path,
                )?;
                let arrays = children
                    .iter()
                    .zip(sources)
                    .map(|(child, source)| {
                        let child_place = Place {
                            len: structs.len(),
                            parent_valid: valid.as_ref(),
                            rows: place.rows,
                        };
                        self.column(
                            source,
                            child,
                            &join_path(path, child.name()),
                            child_place,
                            children_level,
                        )
                    })
                    .collect::<Result<Vec<_>>>()?;
                Arc::new(StructArray::try_new(children.clone(), arrays, valid).map_err(at)?)
            }
            (DataType::List(_), DataType::List(element)) => {
                let list = compact(source.as_list::<i32>()).map_err(at)?;
                let rows = Rows::List {
                    offsets: list.offsets(),
                    outer: place.rows,
                };
                let values = self.column(
                    Some(list.values()),
                    element,
                    &join_path(path, LIST_ELEMENT),
                    Place::values(list.values(), &rows),
                    children_level,
                )?;
                Arc::new(
                    ListArray::try_new(
                        element.clone(),
                        list.offsets().clone(),
                        values,
                        list.nulls().cloned(),
                    )
                    .map_err(at)?,
                )
            }
            (DataType::Map(_, _), DataType::Map(entries, sorted)) => {
                let map = source.as_any().downcast_ref::<MapArray>().expect("map");
                let DataType::Struct(kv) = entries.data_type() else {
                    return Err(Error::internal(format!(
                        "column {path}: map entries are not a struct"
                    )));
                };
                let rows = Rows::List {
                    offsets: map.offsets(),
                    outer: place.rows,
                };
                let keys = self.column(
                    Some(map.keys()),
                    &kv[0],
                    &join_path(path, MAP_KEY),
                    Place::values(map.keys(), &rows),
                    children_level,
                )?;
                let values = self.column(
                    Some(map.values()),
                    &kv[1],
                    &join_path(path, MAP_VALUE),
                    Place::values(map.values(), &rows),
                    children_level,
                )?;
                let entries_array = StructArray::try_new(kv.clone(), vec![keys, values], None).map_err(at)?;
                Arc::new(
                    MapArray::try_new(
                        entries.clone(),
                        map.offsets().clone(),
                        entries_array,
                        map.nulls().cloned(),
                        *sorted,
                    )
                    .map_err(at)?,
                )
            }
            (from, to) if from == to => source.clone(),
            (from, to) if is_nested(from) || is_nested(to) => {
                return Err(Error::invalid_input(format!(
                    "column {path}: the input has {from}, the table {to}"
                ))
                .with_context("column", path.to_string()));
            }
            (from, to) => {
                let options = CastOptions {
                    safe: false,
                    ..Default::default()
                };
                cast_with_options(&source, to, &options).map_err(|e| {
                    Error::invalid_input(format!("column {path}: cannot convert {from} to {to}: {e}"))
                        .with_context("column", path.to_string())
                })?
            }
        };
        if !target.is_nullable() {
            check_no_nulls(&out, path, place)?;
        }
        Ok(out)
    }
}

/// Where a column's values sit in the batch.
#[derive(Clone, Copy)]
struct Place<'a> {
    len: usize,
    /// Rows where an enclosing struct is null; a required child may be null there.
    parent_valid: Option<&'a NullBuffer>,
    rows: &'a Rows<'a>,
}

impl<'a> Place<'a> {
    /// The place of a list's or map's values: each value is its own row, under `rows`.
    fn values(values: &ArrayRef, rows: &'a Rows<'a>) -> Self {
        Place {
            len: values.len(),
            parent_valid: None,
            rows,
        }
    }
}

/// How an index into a column maps back to the batch row that holds it, so that an error
/// about a list's element names the row a user can find.
enum Rows<'a> {
    Batch,
    List {
        offsets: &'a OffsetBuffer<i32>,
        outer: &'a Rows<'a>,
    },
}

impl Rows<'_> {
    fn batch_row(&self, index: usize) -> usize {
        match self {
            Rows::Batch => index,
            Rows::List { offsets, outer } => {
                // The last list starting at or before `index`: empty lists before it share
                // its start, and the next one starts after `index`.
                let list = offsets.partition_point(|&o| o as usize <= index) - 1;
                outer.batch_row(list)
            }
        }
    }
}

/// An Arrow error while reading or writing the column at `path`.
pub(super) fn arrow_error(path: &str, e: ArrowError) -> Error {
    Error::invalid_input(format!("column {path}: {e}"))
        .with_context("column", path.to_string())
        .with_source(e)
}

fn is_nested(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Struct(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::FixedSizeList(_, _)
            | DataType::Map(_, _)
    )
}

/// `array` with its dictionary and run-end encodings expanded, down to the layout that
/// holds its values; its children keep theirs.
pub(super) fn decoded(array: &ArrayRef) -> std::result::Result<ArrayRef, ArrowError> {
    let mut array = array.clone();
    loop {
        let value_type = match array.data_type() {
            DataType::Dictionary(_, value) => value.as_ref().clone(),
            DataType::RunEndEncoded(_, values) => values.data_type().clone(),
            _ => return Ok(array),
        };
        array = cast_with_options(&array, &value_type, &CastOptions::default())?;
    }
}

/// `array` in the layouts a table's Arrow schema uses at its top: encodings expanded and
/// every kind of list a `List`. The element is made nullable: the target field decides,
/// and Arrow would otherwise refuse a dictionary whose values hold unused nulls.
fn plain_layout(array: &ArrayRef) -> std::result::Result<ArrayRef, ArrowError> {
    let array = decoded(array)?;
    match array.data_type() {
        DataType::List(element)
        | DataType::LargeList(element)
        | DataType::ListView(element)
        | DataType::LargeListView(element)
        | DataType::FixedSizeList(element, _) => {
            let list = DataType::List(Arc::new(element.as_ref().clone().with_nullable(true)));
            cast_with_options(&array, &list, &CastOptions::default())
        }
        _ => Ok(array),
    }
}

/// The list holding only the values of its present lists. A null list may cover values
/// (a fixed-size list always does) and a slice leaves values outside it; neither is data,
/// so neither may fail a required element.
fn compact(list: &ListArray) -> std::result::Result<ListArray, ArrowError> {
    let offsets = list.offsets();
    let span = |i: usize| offsets[i] as u32..offsets[i + 1] as u32;
    let exact = offsets[0] == 0
        && offsets[list.len()] as usize == list.values().len()
        && (0..list.len()).all(|i| list.is_valid(i) || span(i).is_empty());
    if exact {
        return Ok(list.clone());
    }
    let mut indices = Vec::new();
    let mut kept = Vec::with_capacity(list.len() + 1);
    kept.push(0i32);
    for i in 0..list.len() {
        if list.is_valid(i) {
            indices.extend(span(i));
        }
        kept.push(indices.len() as i32);
    }
    let DataType::List(element) = list.data_type() else {
        unreachable!("a ListArray has a List type")
    };
    ListArray::try_new(
        element.clone(),
        OffsetBuffer::new(kept.into()),
        take(list.values(), &UInt32Array::from(indices), None)?,
        list.nulls().cloned(),
    )
}

fn check_no_nulls(array: &ArrayRef, path: &str, place: Place<'_>) -> Result<()> {
    let Some(nulls) = array.logical_nulls() else {
        return Ok(());
    };
    let offending =
        (0..nulls.len()).find(|&i| nulls.is_null(i) && place.parent_valid.is_none_or(|p| p.is_valid(i)));
    match offending {
        None => Ok(()),
        Some(index) => {
            let row = place.rows.batch_row(index);
            Err(Error::invalid_input(format!(
                "row {row}: column {path} is required, but the value is null"
            ))
            .with_context("column", path.to_string())
            .with_context("row", row.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow_array::types::{Int8Type, Int32Type, Int64Type};
    use arrow_array::{
        BinaryViewArray, DictionaryArray, FixedSizeListArray, Int8Array, Int16Array, Int32Array, Int64Array,
        ListViewArray, RunArray, StringArray, StringViewArray, TimestampMicrosecondArray,
        TimestampMillisecondArray,
    };
    use arrow_schema::{Fields, Schema, TimeUnit};
    use proptest::prelude::*;

    use super::*;
    use crate::evolution::{EvolutionPlanner, SchemaEvolutionConfig, Verdict};
    use crate::schema::PrimitiveType::{self, Int};
    use crate::schema::{
        DataType as TableType, Field as TableField, InputSchema, NullCount, Schema as TableSchema,
    };

    fn id_field(name: &str, t: DataType, nullable: bool, id: i32) -> Field {
        Field::new(name, t, nullable)
            .with_metadata(HashMap::from([("PARQUET:field_id".to_string(), id.to_string())]))
    }

    #[test]
    fn reorders_widens_fills_and_keeps_ids() {
        let input = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
                Field::new("n", DataType::Int32, false),
            ])),
            vec![
                Arc::new(TimestampMillisecondArray::from(vec![Some(1_000), None])),
                Arc::new(Int32Array::from(vec![1, 2])),
            ],
        )
        .unwrap();
        let target = Arc::new(Schema::new(vec![
            id_field("n", DataType::Int64, false, 1),
            id_field("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true, 2),
            id_field("extra", DataType::Utf8, true, 3),
        ]));
        let out = conform_batch(&input, &target).unwrap();
        assert_eq!(out.schema(), target);
        let n = out.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(n.values(), &[1, 2]);
        let ts = out
            .column(1)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(ts.value(0), 1_000_000);
        assert_eq!(out.column(2).null_count(), 2);
    }

    #[test]
    fn a_null_in_a_required_column_names_column_and_row() {
        let input = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(vec![Some(1), None]))],
        )
        .unwrap();
        let target = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let err = conform_batch(&input, &target).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid input: row 1: column id is required, but the value is null"
        );
        let missing = Arc::new(Schema::new(vec![Field::new("other", DataType::Int64, false)]));
        let err = conform_batch(&input, &missing).unwrap_err();
        assert!(
            err.to_string()
                .contains("column other is required, but the input lacks it")
        );
    }

    #[test]
    fn nested_structs_and_lists_conform_by_name() {
        let inner = StructArray::new(
            Fields::from(vec![
                Field::new("b", DataType::Utf8, true),
                Field::new("a", DataType::Int32, true),
            ]),
            vec![
                Arc::new(StringArray::from(vec![Some("x"), None])) as ArrayRef,
                Arc::new(Int32Array::from(vec![Some(7), None])),
            ],
            Some(vec![true, false].into()),
        );
        let list =
            ListArray::from_iter_primitive::<Int32Type, _, _>(vec![Some(vec![Some(1), Some(2)]), None]);
        let input = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("s", inner.data_type().clone(), true),
                Field::new("l", list.data_type().clone(), true),
            ])),
            vec![Arc::new(inner), Arc::new(list)],
        )
        .unwrap();
        let target_struct = DataType::Struct(Fields::from(vec![
            id_field("a", DataType::Int64, false, 2),
            id_field("b", DataType::Utf8, true, 3),
        ]));
        let target = Arc::new(Schema::new(vec![
            id_field("s", target_struct, true, 1),
            id_field(
                "l",
                DataType::List(Arc::new(id_field("element", DataType::Int64, false, 5))),
                true,
                4,
            ),
        ]));
        // s.a is required but null only where s itself is null: allowed.
        let out = conform_batch(&input, &target).unwrap();
        assert_eq!(out.schema(), target);
        let s = out.column(0).as_any().downcast_ref::<StructArray>().unwrap();
        let a = s.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(a.value(0), 7);
        assert!(s.is_null(1));
    }

    /// A table whose column 2 was renamed from `original` to `renamed` by another engine.
    fn renamed_table() -> (SchemaRef, NameMapping) {
        let target = Arc::new(Schema::new(vec![
            id_field("id", DataType::Int64, false, 1),
            id_field("renamed", DataType::Int64, true, 2),
        ]));
        let mapping = NameMapping::from_json(
            r#"[{"field-id":1,"names":["id"]},{"field-id":2,"names":["original","renamed"]}]"#,
        )
        .unwrap();
        (target, mapping)
    }

    fn ids_and(name: &str, field: Field) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(name, DataType::Int64, false), field])),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(Int64Array::from(vec![10, 20])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_renamed_column_is_written_under_its_old_name_through_the_mapping() {
        let (target, mapping) = renamed_table();
        let input = ids_and("id", Field::new("original", DataType::Int64, true));
        let out = conform_batch_mapped(&input, &target, Some(&mapping)).unwrap();
        let values = out.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(values.values(), &[10, 20]);
    }

    #[test]
    fn ids_follow_a_rename_without_a_mapping() {
        let (target, _) = renamed_table();
        let input = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                id_field("id", DataType::Int64, false, 1),
                id_field("original", DataType::Int64, true, 2),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(Int64Array::from(vec![10, 20])),
            ],
        )
        .unwrap();
        let out = conform_batch(&input, &target).unwrap();
        let values = out.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(values.values(), &[10, 20]);
    }

    #[test]
    fn two_columns_for_one_table_column_is_an_error_naming_both() {
        let (target, mapping) = renamed_table();
        let input = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("original", DataType::Int64, true),
                Field::new("renamed", DataType::Int64, true),
                Field::new("id", DataType::Int64, false),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![1])),
                Arc::new(Int64Array::from(vec![2])),
                Arc::new(Int64Array::from(vec![3])),
            ],
        )
        .unwrap();
        let err = conform_batch_mapped(&input, &target, Some(&mapping)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid input: input columns original and renamed both resolve to column renamed"
        );
    }

    #[test]
    fn an_input_column_with_no_table_type_is_refused_by_name() {
        let input = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("big", DataType::UInt64, true)])),
            vec![Arc::new(arrow_array::UInt64Array::from(vec![1u64]))],
        )
        .unwrap();
        let target = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let err = conform_batch(&input, &target).unwrap_err();
        assert_eq!(err.context_value("column"), Some("big"));
    }

    #[test]
    fn unparsable_values_name_the_column() {
        let input = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("n", DataType::Utf8, true)])),
            vec![Arc::new(StringArray::from(vec!["1", "two"]))],
        )
        .unwrap();
        let target = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let err = conform_batch(&input, &target).unwrap_err();
        assert_eq!(err.context_value("column"), Some("n"));
    }

    /// What the planner and the writer make of one input column `c` (or `s.c` inside a
    /// struct): the input's null count for it, the planner's verdict against `table` and
    /// the batch written into the table's Arrow schema.
    struct Outcome {
        nulls: NullCount,
        verdict: Verdict,
        written: Result<RecordBatch>,
    }

    fn plan_and_write(batch: &RecordBatch, table: Vec<TableField>, counted: &str) -> Outcome {
        let mut table = TableSchema::new(table);
        table.assign_missing_ids(0);
        let input = InputSchema::from_batch(batch).expect("the planner reads the layout");
        let config = SchemaEvolutionConfig::builder().build().unwrap();
        let plan = EvolutionPlanner::new(&config)
            .table(&table)
            .plan(std::slice::from_ref(&input))
            .unwrap();
        Outcome {
            nulls: input.null_count(counted),
            verdict: plan.verdicts[0].verdict,
            written: conform_batch(batch, &Arc::new(table.to_arrow())),
        }
    }

    fn one_column(column: ArrayRef, nullable: bool) -> RecordBatch {
        let field = Field::new("c", column.data_type().clone(), nullable);
        RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![column]).unwrap()
    }

    fn required_c(t: impl Into<TableType>) -> Vec<TableField> {
        vec![TableField::required("c", t)]
    }

    fn int_list(element_required: bool) -> TableType {
        let element = if element_required {
            TableField::required("element", Int)
        } else {
            TableField::optional("element", Int)
        };
        TableType::list(element)
    }

    /// Asserts the planner refused the input and the writer named `path` and `row`.
    fn assert_refused_at(outcome: &Outcome, path: &str, row: usize) {
        assert_eq!(outcome.verdict, Verdict::Incompatible);
        let err = outcome.written.as_ref().unwrap_err();
        assert_eq!(err.context_value("column"), Some(path), "{err}");
        assert_eq!(err.context_value("row"), Some(row.to_string().as_str()), "{err}");
    }

    fn written_lists(out: &RecordBatch) -> Vec<Option<Vec<Option<i32>>>> {
        out.column(0)
            .as_list::<i32>()
            .iter()
            .map(|l| l.map(|l| l.as_primitive::<Int32Type>().iter().collect()))
            .collect()
    }

    fn written_strings(out: &RecordBatch) -> Vec<Option<&str>> {
        out.column(0).as_string::<i32>().iter().collect()
    }

    #[test]
    fn a_fixed_size_list_with_a_null_list_over_values_is_written() {
        // Row 1 is a null list; Arrow keeps its two slots, and they hold nulls although
        // the element is declared required.
        let element = Arc::new(Field::new("item", DataType::Int32, false));
        let values = Int32Array::from(vec![Some(1), Some(2), None, None, Some(3), Some(4)]);
        let lists =
            FixedSizeListArray::try_new(element, 2, Arc::new(values), Some(vec![true, false, true].into()))
                .unwrap();
        let batch = one_column(Arc::new(lists), true);
        let table = vec![TableField::optional("c", int_list(true))];
        let outcome = plan_and_write(&batch, table, "c");
        assert_eq!(outcome.nulls, NullCount::Known(1));
        assert_eq!(outcome.verdict, Verdict::Fits);
        let out = outcome.written.unwrap();
        assert_eq!(
            written_lists(&out),
            [Some(vec![Some(1), Some(2)]), None, Some(vec![Some(3), Some(4)])]
        );

        let outcome = plan_and_write(&batch, required_c(int_list(true)), "c");
        assert_refused_at(&outcome, "c", 1);
    }

    #[test]
    fn every_list_layout_is_written_as_a_list() {
        let rows = vec![Some(vec![Some(1), None]), Some(vec![]), Some(vec![Some(3)])];
        let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(rows.clone()));
        let item = Arc::new(Field::new("item", DataType::Int32, true));
        for layout in [
            DataType::LargeList(item.clone()),
            DataType::ListView(item.clone()),
            DataType::LargeListView(item.clone()),
        ] {
            let column = arrow_cast::cast(&list, &layout).unwrap();
            let outcome = plan_and_write(&one_column(column, true), required_c(int_list(false)), "c");
            assert_eq!(outcome.nulls, NullCount::Known(0), "{layout}");
            assert_eq!(outcome.verdict, Verdict::Fits, "{layout}");
            assert_eq!(written_lists(&outcome.written.unwrap()), rows, "{layout}");
        }
    }

    #[test]
    fn list_views_sharing_values_and_a_null_list_count_and_write() {
        // Views may overlap and skip values: row 1 reuses row 0's second value, row 2 is
        // null over the value 9.
        let values = Int32Array::from(vec![1, 2, 9]);
        let views = ListViewArray::try_new(
            Arc::new(Field::new("item", DataType::Int32, false)),
            vec![0, 1, 2].into(),
            vec![2, 1, 1].into(),
            Arc::new(values),
            Some(vec![true, true, false].into()),
        )
        .unwrap();
        let large = arrow_cast::cast(
            &views,
            &DataType::LargeListView(Arc::new(Field::new("item", DataType::Int32, false))),
        )
        .unwrap();
        for column in [Arc::new(views) as ArrayRef, large] {
            let batch = one_column(column, true);
            let table = vec![TableField::optional("c", int_list(true))];
            let outcome = plan_and_write(&batch, table, "c");
            assert_eq!(outcome.nulls, NullCount::Known(1));
            assert_eq!(outcome.verdict, Verdict::Fits);
            assert_eq!(
                written_lists(&outcome.written.unwrap()),
                [Some(vec![Some(1), Some(2)]), Some(vec![Some(2)]), None]
            );
            assert_refused_at(&plan_and_write(&batch, required_c(int_list(true)), "c"), "c", 2);
        }
    }

    #[test]
    fn a_dictionary_key_pointing_at_a_null_value_is_a_null() {
        // No key is null, so Arrow's own null count is zero, and even a column declared
        // required passes RecordBatch's check.
        let values = StringArray::from(vec![Some("a"), None, Some("b")]);
        let dict = DictionaryArray::<Int8Type>::try_new(vec![0, 1, 2, 0].into(), Arc::new(values)).unwrap();
        assert_eq!(dict.null_count(), 0);
        for declared_nullable in [true, false] {
            let batch = one_column(Arc::new(dict.clone()), declared_nullable);
            let outcome = plan_and_write(&batch, required_c(PrimitiveType::String), "c");
            assert_eq!(outcome.nulls, NullCount::Known(1));
            assert_refused_at(&outcome, "c", 1);
        }

        let table = vec![TableField::optional("c", PrimitiveType::String)];
        let outcome = plan_and_write(&one_column(Arc::new(dict), true), table, "c");
        assert_eq!(
            written_strings(&outcome.written.unwrap()),
            [Some("a"), None, Some("b"), Some("a")]
        );
    }

    #[test]
    fn a_dictionary_whose_null_values_are_unused_fits_a_required_column() {
        let values = StringArray::from(vec![Some("a"), None, Some("b")]);
        let keys = Int16Array::from(vec![Some(2), Some(0), Some(2)]);
        let dict = DictionaryArray::try_new(keys, Arc::new(values)).unwrap();
        let outcome = plan_and_write(
            &one_column(Arc::new(dict), true),
            required_c(PrimitiveType::String),
            "c",
        );
        assert_eq!(outcome.nulls, NullCount::Known(0));
        assert_eq!(outcome.verdict, Verdict::Fits);
        assert_eq!(
            written_strings(&outcome.written.unwrap()),
            [Some("b"), Some("a"), Some("b")]
        );
    }

    #[test]
    fn dictionaries_in_struct_children_and_list_elements_are_expanded() {
        // s is null at row 1, where d points at a null value: hidden. Row 2's d is a real null.
        let values = StringArray::from(vec![Some("x"), None]);
        let d = DictionaryArray::<Int32Type>::try_new(vec![0, 1, 1].into(), Arc::new(values)).unwrap();
        let s = StructArray::new(
            Fields::from(vec![Field::new("d", d.data_type().clone(), true)]),
            vec![Arc::new(d) as ArrayRef],
            Some(vec![true, false, true].into()),
        );
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("s", s.data_type().clone(), true)])),
            vec![Arc::new(s.clone())],
        )
        .unwrap();
        let table = || {
            vec![TableField::optional(
                "s",
                TableType::structure(vec![TableField::required("d", PrimitiveType::String)]),
            )]
        };
        let outcome = plan_and_write(&batch, table(), "s.d");
        assert_eq!(outcome.nulls, NullCount::Known(1));
        assert_refused_at(&outcome, "s.d", 2);

        let fitting = RecordBatch::try_new(batch.schema(), vec![Arc::new(s.slice(0, 2))]).unwrap();
        let outcome = plan_and_write(&fitting, table(), "s.d");
        assert_eq!(outcome.nulls, NullCount::Known(0));
        assert_eq!(outcome.verdict, Verdict::Fits);
        let out = outcome.written.unwrap();
        let d = out.column(0).as_struct().column(0).as_string::<i32>();
        assert_eq!(d.value(0), "x");
        assert!(out.column(0).is_null(1));

        // A list of dictionary-encoded strings: the element's nulls are the values'.
        let element_values = StringArray::from(vec![Some("p"), None]);
        let elements =
            DictionaryArray::<Int8Type>::try_new(vec![0, 1, 0].into(), Arc::new(element_values)).unwrap();
        let list = ListArray::try_new(
            Arc::new(Field::new("item", elements.data_type().clone(), true)),
            OffsetBuffer::from_lengths([2, 1]),
            Arc::new(elements),
            None,
        )
        .unwrap();
        let batch = one_column(Arc::new(list), true);
        let element = TableField::optional("element", PrimitiveType::String);
        let outcome = plan_and_write(&batch, required_c(TableType::list(element)), "c");
        assert_eq!(outcome.verdict, Verdict::Fits);
        let out = outcome.written.unwrap();
        let written = out.column(0).as_list::<i32>().values().as_string::<i32>().clone();
        assert_eq!(written.iter().collect::<Vec<_>>(), [Some("p"), None, Some("p")]);

        let element = TableField::required("element", PrimitiveType::String);
        let outcome = plan_and_write(&batch, required_c(TableType::list(element)), "c.element");
        assert_refused_at(&outcome, "c.element", 0);
    }

    #[test]
    fn a_dictionary_of_structs_counts_its_children() {
        let values = StructArray::new(
            Fields::from(vec![Field::new("x", DataType::Int32, true)]),
            vec![Arc::new(Int32Array::from(vec![Some(1), None, None])) as ArrayRef],
            Some(vec![true, true, false].into()),
        );
        let dict = DictionaryArray::<Int8Type>::try_new(vec![0, 2, 1].into(), Arc::new(values)).unwrap();
        let batch = one_column(Arc::new(dict), true);
        let table = vec![TableField::optional(
            "c",
            TableType::structure(vec![TableField::required("x", Int)]),
        )];
        let outcome = plan_and_write(&batch, table, "c.x");
        // Row 1 points at the null struct; row 2 at a present struct whose x is null.
        assert_eq!(outcome.nulls, NullCount::Known(1));
        assert_refused_at(&outcome, "c.x", 2);
    }

    #[test]
    fn string_and_binary_views_are_written_as_strings_and_bytes() {
        let strings = StringViewArray::from(vec![Some("a long string beyond twelve bytes"), None]);
        let binary = BinaryViewArray::from(vec![Some(b"ab".as_slice()), Some(b"")]);
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("c", DataType::Utf8View, true),
                Field::new("b", DataType::BinaryView, true),
            ])),
            vec![Arc::new(strings), Arc::new(binary)],
        )
        .unwrap();
        let table = vec![
            TableField::optional("c", PrimitiveType::String),
            TableField::required("b", PrimitiveType::Binary),
        ];
        let outcome = plan_and_write(&batch, table, "b");
        assert_eq!(outcome.nulls, NullCount::Known(0));
        assert_eq!(outcome.verdict, Verdict::Fits);
        let out = outcome.written.unwrap();
        assert_eq!(
            written_strings(&out),
            [Some("a long string beyond twelve bytes"), None]
        );
        let bytes = out.column(1).as_binary::<i32>();
        assert_eq!(
            bytes.iter().collect::<Vec<_>>(),
            [Some(b"ab".as_slice()), Some(b"")]
        );

        let outcome = plan_and_write(&batch, required_c(PrimitiveType::String), "c");
        assert_eq!(outcome.nulls, NullCount::Known(1));
        assert_refused_at(&outcome, "c", 1);
    }

    #[test]
    fn a_run_of_nulls_in_a_run_end_encoded_column_counts_each_row() {
        let runs = RunArray::<Int32Type>::try_new(
            &Int32Array::from(vec![2, 4, 5]),
            &Int64Array::from(vec![Some(7), None, Some(8)]),
        )
        .unwrap();
        assert_eq!(runs.null_count(), 0);
        let batch = one_column(Arc::new(runs.clone()), true);
        let outcome = plan_and_write(&batch, required_c(PrimitiveType::Long), "c");
        assert_eq!(outcome.nulls, NullCount::Known(2));
        assert_refused_at(&outcome, "c", 2);

        let table = vec![TableField::optional("c", PrimitiveType::Long)];
        let out = plan_and_write(&batch, table, "c").written.unwrap();
        let written = out.column(0).as_primitive::<Int64Type>();
        assert_eq!(
            written.iter().collect::<Vec<_>>(),
            [Some(7), Some(7), None, None, Some(8)]
        );

        let fitting = one_column(Arc::new(runs.slice(0, 2)), true);
        let outcome = plan_and_write(&fitting, required_c(PrimitiveType::Long), "c");
        assert_eq!(
            (outcome.nulls, outcome.verdict),
            (NullCount::Known(0), Verdict::Fits)
        );
        assert_eq!(
            outcome
                .written
                .unwrap()
                .column(0)
                .as_primitive::<Int64Type>()
                .values(),
            &[7, 7]
        );
    }

    /// `outer { inner { x } }`, all declared nullable; `outer` is null at row 1 and
    /// `inner` at row 2, and x is null at both, and at `real_null` if given.
    fn two_levels(real_null: Option<usize>) -> RecordBatch {
        let x = Int32Array::from_iter((0..4).map(|i| {
            let hidden = i == 1 || i == 2 || Some(i) == real_null;
            (!hidden).then_some(i as i32)
        }));
        let inner = StructArray::new(
            Fields::from(vec![Field::new("x", DataType::Int32, true)]),
            vec![Arc::new(x) as ArrayRef],
            Some(vec![true, true, false, true].into()),
        );
        let outer = StructArray::new(
            Fields::from(vec![Field::new("inner", inner.data_type().clone(), true)]),
            vec![Arc::new(inner) as ArrayRef],
            Some(vec![true, false, true, true].into()),
        );
        let schema = Schema::new(vec![Field::new("outer", outer.data_type().clone(), true)]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(outer)]).unwrap()
    }

    #[test]
    fn a_required_child_may_be_null_under_a_null_parent_two_levels_up() {
        // inner is required under outer, x under inner: both are null only where a
        // parent is, except at row 1 where inner is present under a null outer.
        let table = || {
            vec![TableField::optional(
                "outer",
                TableType::structure(vec![TableField::optional(
                    "inner",
                    TableType::structure(vec![TableField::required("x", Int)]),
                )]),
            )]
        };
        let outcome = plan_and_write(&two_levels(None), table(), "outer.inner.x");
        assert_eq!(outcome.nulls, NullCount::Known(0));
        assert_eq!(outcome.verdict, Verdict::Fits);
        let out = outcome.written.unwrap();
        let inner = out.column(0).as_struct().column(0).as_struct();
        let x = inner.column(0).as_primitive::<Int32Type>();
        assert_eq!((x.value(0), x.value(3)), (0, 3));
        assert!(out.column(0).is_null(1) && inner.is_null(2));

        let outcome = plan_and_write(&two_levels(Some(3)), table(), "outer.inner.x");
        assert_eq!(outcome.nulls, NullCount::Known(1));
        assert_refused_at(&outcome, "outer.inner.x", 3);
        assert_eq!(
            outcome.written.unwrap_err().to_string(),
            "invalid input: row 3: column outer.inner.x is required, but the value is null"
        );
    }

    #[test]
    fn a_required_child_of_a_null_struct_in_a_list_is_written() {
        // The element struct at index 1 is null, its x with it; x is declared required,
        // which Arrow allows because the struct hides it.
        let structs = |x: Vec<Option<i32>>| {
            StructArray::try_new(
                Fields::from(vec![Field::new("x", DataType::Int32, false)]),
                vec![Arc::new(Int32Array::from(x)) as ArrayRef],
                Some(vec![true, false, true].into()),
            )
        };
        let list = |elements: StructArray| {
            let element = Field::new("item", elements.data_type().clone(), true);
            ListArray::new(
                Arc::new(element),
                OffsetBuffer::from_lengths([2, 1]),
                Arc::new(elements),
                None,
            )
        };
        let elements = structs(vec![Some(1), None, Some(3)]).unwrap();
        let batch = one_column(Arc::new(list(elements)), true);
        let element = TableField::optional(
            "element",
            TableType::structure(vec![TableField::required("x", Int)]),
        );
        let table = || vec![TableField::optional("c", TableType::list(element.clone()))];
        let outcome = plan_and_write(&batch, table(), "c");
        assert_eq!(outcome.verdict, Verdict::Fits);
        let out = outcome.written.unwrap();
        let written = out.column(0).as_list::<i32>().values().as_struct().clone();
        assert_eq!(written.column(0).as_primitive::<Int32Type>().value(2), 3);
        assert!(written.is_null(1));

        // A null x in a present element is declared nullable, so the planner refuses it
        // too; the writer names the batch row (1), not the element's index (2).
        let x = Arc::new(Int32Array::from(vec![Some(1), None, None])) as ArrayRef;
        let elements = StructArray::new(
            Fields::from(vec![Field::new("x", DataType::Int32, true)]),
            vec![x],
            Some(vec![true, false, true].into()),
        );
        let batch = one_column(Arc::new(list(elements)), true);
        let outcome = plan_and_write(&batch, table(), "c");
        assert_refused_at(&outcome, "c.element.x", 1);
    }

    #[test]
    fn every_type_the_planner_reads_is_written() {
        let item = || Arc::new(Field::new("item", DataType::Int32, true));
        let types = [
            DataType::Boolean,
            DataType::Int8,
            DataType::UInt16,
            DataType::UInt32,
            DataType::Float32,
            DataType::Decimal32(9, 2),
            DataType::Decimal64(18, 2),
            DataType::Decimal256(50, 2),
            DataType::Date64,
            DataType::Time32(TimeUnit::Second),
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            DataType::LargeUtf8,
            DataType::Utf8View,
            DataType::LargeBinary,
            DataType::BinaryView,
            DataType::FixedSizeBinary(4),
            DataType::Dictionary(Box::new(DataType::UInt8), Box::new(DataType::LargeUtf8)),
            DataType::RunEndEncoded(
                Arc::new(Field::new("run_ends", DataType::Int16, false)),
                Arc::new(Field::new("values", DataType::Utf8, true)),
            ),
            DataType::FixedSizeList(item(), 3),
            DataType::ListView(item()),
            DataType::LargeListView(item()),
            DataType::LargeList(item()),
        ];
        for t in types {
            let batch = one_column(new_null_array(&t, 2), true);
            let table = TableSchema::from_arrow(&batch.schema()).unwrap();
            let out =
                conform_batch(&batch, &Arc::new(table.to_arrow())).unwrap_or_else(|e| panic!("{t}: {e}"));
            assert_eq!(out.column(0).logical_null_count(), 2, "{t}");
        }
    }

    /// One of the layouts of a column of ints (or lists of one int), with nulls where
    /// `values` has them.
    fn in_layout(layout: usize, values: &[Option<i32>]) -> (ArrayRef, TableType) {
        let ints = Int32Array::from(values.to_vec());
        let lists = ListArray::from_iter_primitive::<Int32Type, _, _>(
            values.iter().map(|v| v.map(|x| vec![Some(x)])),
        );
        let item = Arc::new(Field::new("item", DataType::Int32, true));
        let as_list = |t: DataType| (arrow_cast::cast(&lists, &t).unwrap(), int_list(false));
        match layout {
            0 => (Arc::new(ints), Int.into()),
            1 => {
                // Alternately a null key and a key pointing at the null value.
                let dict_values = Int32Array::from(vec![Some(0), Some(1), Some(2), None]);
                let keys = Int8Array::from_iter(values.iter().enumerate().map(|(i, v)| match v {
                    Some(x) => Some(*x as i8),
                    None => (i % 2 == 1).then_some(3),
                }));
                let dict = DictionaryArray::try_new(keys, Arc::new(dict_values)).unwrap();
                (Arc::new(dict), Int.into())
            }
            2 => {
                let run_ends = Int32Array::from_iter_values(1..=values.len() as i32);
                (
                    Arc::new(RunArray::<Int32Type>::try_new(&run_ends, &ints).unwrap()),
                    Int.into(),
                )
            }
            3 => {
                let strings = arrow_cast::cast(&ints, &DataType::Utf8View).unwrap();
                (strings, PrimitiveType::String.into())
            }
            4 => as_list(DataType::FixedSizeList(item, 1)),
            5 => as_list(DataType::ListView(item)),
            _ => as_list(DataType::LargeList(item)),
        }
    }

    proptest! {
        #[test]
        fn the_planner_admits_exactly_what_the_writer_writes(
            layout in 0..7usize,
            values in proptest::collection::vec(proptest::option::of(0..3i32), 1..8),
            parent in proptest::option::of(proptest::collection::vec(any::<bool>(), 8)),
        ) {
            let (column, table_type) = in_layout(layout, &values);
            let hidden = |i: usize| parent.as_ref().is_some_and(|p| !p[i]);
            let expected = (0..values.len()).filter(|&i| values[i].is_none() && !hidden(i)).count();
            let (batch, table, path) = match &parent {
                None => (one_column(column, true), required_c(table_type), "c"),
                Some(p) => {
                    let s = StructArray::new(
                        Fields::from(vec![Field::new("c", column.data_type().clone(), true)]),
                        vec![column],
                        Some(p[..values.len()].to_vec().into()),
                    );
                    let schema = Schema::new(vec![Field::new("s", s.data_type().clone(), true)]);
                    let batch = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(s)]).unwrap();
                    let child = TableField::required("c", table_type);
                    let table = vec![TableField::optional("s", TableType::structure(vec![child]))];
                    (batch, table, "s.c")
                }
            };
            let outcome = plan_and_write(&batch, table, path);
            prop_assert_eq!(outcome.nulls, NullCount::Known(expected as u64));
            let fits = outcome.verdict == Verdict::Fits;
            prop_assert_eq!(fits, expected == 0);
            prop_assert_eq!(outcome.written.is_ok(), fits, "{:?}", outcome.written.err());
        }
    }
}
