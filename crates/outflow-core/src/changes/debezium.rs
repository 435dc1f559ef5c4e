//! Debezium's change event envelope, unwrapped into rows that carry their operation.
//!
//! A Debezium event's value holds `before` (the row before the change; null for a create),
//! `after` (the row after it; null for a delete), `op` (`c` create, `r` snapshot read, `u`
//! update, `d` delete), `source` and `ts_ms`; with the JSON converter's schemas on, all of
//! it sits under `payload`, beside `schema`. Unwrapped, each event is one row: the fields
//! of `after`, or of `before` where `after` is null (a delete keeps its key that way), and
//! the operation in a column of its own, which [`super::OperationColumn`]'s defaults read.
//! `source`, `ts_ms` (and `ts_us`, `ts_ns`, `transaction`) are dropped. Columns beside the
//! envelope, which the source added (a Kafka record's key or time, from `key_column` or
//! `timestamp_column`), are carried after the row's fields: a sink may need them (Bigtable
//! times its cells by the record).
//!
//! Both the schema and each batch are unwrapped, so a job knows the columns a sink gets
//! before it reads a row.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StructArray, new_null_array};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};

use crate::{Error, ErrorKind, Result};

/// Where the parts of the envelope are in a batch of `schema`.
struct Envelope {
    /// The index of `payload`, when the envelope is under it.
    payload: Option<usize>,
    op: usize,
    before: Option<usize>,
    after: Option<usize>,
    /// The row image's fields: `after`'s, or `before`'s when `after` is never given.
    image: Fields,
    /// The top-level columns beside the envelope, carried as they are.
    carried: Vec<usize>,
}

/// Debezium's own fields of an event, which are not carried.
const ENVELOPE: [&str; 8] = [
    "before",
    "after",
    "op",
    "source",
    "ts_ms",
    "ts_us",
    "ts_ns",
    "transaction",
];
/// The fields beside `payload` in the JSON converter's form, which are not carried.
const WRAPPER: [&str; 2] = ["payload", "schema"];

fn invalid(message: String) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!("the Debezium envelope: {message}"),
    )
}

impl Envelope {
    fn of(schema: &Schema) -> Result<Envelope> {
        let (payload, fields) = match (schema.index_of("op"), schema.index_of("payload")) {
            (Err(_), Ok(index)) => match schema.field(index).data_type() {
                DataType::Struct(fields) => (Some(index), fields.clone()),
                other => return Err(invalid(format!("payload holds {other}, not an object"))),
            },
            _ => (None, schema.fields().clone()),
        };
        let find = |name: &str| fields.iter().position(|f| f.name() == name);
        let op = find("op").ok_or_else(|| invalid("no op field".into()))?;
        if !matches!(
            fields[op].data_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) {
            return Err(invalid(format!("op holds {}, not text", fields[op].data_type())));
        }
        // A side that was null in every event a schema was inferred from is typed as
        // something else (Null, or text): it holds no fields, and any value in it is an
        // error when a batch is unwrapped.
        let side = |name: &str| -> (Option<usize>, Option<Fields>) {
            match find(name) {
                None => (None, None),
                Some(index) => match fields[index].data_type() {
                    DataType::Struct(children) => (Some(index), Some(children.clone())),
                    _ => (Some(index), None),
                },
            }
        };
        let (before, before_fields) = side("before");
        let (after, after_fields) = side("after");
        let image = after_fields
            .or(before_fields)
            .ok_or_else(|| invalid("neither before nor after holds a row".into()))?;
        let own: &[&str] = if payload.is_some() { &WRAPPER } else { &ENVELOPE };
        let carried: Vec<usize> = (0..schema.fields().len())
            .filter(|&i| !own.contains(&schema.field(i).name().as_str()))
            .collect();
        for &i in &carried {
            let name = schema.field(i).name();
            if image.iter().any(|f| f.name() == name) {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "the Debezium envelope: the row has a field {name:?}, and so has the record beside \
                         the envelope (a source column such as key_column or timestamp_column): name that \
                         column otherwise"
                    ),
                )
                .with_context("column", name.clone()));
            }
        }
        Ok(Envelope {
            payload,
            op,
            before,
            after,
            image,
            carried,
        })
    }

    fn output_schema(&self, input: &Schema, operation_column: &str) -> Result<SchemaRef> {
        let carried = self.carried.iter().map(|&i| input.field(i));
        if self.image.iter().any(|f| f.name() == operation_column)
            || carried.clone().any(|f| f.name() == operation_column)
        {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "the Debezium envelope: the row has a field {operation_column:?}, the name of the operation column; name the operation column otherwise"
                ),
            ));
        }
        let mut fields: Vec<Field> = self
            .image
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.extend(carried.cloned());
        fields.push(Field::new(operation_column, DataType::Utf8, true));
        Ok(Arc::new(Schema::new(fields)))
    }
}

/// The schema of `input`'s events unwrapped, the operation in `operation_column`.
pub fn envelope_schema(input: &Schema, operation_column: &str) -> Result<SchemaRef> {
    Envelope::of(input)?.output_schema(input, operation_column)
}

/// `batch`'s events unwrapped: the row image's fields, then `operation_column`.
pub fn unwrap_envelope(batch: &RecordBatch, operation_column: &str) -> Result<RecordBatch> {
    let envelope = Envelope::of(&batch.schema())?;
    let output = envelope.output_schema(&batch.schema(), operation_column)?;
    let columns: Vec<ArrayRef> = match envelope.payload {
        Some(index) => struct_of(batch.column(index)).columns().to_vec(),
        None => batch.columns().to_vec(),
    };
    let rows = batch.num_rows();
    for (name, index) in [("before", envelope.before), ("after", envelope.after)] {
        if let Some(column) = index.map(|i| &columns[i])
            && !matches!(column.data_type(), DataType::Struct(_))
            && column.logical_null_count() < column.len()
        {
            return Err(invalid(format!(
                "{name} holds {}, not an object",
                column.data_type()
            )));
        }
    }
    let side = |index: Option<usize>| index.and_then(|i| columns[i].as_any().downcast_ref::<StructArray>());
    let (before, after) = (side(envelope.before), side(envelope.after));
    let mut out = Vec::with_capacity(output.fields().len());
    for field in envelope.image.iter() {
        let from_after = after
            .map(|a| present(a, field.name(), field.data_type()))
            .transpose()?;
        let from_before = before
            .map(|b| present(b, field.name(), field.data_type()))
            .transpose()?;
        let column = match (from_after, from_before) {
            (Some(a), Some(b)) => {
                let use_after = BooleanArray::from_iter((0..rows).map(|row| Some(a.is_valid(row))));
                arrow_select::zip::zip(&use_after, &a, &b)
                    .map_err(|e| invalid(format!("{}: {e}", field.name())))?
            }
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => new_null_array(field.data_type(), rows),
        };
        out.push(column);
    }
    out.extend(envelope.carried.iter().map(|&i| batch.column(i).clone()));
    out.push(
        arrow_cast::cast(&columns[envelope.op], &DataType::Utf8).map_err(|e| invalid(format!("op: {e}")))?,
    );
    RecordBatch::try_new(output, out).map_err(|e| invalid(e.to_string()))
}

fn struct_of(column: &ArrayRef) -> &StructArray {
    column
        .as_any()
        .downcast_ref::<StructArray>()
        .expect("the schema said a struct")
}

/// `side`'s field `name` as `data_type`, null wherever `side` is (a missing field: all
/// null).
fn present(side: &StructArray, name: &str, data_type: &DataType) -> Result<ArrayRef> {
    let Some(child) = side.column_by_name(name) else {
        return Ok(new_null_array(data_type, side.len()));
    };
    let child = if child.data_type() == data_type {
        child.clone()
    } else {
        arrow_cast::cast(child, data_type)
            .map_err(|e| invalid(format!("{name} differs between before and after: {e}")))?
    };
    if side.null_count() == 0 {
        return Ok(child);
    }
    let keep = BooleanArray::from_iter((0..side.len()).map(|row| Some(side.is_valid(row))));
    arrow_select::zip::zip(&keep, &child, &arrow_array::new_null_array(data_type, side.len()))
        .map_err(|e| invalid(format!("{name}: {e}")))
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use serde_json::json;

    use super::*;
    use crate::schema::json::JsonSample;

    /// `lines` decoded as arrow-json decodes an NDJSON file, the schema inferred.
    fn decoded(lines: &[serde_json::Value]) -> RecordBatch {
        let mut sample = JsonSample::new();
        for line in lines {
            sample.add(line.to_string().as_bytes()).unwrap();
        }
        let schema = sample.schema().unwrap();
        let mut decoder = crate::schema::json::decoder_builder(schema, 1024, true)
            .build_decoder()
            .unwrap();
        for line in lines {
            decoder.decode(format!("{line}\n").as_bytes()).unwrap();
        }
        decoder.flush().unwrap().unwrap()
    }

    fn event(op: &str, before: serde_json::Value, after: serde_json::Value) -> serde_json::Value {
        json!({"before": before, "after": after, "op": op, "source": {"db": "crm"}, "ts_ms": 1})
    }

    #[test]
    fn events_become_rows_of_after_or_before_with_their_operation() {
        let batch = decoded(&[
            event("c", json!(null), json!({"id": 1, "name": "ada"})),
            event(
                "u",
                json!({"id": 1, "name": "ada"}),
                json!({"id": 1, "name": "ada l"}),
            ),
            event("d", json!({"id": 1, "name": "ada l"}), json!(null)),
        ]);
        let schema = envelope_schema(&batch.schema(), "op").unwrap();
        let rows = unwrap_envelope(&batch, "op").unwrap();
        assert_eq!(rows.schema(), schema);
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["id", "name", "op"]);
        let ids: Vec<i64> = rows.column(0).as_primitive::<Int64Type>().values().to_vec();
        assert_eq!(ids, [1, 1, 1], "a delete keeps its key from before");
        let names: Vec<Option<&str>> = rows.column(1).as_string::<i32>().iter().collect();
        assert_eq!(names, [Some("ada"), Some("ada l"), Some("ada l")]);
        let ops: Vec<Option<&str>> = rows.column(2).as_string::<i32>().iter().collect();
        assert_eq!(ops, [Some("c"), Some("u"), Some("d")]);
    }

    #[test]
    fn the_payload_wrapper_and_a_side_never_given_are_unwrapped() {
        // Only creates: `before` is null in every event, and inferred as text.
        let batch = decoded(&[json!({
            "schema": {"type": "struct"},
            "payload": {"before": null, "after": {"id": 7}, "op": "r", "ts_ms": 5},
        })]);
        let rows = unwrap_envelope(&batch, "kind").unwrap();
        assert_eq!(rows.schema().field(1).name(), "kind");
        assert_eq!(rows.column(0).as_primitive::<Int64Type>().value(0), 7);
        // Only deletes: the row comes from `before`.
        let batch = decoded(&[event("d", json!({"id": 9}), json!(null))]);
        let rows = unwrap_envelope(&batch, "op").unwrap();
        assert_eq!(rows.column(0).as_primitive::<Int64Type>().value(0), 9);
    }

    fn names(batch: &RecordBatch) -> Vec<&str> {
        batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect()
    }

    #[test]
    fn columns_beside_the_envelope_are_carried_and_may_not_clash_with_the_row() {
        let mut bare = event("u", json!({"id": 1}), json!({"id": 1, "name": "b"}));
        bare["key"] = json!("1");
        bare["transaction"] = json!(null);
        bare["ts_us"] = json!(1000);
        let batch = decoded(&[bare]);
        let rows = unwrap_envelope(&batch, "op").unwrap();
        assert_eq!(names(&rows), ["id", "name", "key", "op"]);
        assert_eq!(rows.column(2).as_string::<i32>().value(0), "1");
        assert_eq!(envelope_schema(&batch.schema(), "op").unwrap(), rows.schema());

        let wrapped = json!({
            "schema": {"type": "struct"},
            "payload": {"before": null, "after": {"id": 7}, "op": "c"},
            "kafka_time": 12,
        });
        let rows = unwrap_envelope(&decoded(&[wrapped]), "op").unwrap();
        assert_eq!(names(&rows), ["id", "kafka_time", "op"]);

        let mut clash = event("c", json!(null), json!({"id": 1, "key": "k"}));
        clash["key"] = json!("1");
        let err = unwrap_envelope(&decoded(&[clash]), "op").unwrap_err();
        assert_eq!(err.context_value("column"), Some("key"), "{err}");
    }

    #[test]
    fn what_is_not_an_envelope_is_named() {
        let batch = decoded(&[json!({"id": 1, "name": "x"})]);
        let err = unwrap_envelope(&batch, "op").unwrap_err();
        assert!(err.to_string().contains("no op field"), "{err}");
        let batch = decoded(&[event("c", json!(null), json!({"op": 1}))]);
        let err = unwrap_envelope(&batch, "op").unwrap_err();
        assert!(err.to_string().contains("has a field \"op\""), "{err}");
        let batch = decoded(&[json!({"op": "c", "before": null, "after": null})]);
        let err = unwrap_envelope(&batch, "op").unwrap_err();
        assert!(err.to_string().contains("neither before nor after"), "{err}");
        let batch = decoded(&[json!({"op": "c", "before": "x", "after": {"id": 1}})]);
        let err = unwrap_envelope(&batch, "op").unwrap_err();
        assert!(
            err.to_string().contains("before holds Utf8, not an object"),
            "{err}"
        );
    }
}
