//! Conforming an input batch to a table's Arrow schema.
//!
//! Sinks write what users give them into tables whose schema may differ in small, allowed
//! ways: columns in another order, an optional column missing, a narrower type (`int` into
//! `long`, milliseconds into microseconds), a dictionary or view encoding. [`conform_batch`]
//! produces a batch in exactly the target schema (names, order, types, field metadata such
//! as Iceberg field ids) or fails naming the column, and the row where a value is to blame.
//! It is where nulls in required columns are caught: some writers would store them as zeros.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, LargeListArray, ListArray, MapArray, RecordBatch, StructArray, new_null_array,
};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, Field, FieldRef, Fields, SchemaRef};

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
    let by_id = match (Schema::from_arrow(target), Schema::from_arrow(&batch.schema())) {
        (Ok(table), Ok(input)) => trusts_ids(&table, mapping, &input),
        _ => false,
    };
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
            cx.column(
                source,
                batch.num_rows(),
                field,
                &join_path("", field.name()),
                None,
                level,
            )
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

    /// Conforms one column. `parent_valid` masks rows where an enclosing struct is null (a
    /// required child may be null there); `level` is the name mapping's entries among
    /// which `target` is.
    fn column(
        &self,
        source: Option<&ArrayRef>,
        len: usize,
        target: &Field,
        path: &str,
        parent_valid: Option<&arrow_buffer::NullBuffer>,
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
            return Ok(new_null_array(target.data_type(), len));
        };
        let source = unwrap_dictionary(source)?;
        let out: ArrayRef = match (source.data_type(), target.data_type()) {
            (DataType::Struct(_), DataType::Struct(children)) => {
                let structs = source.as_any().downcast_ref::<StructArray>().expect("struct");
                let valid = combine(parent_valid, structs.nulls());
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
                        self.column(
                            source,
                            structs.len(),
                            child,
                            &join_path(path, child.name()),
                            valid.as_ref(),
                            children_level,
                        )
                    })
                    .collect::<Result<Vec<_>>>()?;
                Arc::new(StructArray::try_new(
                    children.clone(),
                    arrays,
                    structs.nulls().cloned(),
                )?)
            }
            (DataType::List(_) | DataType::LargeList(_), DataType::List(element)) => {
                let list = as_list(&source)?;
                let values = self.column(
                    Some(list.values()),
                    list.values().len(),
                    element,
                    &join_path(path, LIST_ELEMENT),
                    None,
                    children_level,
                )?;
                Arc::new(ListArray::try_new(
                    element.clone(),
                    list.offsets().clone(),
                    values,
                    list.nulls().cloned(),
                )?)
            }
            (DataType::Map(_, _), DataType::Map(entries, sorted)) => {
                let map = source.as_any().downcast_ref::<MapArray>().expect("map");
                let DataType::Struct(kv) = entries.data_type() else {
                    return Err(Error::internal(format!(
                        "column {path}: map entries are not a struct"
                    )));
                };
                let keys = self.column(
                    Some(map.keys()),
                    map.keys().len(),
                    &kv[0],
                    &join_path(path, MAP_KEY),
                    None,
                    children_level,
                )?;
                let values = self.column(
                    Some(map.values()),
                    map.values().len(),
                    &kv[1],
                    &join_path(path, MAP_VALUE),
                    None,
                    children_level,
                )?;
                let entries_array = StructArray::try_new(kv.clone(), vec![keys, values], None)?;
                Arc::new(MapArray::try_new(
                    entries.clone(),
                    map.offsets().clone(),
                    entries_array,
                    map.nulls().cloned(),
                    *sorted,
                )?)
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
            check_no_nulls(&out, path, parent_valid)?;
        }
        Ok(out)
    }
}

fn is_nested(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) | DataType::Map(_, _)
    )
}

/// Lists as `i32`-offset lists; a large list whose offsets fit is narrowed.
fn as_list(source: &ArrayRef) -> Result<ListArray> {
    if let Some(list) = source.as_any().downcast_ref::<ListArray>() {
        return Ok(list.clone());
    }
    let large = source
        .as_any()
        .downcast_ref::<LargeListArray>()
        .expect("large list");
    let field: FieldRef = match large.data_type() {
        DataType::LargeList(f) => f.clone(),
        _ => unreachable!("checked by the caller"),
    };
    let narrowed = cast_with_options(source, &DataType::List(field), &CastOptions::default())?;
    Ok(narrowed
        .as_any()
        .downcast_ref::<ListArray>()
        .expect("list")
        .clone())
}

fn unwrap_dictionary(source: &ArrayRef) -> Result<ArrayRef> {
    match source.data_type() {
        DataType::Dictionary(_, value) => Ok(cast_with_options(source, value, &CastOptions::default())?),
        _ => Ok(source.clone()),
    }
}

fn combine(
    parent: Option<&arrow_buffer::NullBuffer>,
    own: Option<&arrow_buffer::NullBuffer>,
) -> Option<arrow_buffer::NullBuffer> {
    arrow_buffer::NullBuffer::union(parent, own)
}

fn check_no_nulls(
    array: &ArrayRef,
    path: &str,
    parent_valid: Option<&arrow_buffer::NullBuffer>,
) -> Result<()> {
    if array.null_count() == 0 {
        return Ok(());
    }
    let offending =
        (0..array.len()).find(|&i| array.is_null(i) && parent_valid.is_none_or(|p| p.is_valid(i)));
    match offending {
        None => Ok(()),
        Some(row) => Err(Error::invalid_input(format!(
            "row {row}: column {path} is required, but the value is null"
        ))
        .with_context("column", path.to_string())
        .with_context("row", row.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow_array::{
        Int32Array, Int64Array, StringArray, TimestampMicrosecondArray, TimestampMillisecondArray,
        types::Int32Type,
    };
    use arrow_schema::{Fields, Schema, TimeUnit};

    use super::*;

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
}
