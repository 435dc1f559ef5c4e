//! The job's transforms: select, flatten, rename, filter, cast and debezium.
//!
//! [`Transforms::new`] maps the source schema through every step before any data is read,
//! so a job that names a missing column fails at once, and `outflow plan` knows the schema
//! the sink will receive. Each step keeps what it worked out (column indexes, the target
//! types, the filter's literal converted to the column's type) and applies only that to
//! batches.
//!
//! Errors name the step as `transforms[N].kind` (counting from 0, in job file order).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Datum, Float64Array, Int64Array, RecordBatch, Scalar, StringArray,
};
use arrow::compute::kernels::cmp;
use arrow::compute::{CastOptions, can_cast_types, cast_with_options, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use outflow_core::changes::debezium::{envelope_schema, unwrap_envelope};
use outflow_core::schema::{PrimitiveType, field_to_arrow};
use outflow_core::select::{flatten_batch, flatten_schema, select_batch, select_schema};
use outflow_core::{Error, ErrorKind, FieldAccessDescriptor, FlattenPolicy, Result};

use crate::job::{FilterOp, FilterSpec, Literal, TransformSpec};
use crate::source::{RowOrigins, Unit};

/// The job's transforms, planned against the source schema.
#[derive(Debug)]
pub struct Transforms {
    steps: Vec<Step>,
    input: SchemaRef,
    output: SchemaRef,
}

#[derive(Debug)]
struct Step {
    key: String,
    op: Op,
    /// The schema this step produces.
    output: SchemaRef,
}

#[derive(Debug)]
enum Op {
    Select(FieldAccessDescriptor),
    Flatten(FlattenPolicy),
    Rename,
    Filter(Filter),
    Cast(Cast),
    /// Unwraps Debezium envelopes, the operation into this column.
    Debezium(String),
}

#[derive(Debug)]
struct Filter {
    column: usize,
    name: String,
    op: FilterOp,
    /// The value, as a one-element array of the compared type.
    value: Option<ArrayRef>,
    /// The type the column is cast to before comparing (a float literal on an integer
    /// column compares as float, so `gt 10.5` keeps 11 and drops 10).
    compare_as: Option<DataType>,
}

#[derive(Debug)]
struct Cast {
    columns: Vec<(usize, String, DataType)>,
    /// Rows that reached this step in the current file, for row numbers in errors.
    rows_seen: u64,
}

impl Transforms {
    /// Plans `specs` against `input`, failing on the first step that does not fit the
    /// schema it receives (an unknown column, a filter value of the wrong type, a cast
    /// Arrow cannot make).
    pub fn new(specs: &[TransformSpec], input: SchemaRef) -> Result<Transforms> {
        let mut steps = Vec::with_capacity(specs.len());
        let mut schema = input.clone();
        for (index, spec) in specs.iter().enumerate() {
            let key = format!("transforms[{index}].{}", spec.name());
            let (op, output) = plan_step(spec, &schema).map_err(|e| in_step(&key, e))?;
            schema = output.clone();
            steps.push(Step { key, op, output });
        }
        Ok(Transforms {
            steps,
            input,
            output: schema,
        })
    }

    /// The schema batches have before the transforms.
    pub fn input_schema(&self) -> &SchemaRef {
        &self.input
    }

    /// The schema batches have after the transforms.
    pub fn output_schema(&self) -> &SchemaRef {
        &self.output
    }

    /// Resets the row counts that error messages use; called at the start of each file, so
    /// a row number counts the rows of that file that reached the step, from 1.
    pub fn start_file(&mut self) {
        for step in &mut self.steps {
            if let Op::Cast(cast) = &mut step.op {
                cast.rows_seen = 0;
            }
        }
    }

    /// Applies every step to `batch`, which must have the input schema.
    pub fn apply(&mut self, batch: RecordBatch) -> Result<RecordBatch> {
        let mut origins = RowOrigins::consecutive(Unit::Row, 0, batch.num_rows());
        self.apply_with_origins(batch, &mut origins)
    }

    /// Applies every step to `batch`, keeping in `origins` (where `batch`'s rows came from)
    /// the places of the rows that are left.
    pub fn apply_with_origins(
        &mut self,
        batch: RecordBatch,
        origins: &mut RowOrigins,
    ) -> Result<RecordBatch> {
        let mut batch = batch;
        for step in &mut self.steps {
            batch = apply_step(step, batch, origins).map_err(|e| in_step(&step.key, e))?;
        }
        Ok(batch)
    }
}

/// Prefixes an error with the step's key, keeping its kind and context.
fn in_step(key: &str, err: Error) -> Error {
    // Core errors already say which option they are about (`select: ...`); the step's key
    // replaces that.
    let message = ["select: ", "flatten: "]
        .iter()
        .find_map(|prefix| err.message().strip_prefix(prefix))
        .unwrap_or(err.message());
    let message = format!("{key}: {message}");
    err.with_message(message)
        .with_context("transform", key.to_string())
}

fn plan_step(spec: &TransformSpec, schema: &SchemaRef) -> Result<(Op, SchemaRef)> {
    match spec {
        TransformSpec::Select(fields) => Ok((Op::Select(fields.clone()), select_schema(schema, fields)?)),
        TransformSpec::Flatten(flatten) => Ok((
            Op::Flatten(flatten.policy),
            flatten_schema(schema, flatten.policy)?,
        )),
        TransformSpec::Rename(renames) => Ok((Op::Rename, rename_schema(schema, renames)?)),
        TransformSpec::Filter(filter) => Ok((Op::Filter(plan_filter(schema, filter)?), schema.clone())),
        TransformSpec::Cast(casts) => {
            let (cast, output) = plan_cast(schema, casts)?;
            Ok((Op::Cast(cast), output))
        }
        TransformSpec::Debezium(spec) => Ok((
            Op::Debezium(spec.operation_column.clone()),
            envelope_schema(schema, &spec.operation_column)?,
        )),
    }
}

fn apply_step(step: &mut Step, batch: RecordBatch, origins: &mut RowOrigins) -> Result<RecordBatch> {
    match &mut step.op {
        Op::Select(fields) => select_batch(&batch, fields),
        Op::Flatten(policy) => flatten_batch(&batch, *policy),
        Op::Rename => Ok(RecordBatch::try_new(
            step.output.clone(),
            batch.columns().to_vec(),
        )?),
        Op::Filter(filter) => {
            let keep = filter.mask(&batch)?;
            *origins = origins.filter(&keep);
            Ok(filter_record_batch(&batch, &keep)?)
        }
        Op::Cast(cast) => cast.apply(&batch, &step.output),
        Op::Debezium(operation_column) => unwrap_envelope(&batch, operation_column),
    }
}

fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidConfig, message)
}

fn column_index(schema: &Schema, name: &str) -> Result<usize> {
    schema.index_of(name).map_err(|_| {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        config_error(format!(
            "column {name:?} does not exist; the columns are {}",
            names.join(", ")
        ))
        .with_context("column", name)
    })
}

fn rename_schema(schema: &Schema, renames: &BTreeMap<String, String>) -> Result<SchemaRef> {
    for old in renames.keys() {
        column_index(schema, old)?;
    }
    let mut seen = HashSet::new();
    let mut fields = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let name = renames.get(field.name()).unwrap_or(field.name());
        if name.trim().is_empty() {
            return Err(config_error(format!(
                "column {:?} is renamed to a blank name",
                field.name()
            )));
        }
        if !seen.insert(name.clone()) {
            return Err(config_error(format!("two columns would be named {name:?}"))
                .with_context("column", name.clone()));
        }
        fields.push(field.as_ref().clone().with_name(name.clone()));
    }
    Ok(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

fn plan_filter(schema: &Schema, spec: &FilterSpec) -> Result<Filter> {
    let column = column_index(schema, &spec.column)?;
    let name = spec.column.clone();
    let data_type = schema.field(column).data_type().clone();
    let null_test = matches!(spec.op, FilterOp::IsNull | FilterOp::IsNotNull);
    let mismatch = |what: &str| {
        config_error(format!(
            "column {name:?} is {data_type}; {} cannot be compared with it{what}",
            spec.value.as_ref().map(|v| v.to_string()).unwrap_or_default()
        ))
        .with_context("column", name.clone())
    };
    let (value, compare_as): (Option<ArrayRef>, Option<DataType>) = match (&spec.value, null_test) {
        (Some(_), true) => {
            return Err(config_error(format!("{} takes no value", spec.op.as_str())));
        }
        (None, true) => (None, None),
        (None, false) => {
            return Err(config_error(format!("{} needs a value", spec.op.as_str())));
        }
        (Some(literal), false) => {
            let integer = data_type.is_integer();
            let numeric = data_type.is_numeric();
            let textual = matches!(
                data_type,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            );
            let temporal = data_type.is_temporal();
            let literal_array: ArrayRef = match literal {
                Literal::Bool(b) if data_type == DataType::Boolean => Arc::new(BooleanArray::from(vec![*b])),
                Literal::Int(i) if numeric => Arc::new(Int64Array::from(vec![*i])),
                Literal::Float(x) if numeric => Arc::new(Float64Array::from(vec![*x])),
                Literal::String(s) if textual || temporal || is_decimal(&data_type) => {
                    Arc::new(StringArray::from(vec![s.as_str()]))
                }
                _ => return Err(mismatch("")),
            };
            let target = match literal {
                Literal::Float(_) if integer => DataType::Float64,
                _ => data_type.clone(),
            };
            let value =
                strict_cast(&literal_array, &target).map_err(|_| mismatch(&format!(" as {target}")))?;
            let compare_as = (target != data_type).then_some(target);
            (Some(value), compare_as)
        }
    };
    if !null_test && !is_comparable(&data_type) {
        return Err(mismatch(""));
    }
    Ok(Filter {
        column,
        name,
        op: spec.op,
        value,
        compare_as,
    })
}

fn is_decimal(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
            | DataType::Decimal256(..)
    )
}

fn is_comparable(t: &DataType) -> bool {
    t.is_primitive()
        || matches!(
            t,
            DataType::Boolean | DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        )
}

impl Filter {
    /// Which rows of `batch` the filter keeps.
    fn mask(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let column = batch.column(self.column);
        let mask = match (self.op, &self.value) {
            (FilterOp::IsNull, _) => arrow::compute::is_null(column)?,
            (FilterOp::IsNotNull, _) => arrow::compute::is_not_null(column)?,
            (op, Some(value)) => {
                let column = match &self.compare_as {
                    Some(t) => strict_cast(column, t)?,
                    None => column.clone(),
                };
                let value = Scalar::new(value.clone());
                compare(op, &column, &value).map_err(|e| {
                    Error::new(ErrorKind::InvalidInput, format!("column {:?}: {e}", self.name))
                        .with_context("column", self.name.clone())
                })?
            }
            (_, None) => return Err(Error::internal("a comparison filter has no value")),
        };
        Ok(mask)
    }
}

fn compare(
    op: FilterOp,
    column: &dyn Datum,
    value: &dyn Datum,
) -> std::result::Result<BooleanArray, arrow::error::ArrowError> {
    match op {
        FilterOp::Eq => cmp::eq(column, value),
        FilterOp::Ne => cmp::neq(column, value),
        FilterOp::Lt => cmp::lt(column, value),
        FilterOp::Le => cmp::lt_eq(column, value),
        FilterOp::Gt => cmp::gt(column, value),
        FilterOp::Ge => cmp::gt_eq(column, value),
        FilterOp::IsNull | FilterOp::IsNotNull => unreachable!("null tests do not compare"),
    }
}

fn strict_cast(array: &ArrayRef, to: &DataType) -> std::result::Result<ArrayRef, arrow::error::ArrowError> {
    cast_with_options(
        array,
        to,
        &CastOptions {
            safe: false,
            format_options: FormatOptions::default(),
        },
    )
}

fn plan_cast(schema: &Schema, casts: &BTreeMap<String, PrimitiveType>) -> Result<(Cast, SchemaRef)> {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut columns = Vec::with_capacity(casts.len());
    for (name, to) in casts {
        let index = column_index(schema, name)?;
        let target = field_to_arrow(&outflow_core::schema::Field::optional(name.clone(), *to));
        let from = schema.field(index).data_type();
        if !can_cast_types(from, target.data_type()) {
            return Err(
                config_error(format!("column {name:?} is {from}, which cannot be cast to {to}"))
                    .with_context("column", name.clone()),
            );
        }
        let field = &mut fields[index];
        // The column keeps its name, nullability and metadata (a field id); the target type
        // adds its own (the JSON and UUID extension names).
        let mut metadata = field.metadata().clone();
        metadata.extend(target.metadata().clone());
        *field = field
            .clone()
            .with_data_type(target.data_type().clone())
            .with_metadata(metadata);
        columns.push((index, name.clone(), target.data_type().clone()));
    }
    let output = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    Ok((
        Cast {
            columns,
            rows_seen: 0,
        },
        output,
    ))
}

impl Cast {
    fn apply(&mut self, batch: &RecordBatch, output: &SchemaRef) -> Result<RecordBatch> {
        let mut arrays = batch.columns().to_vec();
        for (index, name, to) in &self.columns {
            let column = &arrays[*index];
            arrays[*index] = strict_cast(column, to).map_err(|err| self.bad_value(name, column, to, err))?;
        }
        self.rows_seen += batch.num_rows() as u64;
        Ok(RecordBatch::try_new(output.clone(), arrays)?)
    }

    /// The error for a failed cast, naming the first row whose value does not convert.
    fn bad_value(
        &self,
        name: &str,
        column: &ArrayRef,
        to: &DataType,
        err: arrow::error::ArrowError,
    ) -> Error {
        let lenient = arrow::compute::cast(column, to).ok();
        let bad = lenient
            .and_then(|converted| (0..column.len()).find(|&i| column.is_valid(i) && converted.is_null(i)));
        let Some(row) = bad else {
            return Error::new(
                ErrorKind::InvalidInput,
                format!("column {name:?}: cannot cast to {to}: {err}"),
            )
            .with_context("column", name.to_string());
        };
        let value = ArrayFormatter::try_new(column.as_ref(), &FormatOptions::default())
            .map(|f| f.value(row).to_string())
            .unwrap_or_default();
        let number = self.rows_seen + row as u64 + 1;
        Error::new(
            ErrorKind::InvalidInput,
            format!(
                "column {name:?}, row {number}: cannot cast {:?} to {to}",
                crate::output::excerpt(&value)
            ),
        )
        .with_context("column", name.to_string())
        .with_context("row", number.to_string())
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, Int32Array, StructArray};
    use arrow::datatypes::{Float64Type, Int64Type, TimestampMicrosecondType};

    use super::*;
    use crate::job::TransformSpec;

    fn specs(yaml: &str) -> Vec<TransformSpec> {
        crate::job::from_yaml(yaml).unwrap()
    }

    fn people() -> RecordBatch {
        let user = StructArray::from(vec![
            (
                Arc::new(Field::new("name", DataType::Utf8, true)),
                Arc::new(StringArray::from(vec![
                    Some("ann"),
                    Some("bob"),
                    None,
                    Some("dee"),
                ])) as ArrayRef,
            ),
            (
                Arc::new(Field::new("age", DataType::Int32, true)),
                Arc::new(Int32Array::from(vec![Some(31), Some(25), Some(40), None])) as ArrayRef,
            ),
        ]);
        RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1, 2, 3, 4])) as ArrayRef),
            ("user", Arc::new(user) as ArrayRef),
            (
                "amount",
                Arc::new(StringArray::from(vec![Some("10.5"), Some("3"), None, Some("12")])) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    fn run(yaml: &str, batch: RecordBatch) -> Result<RecordBatch> {
        let mut transforms = Transforms::new(&specs(yaml), batch.schema())?;
        let out = transforms.apply(batch)?;
        assert_eq!(out.schema(), *transforms.output_schema());
        Ok(out)
    }

    fn names(batch: &RecordBatch) -> Vec<String> {
        batch.schema().fields().iter().map(|f| f.name().clone()).collect()
    }

    #[test]
    fn select_and_flatten_use_the_core_rules() {
        let out = run("[{select: [id, user.name]}]", people()).unwrap();
        assert_eq!(names(&out), ["id", "name"]);
        assert_eq!(out.column(1).as_string::<i32>().value(1), "bob");

        let out = run("[{flatten: {}}]", people()).unwrap();
        assert_eq!(names(&out), ["id", "user_name", "user_age", "amount"]);
        assert_eq!(
            out.column(2)
                .as_primitive::<arrow::datatypes::Int32Type>()
                .value(0),
            31
        );

        let out = run("[{flatten: {policy: keep_nested_name}}]", people()).unwrap();
        assert_eq!(names(&out), ["id", "name", "age", "amount"]);

        let err = run("[{select: [id, user.email]}]", people()).unwrap_err();
        assert!(err.to_string().contains("transforms[0].select"), "{err}");
        assert!(err.to_string().contains("user.email"), "{err}");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn rename_renames_all_at_once() {
        let out = run("[{rename: {id: amount, amount: id}}]", people()).unwrap();
        assert_eq!(names(&out), ["amount", "user", "id"]);
        assert_eq!(out.column(0).as_primitive::<Int64Type>().values(), &[1, 2, 3, 4]);

        let err = run("[{rename: {idd: key}}]", people()).unwrap_err();
        assert!(
            err.to_string().contains(
                "transforms[0].rename: column \"idd\" does not exist; the columns are id, user, amount"
            ),
            "{err}"
        );
        assert_eq!(err.context_value("column"), Some("idd"));
        let err = run("[{rename: {id: amount}}]", people()).unwrap_err();
        assert!(
            err.to_string().contains("two columns would be named \"amount\""),
            "{err}"
        );
    }

    #[test]
    fn filter_compares_one_column_with_a_value() {
        let ids = |yaml: &str| {
            let out = run(yaml, people()).unwrap();
            out.column(0).as_primitive::<Int64Type>().values().to_vec()
        };
        assert_eq!(ids("[{filter: {column: id, op: gt, value: 2}}]"), [3, 4]);
        assert_eq!(ids("[{filter: {column: id, op: le, value: 2}}]"), [1, 2]);
        assert_eq!(ids("[{filter: {column: id, op: ne, value: 2}}]"), [1, 3, 4]);
        // A fractional value on an integer column compares as a fraction.
        assert_eq!(ids("[{filter: {column: id, op: ge, value: 2.5}}]"), [3, 4]);
        // Nulls never match a comparison.
        assert_eq!(ids("[{filter: {column: amount, op: ne, value: '3'}}]"), [1, 4]);
        assert_eq!(ids("[{filter: {column: amount, op: is_null}}]"), [3]);
        assert_eq!(ids("[{filter: {column: amount, op: is_not_null}}]"), [1, 2, 4]);
        assert_eq!(
            ids("[{flatten: {}}, {filter: {column: user_name, op: eq, value: bob}}]"),
            [2]
        );
    }

    #[test]
    fn filter_type_mismatches_name_the_column() {
        let err = run("[{filter: {column: amount, op: gt, value: 10}}]", people()).unwrap_err();
        assert!(
            err.to_string()
                .contains("transforms[0].filter: column \"amount\" is Utf8; 10 cannot be compared with it"),
            "{err}"
        );
        let err = run("[{filter: {column: id, op: eq, value: ten}}]", people()).unwrap_err();
        assert!(err.to_string().contains("column \"id\" is Int64"), "{err}");
        let err = run("[{filter: {column: user, op: eq, value: x}}]", people()).unwrap_err();
        assert!(err.to_string().contains("column \"user\""), "{err}");
        let err = run("[{filter: {column: id, op: is_null, value: 1}}]", people()).unwrap_err();
        assert!(err.to_string().contains("is_null takes no value"), "{err}");
        let err = run("[{filter: {column: id, op: gt}}]", people()).unwrap_err();
        assert!(err.to_string().contains("gt needs a value"), "{err}");
        let err = run("[{filter: {column: nope, op: is_null}}]", people()).unwrap_err();
        assert!(
            err.to_string().contains("column \"nope\" does not exist"),
            "{err}"
        );
    }

    #[test]
    fn filter_parses_dates_and_timestamps() {
        let batch = RecordBatch::try_from_iter([(
            "ts",
            Arc::new(StringArray::from(vec![
                "2024-01-01T00:00:00",
                "2024-06-01T12:00:00",
            ])) as ArrayRef,
        )])
        .unwrap();
        let out = run(
            "[{cast: {ts: timestamp}}, {filter: {column: ts, op: gt, value: '2024-03-01 00:00:00'}}]",
            batch,
        )
        .unwrap();
        assert_eq!(out.num_rows(), 1);
        let ts = out.column(0).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 1_717_243_200_000_000);
        let err = Transforms::new(
            &specs("[{cast: {ts: timestamp}}, {filter: {column: ts, op: gt, value: 'soon'}}]"),
            Arc::new(Schema::new(vec![Field::new("ts", DataType::Utf8, true)])),
        )
        .unwrap_err();
        assert!(err.to_string().contains("transforms[1].filter"), "{err}");
        assert!(
            err.to_string()
                .contains("\"soon\" cannot be compared with it as Timestamp"),
            "{err}"
        );
    }

    #[test]
    fn cast_converts_and_names_column_and_row_of_a_bad_value() {
        let out = run("[{cast: {amount: double, id: string}}]", people()).unwrap();
        assert_eq!(out.schema().field(2).data_type(), &DataType::Float64);
        let amount = out.column(2).as_primitive::<Float64Type>();
        assert_eq!(amount.value(0), 10.5);
        assert!(amount.is_null(2));
        assert_eq!(out.column(0).as_string::<i32>().value(3), "4");

        let mut transforms = Transforms::new(&specs("[{cast: {amount: long}}]"), people().schema()).unwrap();
        let good = people().slice(1, 1);
        transforms.apply(good).unwrap();
        let err = transforms.apply(people()).unwrap_err();
        assert!(
            err.to_string()
                .contains("transforms[0].cast: column \"amount\", row 2: cannot cast \"10.5\" to Int64"),
            "{err}"
        );
        assert_eq!(err.context_value("row"), Some("2"));
        transforms.start_file();
        let err = transforms.apply(people().slice(0, 1)).unwrap_err();
        assert!(err.to_string().contains("row 1: cannot cast \"10.5\""), "{err}");

        let err = run("[{cast: {user: long}}]", people()).unwrap_err();
        assert!(err.to_string().contains("column \"user\" is Struct"), "{err}");
        assert!(err.to_string().contains("cannot be cast to long"), "{err}");
    }

    #[test]
    fn steps_apply_in_order_and_plan_the_schema_without_data() {
        let yaml = "[{flatten: {}}, {rename: {user_age: age}}, {filter: {column: age, op: ge, value: 30}}, {select: [id, age]}, {cast: {age: long}}]";
        let transforms = Transforms::new(&specs(yaml), people().schema()).unwrap();
        let schema = transforms.output_schema();
        assert_eq!(schema.field(0).name(), "id");
        assert_eq!(schema.field(1).name(), "age");
        assert_eq!(schema.field(1).data_type(), &DataType::Int64);
        let out = run(yaml, people()).unwrap();
        assert_eq!(out.column(0).as_primitive::<Int64Type>().values(), &[1, 3]);
        assert_eq!(out.column(1).as_primitive::<Int64Type>().values(), &[31, 40]);
    }
}
