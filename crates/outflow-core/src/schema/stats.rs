//! An input's schema together with what is known about nulls in its columns.
//!
//! The planner needs evidence, not declarations: a Parquet footer that counts zero nulls in a
//! column proves the column fits a required table column whatever its writer declared. Null
//! counts are kept per column path; a path without a count is unknown.

use std::collections::BTreeMap;

use arrow_array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow_schema::DataType as ArrowType;
use serde::{Deserialize, Serialize};

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
    /// and maps. A struct's child counts only the rows where the struct itself is present.
    pub fn from_batch(batch: &RecordBatch) -> Result<Self> {
        let schema = Schema::from_arrow(batch.schema().as_ref())?;
        let mut counts = BTreeMap::new();
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            count_nulls("", field.name(), column, None, &mut counts);
        }
        Ok(InputSchema {
            schema,
            null_counts: counts,
        })
    }
}

/// Counts nulls in `array` where `parent_valid` (if any) says the parent row is present.
fn count_nulls(
    prefix: &str,
    name: &str,
    array: &ArrayRef,
    parent_valid: Option<&[bool]>,
    out: &mut BTreeMap<String, u64>,
) {
    let path = join_path(prefix, name);
    let valid: Vec<bool> = (0..array.len())
        .map(|i| array.is_valid(i) && parent_valid.is_none_or(|p| p[i]))
        .collect();
    let nulls = match parent_valid {
        None => array.null_count() as u64,
        Some(p) => (0..array.len()).filter(|&i| p[i] && array.is_null(i)).count() as u64,
    };
    out.insert(path.clone(), nulls);
    if let ArrowType::Struct(_) = array.data_type()
        && let Some(structs) = array.as_any().downcast_ref::<StructArray>()
    {
        for (child_field, child) in structs.fields().iter().zip(structs.columns()) {
            count_nulls(&path, child_field.name(), child, Some(&valid), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int32Array, ListArray, StringArray, types::Int32Type};
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
}
