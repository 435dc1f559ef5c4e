//! The output plan that selection and flattening both produce, and how it is applied.
//!
//! A plan is a list of output columns. Each names the input field it comes from by the
//! child indices walked from the enclosing struct (or the batch) through nested structs,
//! and says whether that field is kept whole or reshaped inside a list or map. Planning
//! looks at the schema only; applying the same plan to a batch yields exactly the planned
//! schema, so schema and data cannot disagree.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BooleanArray, FixedSizeListArray, LargeListArray, ListArray, MapArray, RecordBatch,
    RecordBatchOptions, StructArray,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, FieldRef, Fields, Schema, SchemaRef};
use arrow_select::nullif::nullif;

use crate::{Error, ErrorKind, Result};

/// One output column (or one field of a rebuilt struct).
#[derive(Debug)]
pub(crate) struct Column {
    /// The output field: its name, type, nullability and the source field's metadata.
    pub field: FieldRef,
    /// Child indices from the enclosing struct down to the source field; never empty.
    pub source: Vec<usize>,
    /// How the source field's values become the output's.
    pub reshape: Reshape,
}

/// How a field's values are rebuilt.
#[derive(Debug)]
pub(crate) enum Reshape {
    /// Taken as is.
    Keep,
    /// A struct rebuilt from some of its (possibly nested) fields; its own nulls are kept.
    Struct(Vec<Column>),
    /// A list (or large or fixed-size list) whose elements are reshaped; offsets and nulls
    /// are kept. `item` is the output element field.
    List { item: FieldRef, inner: Box<Reshape> },
    /// A map whose values are reshaped; keys, offsets and nulls are kept. `entries` is the
    /// output entries field.
    MapValue { entries: FieldRef, inner: Box<Reshape> },
}

/// The schema a plan yields from `input`, whose schema-level metadata it keeps.
pub(crate) fn output_schema(input: &Schema, columns: &[Column]) -> SchemaRef {
    let fields: Fields = columns.iter().map(|c| c.field.clone()).collect();
    Arc::new(Schema::new_with_metadata(fields, input.metadata().clone()))
}

/// Applies a plan made from `batch`'s schema to `batch`.
pub(crate) fn output_batch(batch: &RecordBatch, columns: &[Column]) -> Result<RecordBatch> {
    let schema = output_schema(batch.schema_ref(), columns);
    let arrays = columns
        .iter()
        .map(|c| extract(batch.columns(), c))
        .collect::<Result<Vec<_>>>()?;
    // The row count matters when the plan yields no columns (a struct without fields).
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(schema, arrays, &options)?)
}

/// Builds one output column from the arrays of its enclosing struct.
fn extract(siblings: &[ArrayRef], column: &Column) -> Result<ArrayRef> {
    let (&first, rest) = column
        .source
        .split_first()
        .ok_or_else(|| Error::internal("select: a planned column has no source"))?;
    let mut array = siblings[first].clone();
    // Nulls of the structs walked through, which the output must carry as its own.
    let mut parents: Option<NullBuffer> = None;
    for &child in rest {
        let parent = array.as_struct();
        parents = NullBuffer::union(parents.as_ref(), parent.nulls());
        array = parent.column(child).clone();
    }
    let array = reshape(array, &column.reshape)?;
    match parents {
        Some(nulls) if nulls.null_count() > 0 => with_parent_nulls(&array, &nulls, column),
        _ => Ok(array),
    }
}

/// Makes `array` null wherever one of its parent structs is.
fn with_parent_nulls(array: &ArrayRef, parents: &NullBuffer, column: &Column) -> Result<ArrayRef> {
    if matches!(
        array.data_type(),
        DataType::Union(..) | DataType::RunEndEncoded(..)
    ) {
        // Neither has a validity bitmap of its own to receive the parents' nulls.
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "column {:?} of type {} sits under a struct with nulls, which that type cannot represent",
                column.field.name(),
                array.data_type()
            ),
        ));
    }
    let parent_is_null = BooleanArray::new(!parents.inner(), None);
    Ok(nullif(array.as_ref(), &parent_is_null)?)
}

fn reshape(array: ArrayRef, reshape: &Reshape) -> Result<ArrayRef> {
    let reshaped: ArrayRef = match reshape {
        Reshape::Keep => return Ok(array),
        Reshape::Struct(columns) => {
            let parent = array.as_struct();
            let arrays = columns
                .iter()
                .map(|c| extract(parent.columns(), c))
                .collect::<Result<Vec<_>>>()?;
            let fields: Fields = columns.iter().map(|c| c.field.clone()).collect();
            Arc::new(StructArray::try_new_with_length(
                fields,
                arrays,
                parent.nulls().cloned(),
                parent.len(),
            )?)
        }
        Reshape::List { item, inner } => match array.data_type() {
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                let values = self::reshape(list.values().clone(), inner)?;
                Arc::new(ListArray::try_new(
                    item.clone(),
                    list.offsets().clone(),
                    values,
                    list.nulls().cloned(),
                )?)
            }
            DataType::LargeList(_) => {
                let list = array.as_list::<i64>();
                let values = self::reshape(list.values().clone(), inner)?;
                Arc::new(LargeListArray::try_new(
                    item.clone(),
                    list.offsets().clone(),
                    values,
                    list.nulls().cloned(),
                )?)
            }
            DataType::FixedSizeList(_, size) => {
                let list = array.as_fixed_size_list();
                let values = self::reshape(list.values().clone(), inner)?;
                Arc::new(FixedSizeListArray::try_new_with_length(
                    item.clone(),
                    *size,
                    values,
                    list.nulls().cloned(),
                    list.len(),
                )?)
            }
            other => return Err(mismatch("a list", other)),
        },
        Reshape::MapValue { entries, inner } => {
            let DataType::Map(_, ordered) = array.data_type() else {
                return Err(mismatch("a map", array.data_type()));
            };
            let DataType::Struct(entry_fields) = entries.data_type() else {
                return Err(mismatch("map entries", entries.data_type()));
            };
            let map = array.as_map();
            let old = map.entries();
            let values = self::reshape(old.column(1).clone(), inner)?;
            let new = StructArray::try_new_with_length(
                entry_fields.clone(),
                vec![old.column(0).clone(), values],
                old.nulls().cloned(),
                old.len(),
            )?;
            Arc::new(MapArray::try_new(
                entries.clone(),
                map.offsets().clone(),
                new,
                map.nulls().cloned(),
                *ordered,
            )?)
        }
    };
    Ok(reshaped)
}

fn mismatch(expected: &str, actual: &DataType) -> Error {
    Error::internal(format!(
        "select: planned to reshape {expected} but found {actual}"
    ))
}
