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
    let built = IcebergSchema::builder()
        .with_schema_id(schema_id)
        .with_fields(fields)
        .build()
        .map_err(|e| {
            Error::internal(format!("building the Iceberg schema: {}", e.message())).with_source(e)
        })?;
    readable_when_stored(schema, &built)?;
    Ok(built)
}

/// Refuses a schema whose table metadata could not be read back. Readers parse the
/// metadata JSON with a nesting limit (iceberg-rust: serde_json's 128 levels, each
/// struct level taking three), so a table created or evolved with a deeper schema could
/// never be loaded again, by Outflow or by the next run. The check parses the schema at
/// the deepest place it travels: a REST catalog's load-table answer
/// (`{"metadata": {"schemas": [...]}}`), one level below the metadata file itself and as
/// deep as a commit request's `add-schema` update.
fn readable_when_stored(schema: &Schema, built: &IcebergSchema) -> Result<()> {
    let json = serde_json::to_string(built)
        .map_err(|e| Error::internal(format!("serializing the Iceberg schema: {e}")))?;
    let stored = format!("{{\"metadata\":{{\"schemas\":[{json}]}}}}");
    if serde_json::from_str::<serde_json::Value>(&stored).is_ok() {
        return Ok(());
    }
    let mut deepest = (0, String::new());
    schema.visit(|path, _, _| {
        let depth = outflow_core::schema::split_path(path).map_or(0, |names| names.len());
        if depth > deepest.0 {
            deepest = (depth, path.to_string());
        }
    });
    let (depth, path) = deepest;
    Err(Error::invalid_input(format!(
        "column {path} is nested {depth} levels deep, deeper than Iceberg table metadata can be \
         read back with (about 40 levels of structs); flatten the input or select fewer levels"
    ))
    .with_context("column", path))
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

    /// A column of structs nested `depth` levels (the leaf included), with ids.
    fn nested(depth: usize) -> Schema {
        let mut field = Field::optional("leaf", PrimitiveType::Long);
        for level in (1..depth).rev() {
            field = Field::optional(format!("s{level}"), DataType::structure(vec![field]));
        }
        let mut schema = Schema::new(vec![Field::required("id", PrimitiveType::Long), field]);
        schema.assign_missing_ids(0);
        schema
    }

    #[test]
    fn a_schema_too_deep_to_read_back_is_refused_naming_the_column() {
        assert!(to_iceberg_schema(&nested(30), 0).is_ok());
        let err = to_iceberg_schema(&nested(60), 0).unwrap_err();
        assert_eq!(err.kind(), outflow_core::ErrorKind::InvalidInput);
        let column = err.context_value("column").unwrap().to_string();
        assert!(
            column.starts_with("s1.s2.") && column.ends_with(".leaf"),
            "{column}"
        );
        assert!(err.to_string().contains("nested 60 levels deep"), "{err}");
        // The deepest schema accepted is one iceberg-rust loads back as table metadata.
        let deepest_ok = (30..60)
            .take_while(|&d| to_iceberg_schema(&nested(d), 0).is_ok())
            .last()
            .unwrap();
        let json = serde_json::to_string(&to_iceberg_schema(&nested(deepest_ok), 0).unwrap()).unwrap();
        let back: IcebergSchema = serde_json::from_str(&json).unwrap();
        assert_eq!(back.highest_field_id() as usize, deepest_ok + 1);
    }

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
