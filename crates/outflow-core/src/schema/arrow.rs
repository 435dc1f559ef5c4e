//! Conversion between the schema model and Arrow schemas.
//!
//! Field ids travel in the Arrow field metadata key `PARQUET:field_id`, the key parquet-rs
//! and iceberg-rust use. Arrow's integer widths collapse onto Iceberg's (`int8` to `int32`
//! read as `int`, `uint32` as `long`); `uint64`, intervals, durations and unions have no
//! lossless counterpart and are rejected with the column named. Layouts are not types: a
//! dictionary or run-end encoded column reads as its values, a view or large variant as
//! the plain type, and every kind of list as a list; [`conform_batch`](super::conform_batch)
//! writes each of them.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType as ArrowType, Field as ArrowField, Fields, Schema as ArrowSchema, TimeUnit};

use super::{DataType, Field, LIST_ELEMENT, MAP_KEY, MAP_VALUE, MapFields, PrimitiveType, Schema, join_path};
use crate::{Error, ErrorKind, Result};

/// The Arrow metadata key that carries a field id.
pub const FIELD_ID_KEY: &str = "PARQUET:field_id";
/// The Arrow extension name that marks a string column as JSON.
pub const JSON_EXTENSION: &str = "arrow.json";
/// The Arrow extension name that marks a 16-byte fixed column as a UUID.
pub const UUID_EXTENSION: &str = "arrow.uuid";
const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";

impl Schema {
    /// Reads an Arrow schema; field ids come from `PARQUET:field_id` metadata when present.
    pub fn from_arrow(schema: &ArrowSchema) -> Result<Schema> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| field_from_arrow("", f))
            .collect::<Result<Vec<_>>>()?;
        Ok(Schema::new(fields))
    }

    /// The Arrow schema for this schema, with ids as `PARQUET:field_id` metadata.
    pub fn to_arrow(&self) -> ArrowSchema {
        ArrowSchema::new(self.fields.iter().map(field_to_arrow).collect::<Vec<_>>())
    }
}

fn unsupported(path: &str, t: &ArrowType) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("column {path}: Arrow type {t} has no table type"),
    )
    .with_context("column", path)
}

fn field_from_arrow(parent: &str, f: &ArrowField) -> Result<Field> {
    let path = join_path(parent, f.name());
    let id = match f.metadata().get(FIELD_ID_KEY) {
        Some(v) => Some(v.parse::<i32>().map_err(|_| {
            Error::invalid_input(format!("column {path}: field id {v:?} is not an integer"))
                .with_context("column", path.clone())
        })?),
        None => None,
    };
    let extension = f.metadata().get(EXTENSION_NAME_KEY).map(String::as_str);
    Ok(Field {
        id,
        name: f.name().clone(),
        required: !f.is_nullable(),
        data_type: type_from_arrow(&path, f.data_type(), extension)?,
        doc: None,
    })
}

fn type_from_arrow(path: &str, t: &ArrowType, extension: Option<&str>) -> Result<DataType> {
    use PrimitiveType as P;
    let p = |p: PrimitiveType| Ok(DataType::Primitive(p));
    match t {
        ArrowType::Boolean => p(P::Boolean),
        ArrowType::Int8 | ArrowType::Int16 | ArrowType::Int32 | ArrowType::UInt8 | ArrowType::UInt16 => {
            p(P::Int)
        }
        ArrowType::Int64 | ArrowType::UInt32 => p(P::Long),
        ArrowType::Float32 => p(P::Float),
        ArrowType::Float64 => p(P::Double),
        ArrowType::Decimal32(precision, scale)
        | ArrowType::Decimal64(precision, scale)
        | ArrowType::Decimal128(precision, scale)
        | ArrowType::Decimal256(precision, scale)
            if *scale >= 0 && *precision <= 76 =>
        {
            p(P::Decimal {
                precision: *precision,
                scale: *scale,
            })
        }
        ArrowType::Date32 | ArrowType::Date64 => p(P::Date),
        ArrowType::Time32(_) | ArrowType::Time64(_) => p(P::Time),
        ArrowType::Timestamp(TimeUnit::Nanosecond, None) => p(P::TimestampNs),
        ArrowType::Timestamp(TimeUnit::Nanosecond, Some(_)) => p(P::TimestampTzNs),
        ArrowType::Timestamp(_, None) => p(P::Timestamp),
        ArrowType::Timestamp(_, Some(_)) => p(P::TimestampTz),
        ArrowType::Utf8 | ArrowType::LargeUtf8 | ArrowType::Utf8View => {
            p(if extension == Some(JSON_EXTENSION) {
                P::Json
            } else {
                P::String
            })
        }
        ArrowType::Binary | ArrowType::LargeBinary | ArrowType::BinaryView => p(P::Binary),
        ArrowType::FixedSizeBinary(16) if extension == Some(UUID_EXTENSION) => p(P::Uuid),
        ArrowType::FixedSizeBinary(len) if *len >= 0 => p(P::Fixed(*len as u32)),
        ArrowType::Dictionary(_, value) => type_from_arrow(path, value, extension),
        ArrowType::RunEndEncoded(_, values) => type_from_arrow(path, values.data_type(), extension),
        ArrowType::List(element)
        | ArrowType::LargeList(element)
        | ArrowType::ListView(element)
        | ArrowType::LargeListView(element)
        | ArrowType::FixedSizeList(element, _) => {
            let element = field_from_arrow(path, element)?.renamed(LIST_ELEMENT);
            Ok(DataType::List {
                list: Box::new(element),
            })
        }
        ArrowType::Struct(fields) => Ok(DataType::Struct {
            fields: fields
                .iter()
                .map(|f| field_from_arrow(path, f))
                .collect::<Result<_>>()?,
        }),
        ArrowType::Map(entries, _) => {
            let ArrowType::Struct(kv) = entries.data_type() else {
                return Err(unsupported(path, t));
            };
            if kv.len() != 2 {
                return Err(unsupported(path, t));
            }
            let mut key = field_from_arrow(path, &kv[0])?.renamed(MAP_KEY);
            key.required = true;
            let value = field_from_arrow(path, &kv[1])?.renamed(MAP_VALUE);
            Ok(DataType::Map {
                map: Box::new(MapFields { key, value }),
            })
        }
        _ => Err(unsupported(path, t)),
    }
}

/// The Arrow field for a field of the model, with its id as metadata.
pub fn field_to_arrow(field: &Field) -> ArrowField {
    let mut metadata = HashMap::new();
    if let Some(id) = field.id {
        metadata.insert(FIELD_ID_KEY.to_string(), id.to_string());
    }
    match field.data_type {
        DataType::Primitive(PrimitiveType::Json) => {
            metadata.insert(EXTENSION_NAME_KEY.to_string(), JSON_EXTENSION.to_string());
        }
        DataType::Primitive(PrimitiveType::Uuid) => {
            metadata.insert(EXTENSION_NAME_KEY.to_string(), UUID_EXTENSION.to_string());
        }
        _ => {}
    }
    ArrowField::new(&field.name, type_to_arrow(&field.data_type), !field.required).with_metadata(metadata)
}

fn type_to_arrow(t: &DataType) -> ArrowType {
    use PrimitiveType as P;
    let utc = || Some(Arc::from("+00:00"));
    match t {
        DataType::Primitive(p) => match p {
            P::Boolean => ArrowType::Boolean,
            P::Int => ArrowType::Int32,
            P::Long => ArrowType::Int64,
            P::Float => ArrowType::Float32,
            P::Double => ArrowType::Float64,
            P::Decimal { precision, scale } if *precision <= 38 => ArrowType::Decimal128(*precision, *scale),
            P::Decimal { precision, scale } => ArrowType::Decimal256(*precision, *scale),
            P::Date => ArrowType::Date32,
            P::Time => ArrowType::Time64(TimeUnit::Microsecond),
            P::Timestamp => ArrowType::Timestamp(TimeUnit::Microsecond, None),
            P::TimestampTz => ArrowType::Timestamp(TimeUnit::Microsecond, utc()),
            P::TimestampNs => ArrowType::Timestamp(TimeUnit::Nanosecond, None),
            P::TimestampTzNs => ArrowType::Timestamp(TimeUnit::Nanosecond, utc()),
            P::String | P::Json => ArrowType::Utf8,
            P::Uuid => ArrowType::FixedSizeBinary(16),
            P::Fixed(len) => ArrowType::FixedSizeBinary(*len as i32),
            P::Binary => ArrowType::Binary,
        },
        DataType::Struct { fields } => {
            ArrowType::Struct(fields.iter().map(field_to_arrow).collect::<Fields>())
        }
        DataType::List { list } => ArrowType::List(Arc::new(field_to_arrow(list))),
        DataType::Map { map } => {
            let entries = ArrowField::new(
                "key_value",
                ArrowType::Struct(Fields::from(vec![
                    field_to_arrow(&map.key),
                    field_to_arrow(&map.value),
                ])),
                false,
            );
            ArrowType::Map(Arc::new(entries), false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_id(f: ArrowField, id: i32) -> ArrowField {
        f.with_metadata(HashMap::from([(FIELD_ID_KEY.to_string(), id.to_string())]))
    }

    #[test]
    fn reads_ids_nullability_and_nesting() {
        let arrow = ArrowSchema::new(vec![
            with_id(ArrowField::new("id", ArrowType::Int64, false), 1),
            with_id(
                ArrowField::new(
                    "tags",
                    ArrowType::List(Arc::new(with_id(
                        ArrowField::new("item", ArrowType::Utf8, true),
                        3,
                    ))),
                    true,
                ),
                2,
            ),
            ArrowField::new("amount", ArrowType::Decimal128(12, 2), true),
            ArrowField::new(
                "at",
                ArrowType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                true,
            ),
            ArrowField::new("small", ArrowType::Int16, false),
        ]);
        let schema = Schema::from_arrow(&arrow).unwrap();
        let id = schema.field("id").unwrap();
        assert_eq!((id.id, id.required), (Some(1), true));
        let element = schema.field_at("tags.element").unwrap();
        assert_eq!((element.id, element.required), (Some(3), false));
        assert_eq!(
            schema.field("amount").unwrap().data_type,
            PrimitiveType::Decimal {
                precision: 12,
                scale: 2
            }
            .into()
        );
        assert_eq!(
            schema.field("at").unwrap().data_type,
            PrimitiveType::TimestampTz.into()
        );
        assert_eq!(
            schema.field("small").unwrap().data_type,
            PrimitiveType::Int.into()
        );
    }

    #[test]
    fn round_trips_through_arrow() {
        let mut schema = Schema::new(vec![
            Field::required("id", PrimitiveType::Long),
            Field::optional("doc", PrimitiveType::Json),
            Field::optional("uid", PrimitiveType::Uuid),
            Field::optional(
                "big",
                PrimitiveType::Decimal {
                    precision: 76,
                    scale: 38,
                },
            ),
            Field::optional(
                "attrs",
                DataType::map(
                    Field::required("k", PrimitiveType::String),
                    Field::optional("v", DataType::list(Field::optional("e", PrimitiveType::Int))),
                ),
            ),
            Field::optional(
                "s",
                DataType::structure(vec![Field::required("x", PrimitiveType::Date)]),
            ),
        ]);
        schema.assign_missing_ids(0);
        assert_eq!(Schema::from_arrow(&schema.to_arrow()).unwrap(), schema);
    }

    #[test]
    fn encodings_and_list_layouts_read_as_their_values() {
        let item = || Arc::new(ArrowField::new("item", ArrowType::Utf8View, true));
        let runs = ArrowType::RunEndEncoded(
            Arc::new(ArrowField::new("run_ends", ArrowType::Int32, false)),
            Arc::new(ArrowField::new("values", ArrowType::Int64, true)),
        );
        let words = ArrowType::Dictionary(Box::new(ArrowType::Int8), Box::new(ArrowType::LargeUtf8));
        let arrow = ArrowSchema::new(vec![
            ArrowField::new("runs", runs, true),
            ArrowField::new("words", words, false),
            ArrowField::new("fixed", ArrowType::FixedSizeList(item(), 2), true),
            ArrowField::new("view", ArrowType::LargeListView(item()), true),
        ]);
        let schema = Schema::from_arrow(&arrow).unwrap();
        assert_eq!(
            schema.field("runs").unwrap().data_type,
            PrimitiveType::Long.into()
        );
        let words = schema.field("words").unwrap();
        assert_eq!(
            (&words.data_type, words.required),
            (&PrimitiveType::String.into(), true)
        );
        let strings = DataType::list(Field::optional(LIST_ELEMENT, PrimitiveType::String));
        assert_eq!(schema.field("fixed").unwrap().data_type, strings);
        assert_eq!(schema.field("view").unwrap().data_type, strings);
    }

    #[test]
    fn an_encoding_of_an_unsupported_type_names_the_column() {
        let dictionary = ArrowType::Dictionary(Box::new(ArrowType::Int8), Box::new(ArrowType::Float16));
        let element = ArrowField::new("item", dictionary, true);
        let arrow = ArrowSchema::new(vec![ArrowField::new(
            "l",
            ArrowType::ListView(Arc::new(element)),
            true,
        )]);
        let err = Schema::from_arrow(&arrow).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert_eq!(err.context_value("column"), Some("l.item"));
    }

    #[test]
    fn unsupported_type_names_the_column() {
        let arrow = ArrowSchema::new(vec![ArrowField::new(
            "s",
            ArrowType::Struct(Fields::from(vec![ArrowField::new("n", ArrowType::UInt64, true)])),
            true,
        )]);
        let err = Schema::from_arrow(&arrow).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert_eq!(err.context_value("column"), Some("s.n"));
    }
}
