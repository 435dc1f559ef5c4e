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
use arrow_schema::{DataType, Field, FieldRef, SchemaRef};

use super::join_path;
use crate::{Error, Result};

/// Returns `batch` in exactly the `target` schema: columns matched by name at every level,
/// optional columns the batch lacks filled with nulls, types cast (overflow and unparsable
/// values are errors), and nulls in non-nullable target fields rejected.
pub fn conform_batch(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    let columns = target
        .fields()
        .iter()
        .map(|field| {
            let source = batch.column_by_name(field.name());
            conform_column(source, batch.num_rows(), field, field.name(), None)
        })
        .collect::<Result<Vec<_>>>()?;
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        target.clone(),
        columns,
        &options,
    )?)
}

/// Conforms one column. `parent_valid` masks rows where an enclosing struct is null (a
/// required child may be null there).
fn conform_column(
    source: Option<&ArrayRef>,
    len: usize,
    target: &Field,
    path: &str,
    parent_valid: Option<&arrow_buffer::NullBuffer>,
) -> Result<ArrayRef> {
    let Some(source) = source else {
        if !target.is_nullable() {
            return Err(
                Error::invalid_input(format!("column {path} is required, but the input lacks it"))
                    .with_context("column", path.to_string()),
            );
        }
        return Ok(new_null_array(target.data_type(), len));
    };
    let source = unwrap_dictionary(source)?;
    let out: ArrayRef = match (source.data_type(), target.data_type()) {
        (DataType::Struct(_), DataType::Struct(children)) => {
            let structs = source.as_any().downcast_ref::<StructArray>().expect("struct");
            let valid = combine(parent_valid, structs.nulls());
            let arrays = children
                .iter()
                .map(|child| {
                    conform_column(
                        structs.column_by_name(child.name()),
                        structs.len(),
                        child,
                        &join_path(path, child.name()),
                        valid.as_ref(),
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
            let values = conform_column(
                Some(list.values()),
                list.values().len(),
                element,
                &join_path(path, "element"),
                None,
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
            let keys = conform_column(
                Some(map.keys()),
                map.keys().len(),
                &kv[0],
                &join_path(path, "key"),
                None,
            )?;
            let values = conform_column(
                Some(map.values()),
                map.values().len(),
                &kv[1],
                &join_path(path, "value"),
                None,
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
            return Err(
                Error::invalid_input(format!("column {path}: the input has {from}, the table {to}"))
                    .with_context("column", path.to_string()),
            );
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
