//! Rows as protobuf messages, the only row format BigQuery's change data capture takes.
//!
//! The message type is made at run time from the Arrow schema the rows are sent in (the
//! table's types, as [`crate::schema::types::arrow_field`] lays them out), following the
//! Storage Write API's protobuf mapping:
//!
//! | Arrow sent (BigQuery) | protobuf |
//! | --- | --- |
//! | Int64 (INT64) | int64 |
//! | Float64 (FLOAT64) | double |
//! | Boolean (BOOL) | bool |
//! | Utf8 (STRING, JSON, GEOGRAPHY) | string |
//! | Binary (BYTES) | bytes |
//! | Date32 (DATE) | int32, days since 1970-01-01 |
//! | Timestamp(µs, UTC) (TIMESTAMP) | int64, microseconds since the epoch |
//! | Timestamp(µs) (DATETIME) | string, `YYYY-MM-DD HH:MM:SS.ffffff` |
//! | Time64(µs) (TIME) | string, `HH:MM:SS.ffffff` |
//! | Decimal128, Decimal256 (NUMERIC, BIGNUMERIC) | string, the decimal's text |
//! | Struct (RECORD) | a nested message |
//! | List (REPEATED) | a repeated field |
//!
//! The descriptor sent is self-contained (nested messages are nested types, named
//! relative to the row type), as the API requires. A null value is a field left unset.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Decimal256Type, DecimalType, Float64Type, Int64Type, Time64MicrosecondType,
    TimestampMicrosecondType,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Fields, TimeUnit};
use gcloud_sdk::prost_types::field_descriptor_proto::{Label, Type};
use gcloud_sdk::prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto};
use outflow_core::schema::join_path;
use outflow_core::{Error, ErrorKind, Result};
use prost_reflect::prost::Message;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, ReflectMessage, Value,
};

/// The row type's name, in the descriptor sent.
const ROW: &str = "Row";

/// A string field every row also carries (the change pseudo-columns).
pub(crate) type ExtraColumn = &'static str;

/// A message type for rows of one Arrow schema.
#[derive(Clone, Debug)]
pub struct RowType {
    /// What the AppendRows request names as its writer schema.
    pub descriptor: DescriptorProto,
    message: MessageDescriptor,
    fields: Fields,
}

impl RowType {
    /// The type of rows of `fields`, plus a string field for each of `extra`.
    pub fn of(fields: &Fields, extra: &[ExtraColumn]) -> Result<RowType> {
        let mut descriptor = message(ROW, fields, "")?;
        for name in extra {
            let number = descriptor.field.len() as i32 + 1;
            descriptor
                .field
                .push(scalar(name, number, Type::String, Label::Optional));
        }
        let file = FileDescriptorProto {
            name: Some("outflow_row.proto".into()),
            package: Some("outflow".into()),
            message_type: vec![descriptor.clone()],
            ..Default::default()
        };
        let mut pool = DescriptorPool::new();
        pool.add_file_descriptor_proto(file)
            .map_err(|e| Error::internal(format!("the rows' protobuf type is not valid: {e}")))?;
        let message = pool
            .get_message_by_name(&format!("outflow.{ROW}"))
            .ok_or_else(|| Error::internal("the rows' protobuf type is missing from its pool"))?;
        Ok(RowType {
            descriptor,
            message,
            fields: fields.clone(),
        })
    }

    /// Row `row` of `batch` (whose columns are this type's fields, in order) as a message,
    /// with `extra` values for the extra fields, in the order [`RowType::of`] was given them.
    pub fn encode(&self, batch: &RecordBatch, row: usize, extra: &[(ExtraColumn, String)]) -> Vec<u8> {
        let mut message = DynamicMessage::new(self.message.clone());
        set_fields(&mut message, &self.fields, batch.columns(), row);
        for (name, value) in extra {
            message.set_field_by_name(name, Value::String(value.clone()));
        }
        message.encode_to_vec()
    }

    /// Decodes a row this type encoded (for tests and tools).
    pub fn decode(&self, bytes: &[u8]) -> Result<DynamicMessage> {
        DynamicMessage::decode(self.message.clone(), bytes)
            .map_err(|e| Error::invalid_input(format!("not a row of this type: {e}")))
    }
}

fn scalar(name: &str, number: i32, kind: Type, label: Label) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.to_string()),
        number: Some(number),
        label: Some(label as i32),
        r#type: Some(kind as i32),
        ..Default::default()
    }
}

/// A message type named `name` for `fields`; `path` names where it is, for errors.
fn message(name: &str, fields: &Fields, path: &str) -> Result<DescriptorProto> {
    let mut out = DescriptorProto {
        name: Some(name.to_string()),
        ..Default::default()
    };
    for (i, field) in fields.iter().enumerate() {
        let here = join_path(path, field.name());
        if !is_identifier(field.name()) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "column {here}: change data is sent as protobuf, whose field names are letters, \
                     digits and underscores, not starting with a digit"
                ),
            )
            .with_context("column", here));
        }
        let (item, label) = match field.data_type() {
            DataType::List(item) => (item.as_ref(), Label::Repeated),
            _ => (field.as_ref(), Label::Optional),
        };
        let number = i32::try_from(i + 1).unwrap_or(i32::MAX);
        let mut descriptor = match item.data_type() {
            DataType::Struct(children) => {
                let nested = format!("{}_{}", name, field.name());
                out.nested_type.push(message(&nested, children, &here)?);
                FieldDescriptorProto {
                    type_name: Some(nested),
                    ..scalar(field.name(), number, Type::Message, label)
                }
            }
            other => scalar(field.name(), number, proto_type(other, &here)?, label),
        };
        descriptor.label = Some(label as i32);
        out.field.push(descriptor);
    }
    Ok(out)
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn proto_type(data_type: &DataType, path: &str) -> Result<Type> {
    Ok(match data_type {
        DataType::Int64 => Type::Int64,
        DataType::Float64 => Type::Double,
        DataType::Boolean => Type::Bool,
        DataType::Utf8 => Type::String,
        DataType::Binary => Type::Bytes,
        DataType::Date32 => Type::Int32,
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => Type::Int64,
        DataType::Timestamp(TimeUnit::Microsecond, None) | DataType::Time64(TimeUnit::Microsecond) => {
            Type::String
        }
        DataType::Decimal128(..) | DataType::Decimal256(..) => Type::String,
        other => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("column {path}: {other} has no protobuf form for BigQuery"),
            )
            .with_context("column", path.to_string()));
        }
    })
}

fn set_fields(message: &mut DynamicMessage, fields: &Fields, columns: &[ArrayRef], row: usize) {
    let descriptor = message.descriptor();
    for (field, column) in fields.iter().zip(columns) {
        let Some(field_desc) = descriptor.get_field_by_name(field.name()) else {
            continue;
        };
        if let Some(value) = value_of(&field_desc, column.as_ref(), row) {
            message.set_field(&field_desc, value);
        }
    }
}

/// The value at `row` of `array`, for field `field_desc`; `None` when null.
fn value_of(field_desc: &FieldDescriptor, array: &dyn Array, row: usize) -> Option<Value> {
    if array.is_null(row) {
        return None;
    }
    Some(match array.data_type() {
        DataType::List(_) => {
            let list = array.as_list::<i32>().value(row);
            Value::List(
                (0..list.len())
                    .filter_map(|i| value_of(field_desc, list.as_ref(), i))
                    .collect(),
            )
        }
        DataType::Struct(children) => {
            let Kind::Message(nested) = field_desc.kind() else {
                return None;
            };
            let mut message = DynamicMessage::new(nested);
            set_fields(&mut message, children, array.as_struct().columns(), row);
            Value::Message(message)
        }
        DataType::Int64 => Value::I64(array.as_primitive::<Int64Type>().value(row)),
        DataType::Float64 => Value::F64(array.as_primitive::<Float64Type>().value(row)),
        DataType::Boolean => Value::Bool(array.as_boolean().value(row)),
        DataType::Utf8 => Value::String(array.as_string::<i32>().value(row).to_string()),
        DataType::Binary => Value::Bytes(bytes::Bytes::copy_from_slice(array.as_binary::<i32>().value(row))),
        DataType::Date32 => Value::I32(array.as_primitive::<Date32Type>().value(row)),
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => {
            Value::I64(array.as_primitive::<TimestampMicrosecondType>().value(row))
        }
        DataType::Timestamp(TimeUnit::Microsecond, None) => {
            let micros = array.as_primitive::<TimestampMicrosecondType>().value(row);
            let at = chrono::DateTime::from_timestamp_micros(micros)?.naive_utc();
            Value::String(at.format("%Y-%m-%d %H:%M:%S%.6f").to_string())
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            let micros = array.as_primitive::<Time64MicrosecondType>().value(row);
            let seconds = u32::try_from(micros.div_euclid(1_000_000)).ok()?;
            let nanos = u32::try_from(micros.rem_euclid(1_000_000) * 1000).ok()?;
            let time = chrono::NaiveTime::from_num_seconds_from_midnight_opt(seconds, nanos)?;
            Value::String(time.format("%H:%M:%S%.6f").to_string())
        }
        DataType::Decimal128(precision, scale) => Value::String(Decimal128Type::format_decimal(
            array.as_primitive::<Decimal128Type>().value(row),
            *precision,
            *scale,
        )),
        DataType::Decimal256(precision, scale) => Value::String(Decimal256Type::format_decimal(
            array.as_primitive::<Decimal256Type>().value(row),
            *precision,
            *scale,
        )),
        // The row type refused every other type.
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{Int64Builder, ListBuilder};
    use arrow_array::{
        BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int64Array, StringArray,
        StructArray, Time64MicrosecondArray, TimestampMicrosecondArray,
    };
    use arrow_schema::{Field, Schema};

    use super::*;

    /// Every type the table's columns are sent as, one row of values and one of nulls,
    /// decoded back: what the table above says each becomes.
    #[test]
    fn every_column_type_has_its_protobuf_form_and_nulls_stay_unset() {
        let mut list =
            ListBuilder::new(Int64Builder::new()).with_field(Field::new("item", DataType::Int64, false));
        list.values().append_value(7);
        list.values().append_value(8);
        list.append(true);
        list.append(false);
        let address = StructArray::try_new(
            Fields::from(vec![Field::new("city", DataType::Utf8, true)]),
            vec![Arc::new(StringArray::from(vec![Some("Oslo"), Some("Bergen")])) as ArrayRef],
            Some(arrow_buffer::NullBuffer::from(vec![true, false])),
        )
        .unwrap();
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("i", Arc::new(Int64Array::from(vec![Some(-5), None]))),
            ("f", Arc::new(Float64Array::from(vec![Some(1.5), None]))),
            ("b", Arc::new(BooleanArray::from(vec![Some(true), None]))),
            ("s", Arc::new(StringArray::from(vec![Some("héllo"), None]))),
            (
                "y",
                Arc::new(BinaryArray::from(vec![Some(&b"\x00\x01"[..]), None])),
            ),
            ("d", Arc::new(Date32Array::from(vec![Some(19_000), None]))),
            (
                "ts",
                Arc::new(
                    TimestampMicrosecondArray::from(vec![Some(1_700_000_000_000_001), None])
                        .with_timezone("UTC"),
                ),
            ),
            (
                "dt",
                Arc::new(TimestampMicrosecondArray::from(vec![
                    Some(1_700_000_000_000_001),
                    None,
                ])),
            ),
            (
                "t",
                Arc::new(Time64MicrosecondArray::from(vec![Some(3_723_000_004), None])),
            ),
            (
                "n",
                Arc::new(
                    Decimal128Array::from(vec![Some(-12_345_000_000_000), None])
                        .with_precision_and_scale(38, 9)
                        .unwrap(),
                ),
            ),
            ("l", Arc::new(list.finish())),
            ("a", Arc::new(address)),
        ];
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let row_type = RowType::of(batch.schema().fields(), &["_CHANGE_TYPE"]).unwrap();
        let kinds: Vec<(String, i32, i32)> = row_type
            .descriptor
            .field
            .iter()
            .map(|f| (f.name().to_string(), f.r#type.unwrap(), f.label.unwrap()))
            .collect();
        let optional = Label::Optional as i32;
        assert_eq!(
            kinds,
            [
                ("i".to_string(), Type::Int64 as i32, optional),
                ("f".into(), Type::Double as i32, optional),
                ("b".into(), Type::Bool as i32, optional),
                ("s".into(), Type::String as i32, optional),
                ("y".into(), Type::Bytes as i32, optional),
                ("d".into(), Type::Int32 as i32, optional),
                ("ts".into(), Type::Int64 as i32, optional),
                ("dt".into(), Type::String as i32, optional),
                ("t".into(), Type::String as i32, optional),
                ("n".into(), Type::String as i32, optional),
                ("l".into(), Type::Int64 as i32, Label::Repeated as i32),
                ("a".into(), Type::Message as i32, optional),
                ("_CHANGE_TYPE".into(), Type::String as i32, optional),
            ]
        );
        assert_eq!(row_type.descriptor.field[11].type_name(), "Row_a");
        assert_eq!(row_type.descriptor.nested_type[0].name(), "Row_a");

        let full = row_type
            .decode(&row_type.encode(&batch, 0, &[("_CHANGE_TYPE", "UPSERT".into())]))
            .unwrap();
        let field = |name: &str| full.get_field_by_name(name).unwrap().into_owned();
        assert_eq!(field("i"), Value::I64(-5));
        assert_eq!(field("f"), Value::F64(1.5));
        assert_eq!(field("b"), Value::Bool(true));
        assert_eq!(field("s"), Value::String("héllo".into()));
        assert_eq!(field("y"), Value::Bytes(bytes::Bytes::from_static(b"\x00\x01")));
        assert_eq!(field("d"), Value::I32(19_000));
        assert_eq!(field("ts"), Value::I64(1_700_000_000_000_001));
        assert_eq!(field("dt"), Value::String("2023-11-14 22:13:20.000001".into()));
        assert_eq!(field("t"), Value::String("01:02:03.000004".into()));
        assert_eq!(field("n"), Value::String("-12345.000000000".into()));
        assert_eq!(field("l"), Value::List(vec![Value::I64(7), Value::I64(8)]));
        let Value::Message(a) = field("a") else {
            panic!("a RECORD is a message")
        };
        assert_eq!(a.get_field_by_name("city").unwrap().as_str(), Some("Oslo"));
        assert_eq!(field("_CHANGE_TYPE"), Value::String("UPSERT".into()));

        let empty = row_type.decode(&row_type.encode(&batch, 1, &[])).unwrap();
        let set: Vec<String> = empty.fields().map(|(f, _)| f.name().to_string()).collect();
        assert!(set.is_empty(), "nulls are unset fields: {set:?}");
    }

    #[test]
    fn a_column_name_protobuf_cannot_carry_is_named() {
        let fields = Fields::from(vec![Field::new("order-id", DataType::Int64, false)]);
        let err = RowType::of(&fields, &[]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert_eq!(err.context_value("column"), Some("order-id"), "{err}");
        let schema = Schema::new(vec![Field::new("x", DataType::UInt8, true)]);
        let err = RowType::of(schema.fields(), &[]).unwrap_err();
        assert_eq!(err.context_value("column"), Some("x"), "{err}");
    }
}
