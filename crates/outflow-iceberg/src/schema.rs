//! Conversions between Outflow's schema model and iceberg-rust's, and table identifiers.

use std::sync::Arc;

use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType as IcebergPrimitive,
    Schema as IcebergSchema, StructType, Type,
};
use iceberg::{NamespaceIdent, TableIdent};
use outflow_core::schema::{DataType, Field, MapFields, PrimitiveType, Schema};
use outflow_core::{Error, Result};

/// Parses `ns.table` (or `a.b.table` for a nested namespace) into an identifier.
pub fn parse_table_ident(name: &str) -> Result<TableIdent> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() < 2 || parts.iter().any(|p| p.trim().is_empty()) {
        return Err(Error::invalid_config(
            "table",
            format!("{name:?} is not a table name of the form namespace.table"),
        ));
    }
    let (table, namespace) = parts.split_last().expect("two parts at least");
    let namespace = NamespaceIdent::from_strs(namespace.iter().copied())
        .map_err(|e| Error::invalid_config("table", format!("{name:?}: {}", e.message())))?;
    Ok(TableIdent::new(namespace, table.to_string()))
}

/// Prints an identifier as `ns.table`.
pub fn table_name(ident: &TableIdent) -> String {
    format!("{}.{}", ident.namespace().join("."), ident.name())
}

/// Outflow's schema as an Iceberg schema. Every field must have an id.
pub fn to_iceberg_schema(schema: &Schema, schema_id: i32) -> Result<IcebergSchema> {
    let fields = schema
        .fields
        .iter()
        .map(to_iceberg_field)
        .collect::<Result<Vec<_>>>()?;
    IcebergSchema::builder()
        .with_schema_id(schema_id)
        .with_fields(fields)
        .build()
        .map_err(|e| Error::internal(format!("building the Iceberg schema: {}", e.message())).with_source(e))
}

fn to_iceberg_field(field: &Field) -> Result<NestedFieldRef> {
    let id = field
        .id
        .ok_or_else(|| Error::internal(format!("field {} has no id", field.name)))?;
    let mut out = NestedField::new(
        id,
        &field.name,
        to_iceberg_type(&field.data_type)?,
        field.required,
    );
    if let Some(doc) = &field.doc {
        out = out.with_doc(doc);
    }
    Ok(Arc::new(out))
}

fn to_iceberg_type(t: &DataType) -> Result<Type> {
    Ok(match t {
        DataType::Primitive(p) => Type::Primitive(to_iceberg_primitive(*p)?),
        DataType::Struct { fields } => Type::Struct(StructType::new(
            fields.iter().map(to_iceberg_field).collect::<Result<_>>()?,
        )),
        DataType::List { list } => Type::List(ListType::new(to_iceberg_field(list)?)),
        DataType::Map { map } => Type::Map(MapType::new(
            to_iceberg_field(&map.key)?,
            to_iceberg_field(&map.value)?,
        )),
    })
}

fn to_iceberg_primitive(p: PrimitiveType) -> Result<IcebergPrimitive> {
    use PrimitiveType as P;
    Ok(match p {
        P::Boolean => IcebergPrimitive::Boolean,
        P::Int => IcebergPrimitive::Int,
        P::Long => IcebergPrimitive::Long,
        P::Float => IcebergPrimitive::Float,
        P::Double => IcebergPrimitive::Double,
        P::Decimal { precision, scale } if precision <= 38 && scale >= 0 => IcebergPrimitive::Decimal {
            precision: precision as u32,
            scale: scale as u32,
        },
        P::Decimal { precision, scale } => {
            return Err(Error::new(
                outflow_core::ErrorKind::Unsupported,
                format!("decimal({precision},{scale}) does not fit Iceberg's decimals (precision up to 38)"),
            ));
        }
        P::Date => IcebergPrimitive::Date,
        P::Time => IcebergPrimitive::Time,
        P::Timestamp => IcebergPrimitive::Timestamp,
        P::TimestampTz => IcebergPrimitive::Timestamptz,
        P::TimestampNs => IcebergPrimitive::TimestampNs,
        P::TimestampTzNs => IcebergPrimitive::TimestamptzNs,
        // Iceberg has no JSON type before v3's variant; JSON text is kept as a string.
        P::String | P::Json => IcebergPrimitive::String,
        P::Uuid => IcebergPrimitive::Uuid,
        P::Fixed(len) => IcebergPrimitive::Fixed(len as u64),
        P::Binary => IcebergPrimitive::Binary,
    })
}

/// An Iceberg schema in Outflow's model, ids included.
pub fn from_iceberg_schema(schema: &IcebergSchema) -> Schema {
    Schema::new(
        schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| from_iceberg_field(f))
            .collect(),
    )
}

fn from_iceberg_field(field: &NestedField) -> Field {
    Field {
        id: Some(field.id),
        name: field.name.clone(),
        required: field.required,
        data_type: from_iceberg_type(&field.field_type),
        doc: field.doc.clone(),
    }
}

fn from_iceberg_type(t: &Type) -> DataType {
    match t {
        Type::Primitive(p) => DataType::Primitive(from_iceberg_primitive(p)),
        Type::Struct(s) => DataType::Struct {
            fields: s.fields().iter().map(|f| from_iceberg_field(f)).collect(),
        },
        Type::List(l) => DataType::List {
            list: Box::new(from_iceberg_field(&l.element_field)),
        },
        Type::Map(m) => DataType::Map {
            map: Box::new(MapFields {
                key: from_iceberg_field(&m.key_field),
                value: from_iceberg_field(&m.value_field),
            }),
        },
    }
}

fn from_iceberg_primitive(p: &IcebergPrimitive) -> PrimitiveType {
    use IcebergPrimitive as I;
    match p {
        I::Boolean => PrimitiveType::Boolean,
        I::Int => PrimitiveType::Int,
        I::Long => PrimitiveType::Long,
        I::Float => PrimitiveType::Float,
        I::Double => PrimitiveType::Double,
        I::Decimal { precision, scale } => PrimitiveType::Decimal {
            precision: *precision as u8,
            scale: *scale as i8,
        },
        I::Date => PrimitiveType::Date,
        I::Time => PrimitiveType::Time,
        I::Timestamp => PrimitiveType::Timestamp,
        I::Timestamptz => PrimitiveType::TimestampTz,
        I::TimestampNs => PrimitiveType::TimestampNs,
        I::TimestamptzNs => PrimitiveType::TimestampTzNs,
        I::String => PrimitiveType::String,
        I::Uuid => PrimitiveType::Uuid,
        I::Fixed(len) => PrimitiveType::Fixed(*len as u32),
        I::Binary => PrimitiveType::Binary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_parse_and_print() {
        let ident = parse_table_ident("db.events").unwrap();
        assert_eq!(ident.namespace().join("."), "db");
        assert_eq!(table_name(&ident), "db.events");
        assert_eq!(table_name(&parse_table_ident("a.b.t").unwrap()), "a.b.t");
        for bad in ["events", "db.", ".t", "", "a..t"] {
            let err = parse_table_ident(bad).unwrap_err();
            assert_eq!(err.context_value("field"), Some("table"), "{bad:?}");
        }
    }

    #[test]
    fn schemas_round_trip() {
        let mut schema = Schema::new(vec![
            Field::required("id", PrimitiveType::Long).with_doc("row id"),
            Field::optional(
                "amount",
                PrimitiveType::Decimal {
                    precision: 12,
                    scale: 2,
                },
            ),
            Field::optional("at", PrimitiveType::TimestampTz),
            Field::optional("uid", PrimitiveType::Uuid),
            Field::optional(
                "tags",
                DataType::list(Field::optional("element", PrimitiveType::String)),
            ),
            Field::optional(
                "attrs",
                DataType::map(
                    Field::required("key", PrimitiveType::String),
                    Field::optional(
                        "value",
                        DataType::structure(vec![Field::required("n", PrimitiveType::Int)]),
                    ),
                ),
            ),
            Field::optional("blob", PrimitiveType::Fixed(4)),
        ]);
        schema.assign_missing_ids(0);
        let iceberg = to_iceberg_schema(&schema, 3).unwrap();
        assert_eq!(iceberg.schema_id(), 3);
        assert_eq!(from_iceberg_schema(&iceberg), schema);
    }

    #[test]
    fn wide_decimals_are_refused() {
        let mut schema = Schema::new(vec![Field::optional(
            "d",
            PrimitiveType::Decimal {
                precision: 76,
                scale: 38,
            },
        )]);
        schema.assign_missing_ids(0);
        assert!(
            to_iceberg_schema(&schema, 0)
                .unwrap_err()
                .to_string()
                .contains("decimal(76,38)")
        );
    }
}
