//! Flattening nested structs into top-level columns.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};

use super::plan::{Column, Reshape, output_batch, output_schema};
use crate::named::named_enum;
use crate::schema::join_path;
use crate::{Error, Result};

named_enum! {
    /// How [`flatten_schema`] and [`flatten_batch`] name the columns they make.
    #[derive(Default)]
    pub enum FlattenPolicy {
        /// Join the names of every level with `_`: `user.location.latitude` becomes
        /// `user_location_latitude` (the default).
        #[default]
        ConcatFieldNames = "concat_field_names",
        /// Keep the leaf's own name: `user.location.latitude` becomes `latitude`. Two
        /// leaves with the same name make flattening fail.
        KeepNestedName = "keep_nested_name",
    }
}

impl FlattenPolicy {
    fn column_name(self, path: &[&str]) -> String {
        match self {
            FlattenPolicy::ConcatFieldNames => path.join("_"),
            FlattenPolicy::KeepNestedName => path.last().copied().unwrap_or_default().to_string(),
        }
    }
}

/// The schema that flattening `schema` under `policy` yields.
///
/// Every struct, at any depth, is replaced by its fields, in schema order, until no
/// top-level column is a struct; a struct without fields yields no column. Lists and maps
/// are leaves: they are kept whole, structs inside them included. A leaf under a nullable
/// struct becomes nullable. Leaves keep their metadata (such as `PARQUET:field_id`), and
/// the schema keeps its own.
///
/// Fails when two leaves would get the same column name, naming both dotted paths: under
/// [`FlattenPolicy::KeepNestedName`] when two leaves share a name (`user.id`, `account.id`),
/// under [`FlattenPolicy::ConcatFieldNames`] when joined names meet (a column `a_b` and a
/// struct field `a.b`).
pub fn flatten_schema(schema: &Schema, policy: FlattenPolicy) -> Result<SchemaRef> {
    let columns = plan(schema, policy)?;
    Ok(output_schema(schema, &columns))
}

/// Flattens `batch` under `policy`: the result's schema is what [`flatten_schema`] returns
/// for the batch's schema.
///
/// A flattened leaf is null in every row where it, or any struct above it, is null. Values
/// are shared, not copied, where the leaf has no such parent nulls.
pub fn flatten_batch(batch: &RecordBatch, policy: FlattenPolicy) -> Result<RecordBatch> {
    let columns = plan(batch.schema_ref(), policy)?;
    output_batch(batch, &columns)
}

fn plan(schema: &Schema, policy: FlattenPolicy) -> Result<Vec<Column>> {
    let mut planner = Planner {
        policy,
        columns: Vec::new(),
        names: HashMap::new(),
    };
    planner.visit(schema.fields(), &mut Vec::new(), &mut Vec::new(), false)?;
    Ok(planner.columns)
}

struct Planner {
    policy: FlattenPolicy,
    columns: Vec<Column>,
    /// Column name -> the dotted path of the leaf that took it.
    names: HashMap<String, String>,
}

impl Planner {
    fn visit<'f>(
        &mut self,
        fields: &'f Fields,
        source: &mut Vec<usize>,
        path: &mut Vec<&'f str>,
        under_nullable: bool,
    ) -> Result<()> {
        for (index, field) in fields.iter().enumerate() {
            source.push(index);
            path.push(field.name());
            match field.data_type() {
                DataType::Struct(children) => {
                    self.visit(children, source, path, under_nullable || field.is_nullable())?
                }
                _ => self.leaf(field, source, path, under_nullable)?,
            }
            source.pop();
            path.pop();
        }
        Ok(())
    }

    fn leaf(&mut self, field: &Field, source: &[usize], path: &[&str], under_nullable: bool) -> Result<()> {
        let name = self.policy.column_name(path);
        let dotted = path.iter().fold(String::new(), |acc, part| join_path(&acc, part));
        if let Some(first) = self.names.get(&name) {
            return Err(Error::invalid_config(
                "flatten",
                format!(
                    "{first:?} and {dotted:?} both flatten to column {name:?} under {}",
                    self.policy
                ),
            )
            .with_context("path", first.clone())
            .with_context("other_path", dotted));
        }
        let output = field
            .clone()
            .with_name(name.clone())
            .with_nullable(field.is_nullable() || under_nullable);
        self.columns.push(Column {
            field: Arc::new(output),
            source: source.to_vec(),
            reshape: Reshape::Keep,
        });
        self.names.insert(name, dotted);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type};
    use arrow_array::{Array, ArrayRef, Int32Array, StructArray};
    use arrow_schema::Fields;
    use proptest::prelude::*;

    use super::*;
    use crate::ErrorKind;
    use crate::schema::FIELD_ID_KEY;
    use crate::select::testing::*;

    fn flatten(batch: &RecordBatch, policy: FlattenPolicy) -> Result<RecordBatch> {
        let schema = flatten_schema(batch.schema_ref(), policy)?;
        let flat = flatten_batch(batch, policy)?;
        assert_eq!(flat.schema(), schema, "schema and data disagree");
        Ok(flat)
    }

    fn names(batch: &RecordBatch) -> Vec<String> {
        batch.schema().fields().iter().map(|f| f.name().clone()).collect()
    }

    #[test]
    fn concat_field_names_joins_every_level() {
        let batch = fixture();
        let flat = flatten(&batch, FlattenPolicy::ConcatFieldNames).unwrap();
        assert_eq!(
            names(&flat),
            [
                "id",
                "user_name",
                "user_location_latitude",
                "user_location_longitude",
                "events",
                "attrs"
            ]
        );
        assert_eq!(
            render(&flat.project(&[1, 2, 3]).unwrap()),
            [
                "user_name=ann | user_location_latitude=52.5 | user_location_longitude=13.4",
                "user_name=null | user_location_latitude=null | user_location_longitude=null",
                "user_name=bob | user_location_latitude=null | user_location_longitude=null",
                "user_name=cy | user_location_latitude=48.9 | user_location_longitude=null",
            ]
        );
        // Lists and maps are leaves: kept whole, with the structs inside them.
        assert_eq!(flat.schema().field(4), batch.schema().field(2));
        assert_eq!(flat.column(4).as_ref(), batch.column(2).as_ref());
        assert_eq!(flat.column(5).as_ref(), batch.column(3).as_ref());
        assert_eq!(flat.schema().metadata()["origin"], "fixture");
    }

    #[test]
    fn leaves_become_nullable_under_nullable_structs_and_keep_metadata() {
        let flat = flatten_schema(fixture().schema_ref(), FlattenPolicy::ConcatFieldNames).unwrap();
        let latitude = flat.field_with_name("user_location_latitude").unwrap();
        assert!(latitude.is_nullable());
        assert_eq!(latitude.metadata()[FIELD_ID_KEY], "10");
        assert!(flat.field_with_name("user_name").unwrap().is_nullable());
        assert!(!flat.field_with_name("id").unwrap().is_nullable());
    }

    #[test]
    fn keep_nested_name_keeps_the_leaf_name() {
        let flat = flatten(&fixture(), FlattenPolicy::KeepNestedName).unwrap();
        assert_eq!(
            names(&flat),
            ["id", "name", "latitude", "longitude", "events", "attrs"]
        );
        assert_eq!(
            render(&flat.project(&[2]).unwrap()),
            ["latitude=52.5", "latitude=null", "latitude=null", "latitude=48.9"]
        );
    }

    fn xs(fields: &[&str]) -> ArrayRef {
        let fields: Fields = fields
            .iter()
            .map(|n| Field::new(*n, DataType::Int32, false))
            .collect();
        let arrays = (0..fields.len())
            .map(|i| Arc::new(Int32Array::from(vec![i as i32])) as ArrayRef)
            .collect();
        Arc::new(StructArray::try_new(fields, arrays, None).unwrap())
    }

    #[test]
    fn colliding_leaves_fail_naming_both_paths() {
        let batch = RecordBatch::try_from_iter([("a", xs(&["id", "x"])), ("b", xs(&["x"]))]).unwrap();
        let err = flatten(&batch, FlattenPolicy::KeepNestedName).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert_eq!(
            err.message(),
            "flatten: \"a.x\" and \"b.x\" both flatten to column \"x\" under keep_nested_name"
        );
        assert_eq!(err.context_value("path"), Some("a.x"));
        assert_eq!(err.context_value("other_path"), Some("b.x"));
        assert!(flatten(&batch, FlattenPolicy::ConcatFieldNames).is_ok());

        let a_b: ArrayRef = Arc::new(Int32Array::from(vec![1]));
        let batch = RecordBatch::try_from_iter([("a_b", a_b), ("a", xs(&["b"]))]).unwrap();
        let err = flatten(&batch, FlattenPolicy::ConcatFieldNames).unwrap_err();
        assert_eq!(
            err.message(),
            "flatten: \"a_b\" and \"a.b\" both flatten to column \"a_b\" under concat_field_names"
        );
        assert_eq!(
            flatten_batch(&batch, FlattenPolicy::ConcatFieldNames)
                .unwrap_err()
                .message(),
            err.message()
        );
    }

    #[test]
    fn a_struct_without_fields_yields_no_column() {
        let empty: ArrayRef = Arc::new(StructArray::new_empty_fields(3, None));
        let flat = flatten(&batch_of("nothing", empty), FlattenPolicy::ConcatFieldNames).unwrap();
        assert_eq!(flat.num_columns(), 0);
        assert_eq!(flat.num_rows(), 3);
    }

    #[test]
    fn sliced_batches_flatten_the_same_rows() {
        let batch = fixture();
        let whole = render(&flatten(&batch, FlattenPolicy::ConcatFieldNames).unwrap());
        for (offset, len) in [(1, 3), (2, 2), (3, 1), (0, 0)] {
            let flat = flatten(&batch.slice(offset, len), FlattenPolicy::ConcatFieldNames).unwrap();
            assert_eq!(render(&flat), whole[offset..offset + len], "slice {offset}+{len}");
        }
    }

    #[test]
    fn the_policy_reads_and_writes_by_name() {
        assert_eq!(FlattenPolicy::default(), FlattenPolicy::ConcatFieldNames);
        for policy in FlattenPolicy::ALL {
            let json = serde_json::to_string(policy).unwrap();
            assert_eq!(serde_json::from_str::<FlattenPolicy>(&json).unwrap(), *policy);
        }
        assert_eq!(
            serde_json::to_string(&FlattenPolicy::KeepNestedName).unwrap(),
            "\"keep_nested_name\""
        );
        for s in ["CONCAT_FIELD_NAMES", "ConcatFieldNames", "concat-field-names"] {
            assert_eq!(
                s.parse::<FlattenPolicy>().unwrap(),
                FlattenPolicy::ConcatFieldNames
            );
        }
        assert!("concat".parse::<FlattenPolicy>().is_err());
    }

    proptest! {
        #[test]
        fn flattening_matches_the_model(all in model_rows(), a in any::<usize>(), b in any::<usize>()) {
            let (offset, len) = window(all.len(), a, b);
            let batch = model_batch(&all).slice(offset, len);
            let flat = flatten(&batch, FlattenPolicy::ConcatFieldNames).unwrap();
            prop_assert_eq!(names(&flat), ["s_t_x", "s_t_y", "s_z", "l"]);
            let x = flat.column(0).as_primitive::<Int32Type>();
            let y = flat.column(1).as_primitive::<Int64Type>();
            let z = flat.column(2).as_primitive::<Int32Type>();
            for (i, row) in all[offset..offset + len].iter().enumerate() {
                let t_valid = row.s_valid && row.s_t.valid;
                prop_assert_eq!(x.is_valid(i).then(|| x.value(i)), row.s_t.x.filter(|_| t_valid));
                prop_assert_eq!(y.is_valid(i).then(|| y.value(i)), Some(row.s_t.y).filter(|_| t_valid));
                prop_assert_eq!(z.is_valid(i).then(|| z.value(i)), row.s_z.filter(|_| row.s_valid));
            }
            prop_assert_eq!(flat.column(3).as_ref(), batch.column(1).as_ref());
        }
    }
}
