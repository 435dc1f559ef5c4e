//! An input's schema together with what is known about nulls in its columns.
//!
//! The planner needs evidence, not declarations: a Parquet footer that counts zero nulls in a
//! column proves the column fits a required table column whatever its writer declared. Null
//! counts are kept per column path; a path without a count is unknown.

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_buffer::NullBuffer;
use arrow_schema::DataType as ArrowType;
use serde::{Deserialize, Serialize};

use super::conform::{arrow_error, decoded};
use super::{Schema, join_path};
use crate::Result;

/// What is known about the nulls in one column of an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NullCount {
    /// The input holds exactly this many nulls in the column.
    Known(u64),
    /// The input carries no statistics for the column.
    Unknown,
}

/// An input's schema (a file's, a batch's) with per-column null counts where known.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InputSchema {
    /// The input's schema.
    pub schema: Schema,
    /// Known null counts by column path; a missing path is unknown.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub null_counts: BTreeMap<String, u64>,
}

impl InputSchema {
    /// An input whose null counts are all unknown.
    pub fn new(schema: Schema) -> Self {
        InputSchema {
            schema,
            null_counts: BTreeMap::new(),
        }
    }

    /// The same input with a known null count for `path`.
    pub fn with_null_count(mut self, path: impl Into<String>, count: u64) -> Self {
        self.null_counts.insert(path.into(), count);
        self
    }

    /// What is known about nulls at `path`.
    pub fn null_count(&self, path: &str) -> NullCount {
        match self.null_counts.get(path) {
            Some(n) => NullCount::Known(*n),
            None => NullCount::Unknown,
        }
    }

    /// The schema of an Arrow batch with exact null counts for every column outside lists
    /// and maps. Nulls are counted as values, whatever the layout: a dictionary key that
    /// points at a null value and a run of nulls count, and a struct's child counts only
    /// the rows where every enclosing struct is present.
    pub fn from_batch(batch: &RecordBatch) -> Result<Self> {
        let schema = Schema::from_arrow(batch.schema().as_ref())?;
        let mut counts = BTreeMap::new();
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            count_nulls(join_path("", field.name()), column, None, &mut counts)?;
        }
        Ok(InputSchema {
            schema,
            null_counts: counts,
        })
    }
}

/// Counts the nulls of `array` at `path` in the rows `parent_valid` (if any) keeps.
fn count_nulls(
    path: String,
    array: &ArrayRef,
    parent_valid: Option<&NullBuffer>,
    out: &mut BTreeMap<String, u64>,
) -> Result<()> {
    // Logical nulls: a dictionary's or run-end array's own validity misses null values.
    let valid = NullBuffer::union(parent_valid, array.logical_nulls().as_ref());
    let hidden = parent_valid.map_or(0, NullBuffer::null_count);
    let nulls = valid.as_ref().map_or(0, NullBuffer::null_count) - hidden;
    out.insert(path.clone(), nulls as u64);
    // Expanding an encoding copies its values; only a struct's children need that.
    let mut value_type = array.data_type();
    loop {
        value_type = match value_type {
            ArrowType::Dictionary(_, value) => value,
            ArrowType::RunEndEncoded(_, values) => values.data_type(),
            _ => break,
        };
    }
    if let ArrowType::Struct(_) = value_type {
        let plain = decoded(array).map_err(|e| arrow_error(&path, e))?;
        let structs = plain.as_struct();
        for (child_field, child) in structs.fields().iter().zip(structs.columns()) {
            count_nulls(join_path(&path, child_field.name()), child, valid.as_ref(), out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::types::{Int8Type, Int16Type, Int32Type};
    use arrow_array::{
        DictionaryArray, Int8Array, Int16Array, Int32Array, ListArray, RunArray, StringArray, StructArray,
    };
    use arrow_schema::{Field as ArrowField, Fields, Schema as ArrowSchema};

    use super::*;

    #[test]
    fn counts_nulls_outside_containers_only() {
        let inner = StructArray::new(
            Fields::from(vec![ArrowField::new("x", ArrowType::Int32, true)]),
            vec![Arc::new(Int32Array::from(vec![Some(1), None, None])) as ArrayRef],
            Some(vec![true, true, false].into()),
        );
        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![None, Some(1)]),
            None,
            Some(vec![]),
        ]);
        let schema = ArrowSchema::new(vec![
            ArrowField::new("name", ArrowType::Utf8, true),
            ArrowField::new("s", inner.data_type().clone(), true),
            ArrowField::new("l", list.data_type().clone(), true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringArray::from(vec![Some("a"), Some("b"), None])),
                Arc::new(inner),
                Arc::new(list),
            ],
        )
        .unwrap();
        let input = InputSchema::from_batch(&batch).unwrap();
        assert_eq!(input.null_count("name"), NullCount::Known(1));
        assert_eq!(input.null_count("s"), NullCount::Known(1));
        // Row 2's x is hidden by its null parent; only row 1 counts.
        assert_eq!(input.null_count("s.x"), NullCount::Known(1));
        assert_eq!(input.null_count("l"), NullCount::Known(1));
        assert_eq!(input.null_count("l.element"), NullCount::Unknown);
    }

    #[test]
    fn counts_nulls_held_in_dictionary_and_run_values() {
        // Keys 1 and 3 point at the null value; key 2 is null itself.
        let words = DictionaryArray::<Int8Type>::try_new(
            Int8Array::from(vec![Some(0), Some(1), None, Some(1)]),
            Arc::new(StringArray::from(vec![Some("a"), None])),
        )
        .unwrap();
        let runs = RunArray::<Int16Type>::try_new(
            &Int16Array::from(vec![1, 3, 4]),
            &Int32Array::from(vec![Some(5), None, Some(6)]),
        )
        .unwrap();
        // The struct hides row 1; its child's dictionary nulls count at rows 2 and 3 only.
        let s = StructArray::new(
            Fields::from(vec![ArrowField::new("w", words.data_type().clone(), true)]),
            vec![Arc::new(words.clone()) as ArrayRef],
            Some(vec![true, false, true, true].into()),
        );
        let schema = ArrowSchema::new(vec![
            ArrowField::new("words", words.data_type().clone(), true),
            ArrowField::new("runs", runs.data_type().clone(), true),
            ArrowField::new("s", s.data_type().clone(), true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(words), Arc::new(runs), Arc::new(s)],
        )
        .unwrap();
        let input = InputSchema::from_batch(&batch).unwrap();
        assert_eq!(input.null_count("words"), NullCount::Known(3));
        assert_eq!(input.null_count("runs"), NullCount::Known(2));
        assert_eq!(input.null_count("s"), NullCount::Known(1));
        assert_eq!(input.null_count("s.w"), NullCount::Known(2));
    }
}
