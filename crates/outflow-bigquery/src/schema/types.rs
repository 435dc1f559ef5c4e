//! The type mapping, pure: BigQuery columns to the Arrow types the Storage Write API takes,
//! BigQuery columns to the shared schema model the evolution planner works on, and Arrow
//! input types to BigQuery columns. `docs/bigquery.md` shows it as a table.
//!
//! | BigQuery | Arrow sent | Arrow accepted from input | planner type |
//! | --- | --- | --- | --- |
//! | INT64 | Int64 | Int8/16/32/64, UInt8/16/32 | long |
//! | FLOAT64 | Float64 | Float32/64 | double |
//! | NUMERIC | Decimal128(38, 9) | decimals with at most 9 fraction and 29 integer digits | decimal(38,9) |
//! | BIGNUMERIC | Decimal256(76, 38) | decimals with at most 38 and 38 | decimal(76,38) |
//! | BOOL | Boolean | Boolean | boolean |
//! | STRING | Utf8 | Utf8, LargeUtf8, Utf8View, JSON text, UUID (as text) | string |
//! | BYTES | Binary | Binary, LargeBinary, BinaryView, FixedSizeBinary | binary |
//! | DATE | Date32 | Date32, Date64 | date |
//! | TIME | Time64(µs) | Time32, Time64 | time |
//! | DATETIME | Timestamp(µs) | Timestamp without zone, any unit | timestamp |
//! | TIMESTAMP | Timestamp(µs, UTC) | Timestamp with a zone, any unit | timestamptz |
//! | JSON | Utf8 | Utf8 (with or without the `arrow.json` extension) | json |
//! | RECORD | Struct | Struct | struct |
//! | REPEATED x | List(x, non-null) | List, LargeList; Map as REPEATED RECORD(key, value) | list |
//!
//! Nanosecond values are truncated to microseconds. A REPEATED column is a list whose
//! element is optional in the planner's model, since BigQuery has no mode for it: rows
//! with null elements are refused before planning, and a null list is written as empty.

use std::sync::Arc;

use arrow_schema::{DataType as ArrowType, Field as ArrowField, Fields, Schema as ArrowSchema, TimeUnit};
use google_cloud_bigquery_v2::model as bq;
use outflow_core::schema::{DataType, Field, InputSchema, LIST_ELEMENT, PrimitiveType, Schema, join_path};
use outflow_core::{Error, ErrorKind, Result};

use crate::schema::{FieldMode, FieldType, TableField, TableSchema};

/// NUMERIC's fixed precision and scale.
pub const NUMERIC: (u8, i8) = (38, 9);
/// BIGNUMERIC's fixed precision and scale.
pub const BIGNUMERIC: (u8, i8) = (76, 38);
/// The zone of TIMESTAMP values sent to BigQuery.
pub const UTC: &str = "UTC";

fn unsupported(path: &str, message: String) -> Error {
    Error::new(ErrorKind::Unsupported, format!("column {path}: {message}"))
        .with_context("column", path.to_string())
}

/// The Arrow type BigQuery expects for a column of `field_type`; `None` for RECORD, whose
/// type is made of its fields.
pub fn arrow_type(field_type: &FieldType) -> Option<std::result::Result<ArrowType, String>> {
    Some(Ok(match field_type {
        FieldType::Int64 => ArrowType::Int64,
        FieldType::Float64 => ArrowType::Float64,
        FieldType::Numeric => ArrowType::Decimal128(NUMERIC.0, NUMERIC.1),
        FieldType::BigNumeric => ArrowType::Decimal256(BIGNUMERIC.0, BIGNUMERIC.1),
        FieldType::Bool => ArrowType::Boolean,
        FieldType::String | FieldType::Json | FieldType::Geography => ArrowType::Utf8,
        FieldType::Bytes => ArrowType::Binary,
        FieldType::Date => ArrowType::Date32,
        FieldType::Time => ArrowType::Time64(TimeUnit::Microsecond),
        FieldType::Datetime => ArrowType::Timestamp(TimeUnit::Microsecond, None),
        FieldType::Timestamp => ArrowType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        FieldType::Record => return None,
        FieldType::Other(name) => {
            return Some(Err(format!("BigQuery type {name} is not supported by Outflow")));
        }
    }))
}

/// How list nullability is declared in an Arrow field built from a table column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListNulls {
    /// What BigQuery is sent: REPEATED columns are non-null lists of non-null elements.
    Forbidden,
    /// For conforming input first: null lists are allowed (they become empty afterwards).
    Allowed,
}

/// The Arrow field for a table column.
pub fn arrow_field(field: &TableField, path: &str, lists: ListNulls) -> Result<ArrowField> {
    let item = match arrow_type(&field.field_type) {
        Some(t) => t.map_err(|m| unsupported(path, m))?,
        None => ArrowType::Struct(
            field
                .fields
                .iter()
                .map(|f| arrow_field(f, &join_path(path, &f.name), lists))
                .collect::<Result<Fields>>()?,
        ),
    };
    Ok(with_mode(&field.name, item, field.mode, lists))
}

/// A field of `item` type laid out for `mode`: REPEATED is a list of non-null items.
fn with_mode(name: &str, item: ArrowType, mode: FieldMode, lists: ListNulls) -> ArrowField {
    match mode {
        FieldMode::Nullable => ArrowField::new(name, item, true),
        FieldMode::Required => ArrowField::new(name, item, false),
        FieldMode::Repeated => ArrowField::new(
            name,
            ArrowType::List(Arc::new(ArrowField::new("item", item, false))),
            lists == ListNulls::Allowed,
        ),
    }
}

/// The Arrow schema BigQuery is sent for `input`'s columns: the table's columns that the
/// input has (by name, at every RECORD level), with the table's types. Columns are matched
/// by exact name: align names first ([`crate::request::align_names`]).
pub fn target_schema(table: &TableSchema, input: &ArrowSchema, lists: ListNulls) -> Result<ArrowSchema> {
    let fields = project(&table.fields, input.fields(), "", lists)?;
    Ok(ArrowSchema::new(fields))
}

fn project(table: &[TableField], input: &Fields, prefix: &str, lists: ListNulls) -> Result<Vec<ArrowField>> {
    let mut out = Vec::new();
    for column in table {
        let Some(given) = input.iter().find(|f| f.name() == &column.name) else {
            continue;
        };
        let path = join_path(prefix, &column.name);
        let children = match (given.data_type(), column.field_type == FieldType::Record) {
            (ArrowType::Struct(children), true) => Some(children.clone()),
            (ArrowType::List(e) | ArrowType::LargeList(e), true) => match e.data_type() {
                ArrowType::Struct(children) => Some(children.clone()),
                _ => None,
            },
            _ => None,
        };
        let field = match children {
            Some(children) => {
                let kept = project(&column.fields, &children, &path, lists)?;
                if kept.is_empty() {
                    // An empty struct cannot be sent; a RECORD whose fields the input all
                    // lacks is sent whole, as nulls.
                    arrow_field(column, &path, lists)?
                } else {
                    with_mode(
                        &column.name,
                        ArrowType::Struct(Fields::from(kept)),
                        column.mode,
                        lists,
                    )
                }
            }
            None => arrow_field(column, &path, lists)?,
        };
        out.push(field);
    }
    Ok(out)
}

/// The planner's view of a table schema.
pub fn to_core(schema: &TableSchema) -> Schema {
    Schema::new(schema.fields.iter().map(core_field).collect())
}

fn core_field(field: &TableField) -> Field {
    let item: DataType = match field.field_type {
        FieldType::Record => DataType::structure(field.fields.iter().map(core_field).collect()),
        ref t => core_primitive(t, field.precision, field.scale).into(),
    };
    match field.mode {
        FieldMode::Nullable => Field::optional(&field.name, item),
        FieldMode::Required => Field::required(&field.name, item),
        FieldMode::Repeated => {
            Field::optional(&field.name, DataType::list(Field::optional(LIST_ELEMENT, item)))
        }
    }
}

fn core_primitive(t: &FieldType, precision: Option<u32>, scale: Option<u32>) -> PrimitiveType {
    let decimal = |default: (u8, i8)| match precision {
        Some(p) => PrimitiveType::Decimal {
            precision: p as u8,
            scale: scale.unwrap_or(0) as i8,
        },
        None => PrimitiveType::Decimal {
            precision: default.0,
            scale: default.1,
        },
    };
    match t {
        FieldType::Int64 => PrimitiveType::Long,
        FieldType::Float64 => PrimitiveType::Double,
        FieldType::Numeric => decimal(NUMERIC),
        FieldType::BigNumeric => decimal(BIGNUMERIC),
        FieldType::Bool => PrimitiveType::Boolean,
        FieldType::Bytes => PrimitiveType::Binary,
        FieldType::Date => PrimitiveType::Date,
        FieldType::Time => PrimitiveType::Time,
        FieldType::Datetime => PrimitiveType::Timestamp,
        FieldType::Timestamp => PrimitiveType::TimestampTz,
        FieldType::Json => PrimitiveType::Json,
        // Text-like columns the planner can compare as strings.
        FieldType::String | FieldType::Geography | FieldType::Other(_) | FieldType::Record => {
            PrimitiveType::String
        }
    }
}

/// The BigQuery type a new column of primitive type `p` gets.
fn bigquery_primitive(p: PrimitiveType) -> std::result::Result<FieldType, String> {
    Ok(match p {
        PrimitiveType::Boolean => FieldType::Bool,
        PrimitiveType::Int | PrimitiveType::Long => FieldType::Int64,
        PrimitiveType::Float | PrimitiveType::Double => FieldType::Float64,
        PrimitiveType::Decimal { precision, scale } => match canonical_decimal(precision, scale) {
            Some(NUMERIC) => FieldType::Numeric,
            Some(_) => FieldType::BigNumeric,
            None => {
                return Err(format!(
                    "decimal({precision},{scale}) fits neither NUMERIC nor BIGNUMERIC"
                ));
            }
        },
        PrimitiveType::Date => FieldType::Date,
        PrimitiveType::Time => FieldType::Time,
        PrimitiveType::Timestamp | PrimitiveType::TimestampNs => FieldType::Datetime,
        PrimitiveType::TimestampTz | PrimitiveType::TimestampTzNs => FieldType::Timestamp,
        PrimitiveType::String | PrimitiveType::Uuid => FieldType::String,
        PrimitiveType::Json => FieldType::Json,
        PrimitiveType::Binary | PrimitiveType::Fixed(_) => FieldType::Bytes,
    })
}

/// NUMERIC when the decimal fits it (at most 9 fraction and 29 integer digits), else
/// BIGNUMERIC when it fits that (38 and 38), else nothing.
fn canonical_decimal(precision: u8, scale: i8) -> Option<(u8, i8)> {
    let integer_digits = i16::from(precision) - i16::from(scale);
    if scale < 0 {
        None
    } else if scale <= NUMERIC.1 && integer_digits <= i16::from(NUMERIC.0) - i16::from(NUMERIC.1) {
        Some(NUMERIC)
    } else if scale <= BIGNUMERIC.1 && integer_digits <= i16::from(BIGNUMERIC.0) - i16::from(BIGNUMERIC.1) {
        Some(BIGNUMERIC)
    } else {
        None
    }
}

/// The BigQuery column for a field the planner adds (always NULLABLE or REPEATED, as
/// BigQuery adds columns).
pub fn field_from_core(field: &Field, path: &str) -> Result<TableField> {
    let (item, mode) = match &field.data_type {
        DataType::List { list } => {
            if list.data_type.is_container() {
                return Err(unsupported(path, "BigQuery has no arrays of arrays".into()));
            }
            (list.as_ref(), FieldMode::Repeated)
        }
        DataType::Map { .. } => {
            return Err(unsupported(
                path,
                "maps are written as REPEATED RECORD(key, value)".into(),
            ));
        }
        _ if field.required => (field, FieldMode::Required),
        _ => (field, FieldMode::Nullable),
    };
    let column = match &item.data_type {
        DataType::Struct { fields } => TableField::record(
            &field.name,
            fields
                .iter()
                .map(|f| field_from_core(f, &join_path(path, &f.name)))
                .collect::<Result<_>>()?,
        ),
        DataType::Primitive(p) => TableField::new(
            &field.name,
            bigquery_primitive(*p).map_err(|m| unsupported(path, m))?,
        ),
        other => {
            return Err(unsupported(
                path,
                format!("{} cannot be a BigQuery column", other.kind()),
            ));
        }
    };
    Ok(column.with_mode(mode))
}

/// Prepares an input for the planner against a BigQuery table (or for creating one): where
/// the table has the column and the input's type converts to it without loss (INT32 into
/// INT64, decimal(10,2) into NUMERIC, nanoseconds into microseconds, text into JSON...), the
/// input takes the table's type; columns the table lacks take the type BigQuery would give
/// them. Whatever else differs is left for the planner to call a conflict. Columns are
/// matched by exact name: align names first.
pub fn planning_input(input: &InputSchema, table: Option<&Schema>) -> Result<InputSchema> {
    let table_fields = table.map(|t| t.fields.as_slice()).unwrap_or(&[]);
    let fields = input
        .schema
        .fields
        .iter()
        .map(|f| {
            let peer = table_fields.iter().find(|t| t.name == f.name);
            adapt(f, peer, &f.name)
        })
        .collect::<Result<_>>()?;
    Ok(InputSchema {
        schema: Schema::new(fields),
        null_counts: input.null_counts.clone(),
    })
}

fn adapt(input: &Field, table: Option<&Field>, path: &str) -> Result<Field> {
    let data_type = match (&input.data_type, table.map(|t| &t.data_type)) {
        (DataType::Primitive(i), Some(DataType::Primitive(t))) => match lossless(*i, *t) {
            Some(t) => DataType::Primitive(t),
            None => DataType::Primitive(*i),
        },
        (DataType::Primitive(i), _) => {
            let canonical = match bigquery_primitive(*i).map_err(|m| unsupported(path, m))? {
                FieldType::Numeric => PrimitiveType::Decimal {
                    precision: NUMERIC.0,
                    scale: NUMERIC.1,
                },
                FieldType::BigNumeric => PrimitiveType::Decimal {
                    precision: BIGNUMERIC.0,
                    scale: BIGNUMERIC.1,
                },
                t => core_primitive(&t, None, None),
            };
            match table {
                // The table has another kind of column here: leave it to the planner.
                Some(_) => DataType::Primitive(*i),
                None => DataType::Primitive(canonical),
            }
        }
        (DataType::Struct { fields }, peer) => {
            let peers = match peer {
                Some(DataType::Struct { fields }) => fields.as_slice(),
                _ => &[],
            };
            DataType::Struct {
                fields: fields
                    .iter()
                    .map(|f| {
                        adapt(
                            f,
                            peers.iter().find(|p| p.name == f.name),
                            &join_path(path, &f.name),
                        )
                    })
                    .collect::<Result<_>>()?,
            }
        }
        (DataType::List { list }, peer) => {
            if list.data_type.is_container() {
                return Err(unsupported(path, "BigQuery has no arrays of arrays".into()));
            }
            let element_peer = match peer {
                Some(DataType::List { list }) => Some(list.as_ref()),
                _ => None,
            };
            DataType::List {
                list: Box::new(adapt(list, element_peer, &join_path(path, LIST_ELEMENT))?),
            }
        }
        (DataType::Map { .. }, _) => {
            return Err(Error::internal(format!(
                "column {path}: maps must be reshaped into REPEATED RECORDs before planning"
            )));
        }
    };
    Ok(Field {
        data_type,
        ..input.clone()
    })
}

/// The table's type, when a value of the input's type converts to it without loss.
fn lossless(input: PrimitiveType, table: PrimitiveType) -> Option<PrimitiveType> {
    use PrimitiveType::*;
    let fits = match (input, table) {
        (i, t) if i == t => true,
        (Int, Long) | (Float, Double) => true,
        (
            Decimal {
                precision: p,
                scale: s,
            },
            Decimal {
                precision: tp,
                scale: ts,
            },
        ) => s <= ts && i16::from(p) - i16::from(s) <= i16::from(tp) - i16::from(ts),
        (TimestampNs, Timestamp) | (TimestampTzNs, TimestampTz) => true,
        (String | Json | Uuid, String) | (String, Json) => true,
        (Fixed(_) | Uuid, Binary) => true,
        _ => false,
    };
    fits.then_some(table)
}

/// The table's columns after the plan: each existing column as the service returned it
/// (descriptions, policy tags and every other attribute kept), made NULLABLE where the plan
/// relaxed it, with nested additions appended to their RECORD, and new columns appended at
/// the end. This is the body of tables.patch, which replaces the whole schema.
pub fn evolve_api_fields(
    existing: &[bq::TableFieldSchema],
    planned: &[Field],
) -> Result<Vec<bq::TableFieldSchema>> {
    evolve_level(existing, planned, "")
}

fn evolve_level(
    existing: &[bq::TableFieldSchema],
    planned: &[Field],
    prefix: &str,
) -> Result<Vec<bq::TableFieldSchema>> {
    let mut out = Vec::with_capacity(planned.len().max(existing.len()));
    for old in existing {
        let path = join_path(prefix, &old.name);
        let Some(new) = planned.iter().find(|f| f.name == old.name) else {
            out.push(old.clone());
            continue;
        };
        let mut field = old.clone();
        let mode: FieldMode = old.mode.parse().unwrap_or_default();
        if mode == FieldMode::Required && !new.required {
            field.mode = FieldMode::Nullable.as_str().to_string();
        }
        let children = match (&new.data_type, mode) {
            (DataType::List { list }, FieldMode::Repeated) => match &list.data_type {
                DataType::Struct { fields } => Some(fields),
                _ => None,
            },
            (DataType::Struct { fields }, _) => Some(fields),
            _ => None,
        };
        if let Some(children) = children
            && !old.fields.is_empty()
        {
            field.fields = evolve_level(&old.fields, children, &path)?;
        }
        out.push(field);
    }
    for new in planned {
        if !existing.iter().any(|old| old.name == new.name) {
            out.push(field_from_core(new, &join_path(prefix, &new.name))?.to_api());
        }
    }
    Ok(out)
}

/// The columns of `asked` that `got` lacks or holds with a stricter mode: what a tables.patch
/// answer did not apply (the emulator ignores nested additions, for example).
pub fn unapplied_changes(asked: &TableSchema, got: &TableSchema) -> Vec<String> {
    let mut missing = Vec::new();
    unapplied_level(&asked.fields, &got.fields, "", &mut missing);
    missing
}

fn unapplied_level(asked: &[TableField], got: &[TableField], prefix: &str, out: &mut Vec<String>) {
    for a in asked {
        let path = join_path(prefix, &a.name);
        match got.iter().find(|g| g.name.eq_ignore_ascii_case(&a.name)) {
            None => out.push(format!("{path}: column missing")),
            Some(g) => {
                if a.mode == FieldMode::Nullable && g.mode == FieldMode::Required {
                    out.push(format!("{path}: still REQUIRED"));
                }
                unapplied_level(&a.fields, &g.fields, &path, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PrimitiveType as P;

    fn table() -> TableSchema {
        TableSchema::new(vec![
            TableField::new("id", FieldType::Int64).required(),
            TableField::new("n", FieldType::Numeric),
            TableField::new("ts", FieldType::Timestamp),
            TableField::new("tags", FieldType::String).repeated(),
            TableField::record(
                "rec",
                vec![
                    TableField::new("a", FieldType::Int64).required(),
                    TableField::new("b", FieldType::String),
                ],
            )
            .repeated(),
            TableField::new("j", FieldType::Json),
        ])
    }

    #[test]
    fn every_bigquery_type_has_its_arrow_type() {
        let expected = [
            (FieldType::Int64, ArrowType::Int64),
            (FieldType::Float64, ArrowType::Float64),
            (FieldType::Numeric, ArrowType::Decimal128(38, 9)),
            (FieldType::BigNumeric, ArrowType::Decimal256(76, 38)),
            (FieldType::Bool, ArrowType::Boolean),
            (FieldType::String, ArrowType::Utf8),
            (FieldType::Bytes, ArrowType::Binary),
            (FieldType::Date, ArrowType::Date32),
            (FieldType::Time, ArrowType::Time64(TimeUnit::Microsecond)),
            (
                FieldType::Datetime,
                ArrowType::Timestamp(TimeUnit::Microsecond, None),
            ),
            (
                FieldType::Timestamp,
                ArrowType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            ),
            (FieldType::Json, ArrowType::Utf8),
            (FieldType::Geography, ArrowType::Utf8),
        ];
        for (bq, arrow) in expected {
            assert_eq!(arrow_type(&bq).unwrap().unwrap(), arrow, "{bq}");
        }
        assert!(arrow_type(&FieldType::Record).is_none());
        let err = arrow_field(
            &TableField::new("r", FieldType::Other("RANGE".into())),
            "r",
            ListNulls::Forbidden,
        )
        .unwrap_err();
        assert_eq!(err.context_value("column"), Some("r"));
    }

    #[test]
    fn repeated_and_required_become_list_and_nullability() {
        let t = table();
        let tags = arrow_field(&t.fields[3], "tags", ListNulls::Forbidden).unwrap();
        assert!(!tags.is_nullable());
        let ArrowType::List(item) = tags.data_type() else {
            panic!()
        };
        assert!(!item.is_nullable());
        assert!(
            arrow_field(&t.fields[3], "tags", ListNulls::Allowed)
                .unwrap()
                .is_nullable()
        );
        assert!(
            !arrow_field(&t.fields[0], "id", ListNulls::Forbidden)
                .unwrap()
                .is_nullable()
        );
    }

    #[test]
    fn target_schema_projects_the_table_onto_the_input() {
        let rec_in = ArrowType::Struct(Fields::from(vec![ArrowField::new("b", ArrowType::Utf8, true)]));
        let input = ArrowSchema::new(vec![
            ArrowField::new(
                "rec",
                ArrowType::List(Arc::new(ArrowField::new("item", rec_in, true))),
                true,
            ),
            ArrowField::new("id", ArrowType::Int32, false),
        ]);
        let target = target_schema(&table(), &input, ListNulls::Forbidden).unwrap();
        // Table order, only the input's columns, only the input's record fields.
        let names: Vec<&str> = target.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["id", "rec"]);
        assert_eq!(target.field(0).data_type(), &ArrowType::Int64);
        let ArrowType::List(item) = target.field(1).data_type() else {
            panic!()
        };
        let ArrowType::Struct(children) = item.data_type() else {
            panic!()
        };
        assert_eq!(children.len(), 1);
        assert_eq!(children[0].name(), "b");
    }

    #[test]
    fn table_schemas_become_the_planners_model() {
        let core = to_core(&table());
        assert!(core.field("id").unwrap().required);
        assert_eq!(
            core.field("n").unwrap().data_type,
            P::Decimal {
                precision: 38,
                scale: 9
            }
            .into()
        );
        let tags = core.field_at("tags.element").unwrap();
        assert!(!tags.required);
        assert!(core.field_at("rec.element.a").unwrap().required);
        let param = TableField {
            precision: Some(10),
            scale: Some(2),
            ..TableField::new("p", FieldType::Numeric)
        };
        assert_eq!(
            core_field(&param).data_type,
            P::Decimal {
                precision: 10,
                scale: 2
            }
            .into()
        );
    }

    #[test]
    fn inputs_take_the_tables_type_when_lossless() {
        let core = to_core(&table());
        let input = InputSchema::new(Schema::new(vec![
            Field::required("id", P::Int),
            Field::optional(
                "n",
                P::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
            Field::optional("ts", P::TimestampTzNs),
            Field::optional("j", P::String),
            Field::optional(
                "new_dec",
                P::Decimal {
                    precision: 40,
                    scale: 10,
                },
            ),
            Field::optional("new_small", P::Float),
            Field::optional("new_uuid", P::Uuid),
        ]))
        .with_null_count("n", 2);
        let adapted = planning_input(&input, Some(&core)).unwrap();
        let t = |name: &str| adapted.schema.field(name).unwrap().data_type.clone();
        assert_eq!(t("id"), P::Long.into());
        assert_eq!(t("n"), core.field("n").unwrap().data_type);
        assert_eq!(t("ts"), P::TimestampTz.into());
        assert_eq!(t("j"), P::Json.into());
        assert_eq!(
            t("new_dec"),
            P::Decimal {
                precision: 76,
                scale: 38
            }
            .into()
        );
        assert_eq!(t("new_small"), P::Double.into());
        assert_eq!(t("new_uuid"), P::String.into());
        assert_eq!(adapted.null_counts, input.null_counts);
        // Not lossless: left for the planner to call a conflict.
        let wider = InputSchema::new(Schema::new(vec![Field::optional(
            "n",
            P::Decimal {
                precision: 38,
                scale: 12,
            },
        )]));
        let adapted = planning_input(&wider, Some(&core)).unwrap();
        assert_eq!(
            adapted.schema.fields[0].data_type,
            P::Decimal {
                precision: 38,
                scale: 12
            }
            .into()
        );
        let nested_lists = InputSchema::new(Schema::new(vec![Field::optional(
            "ll",
            DataType::list(Field::optional("e", DataType::list(Field::optional("e", P::Int)))),
        )]));
        let err = planning_input(&nested_lists, None).unwrap_err();
        assert_eq!(err.context_value("column"), Some("ll"));
    }

    #[test]
    fn new_columns_get_bigquery_types_and_nullable_modes() {
        let f = Field::optional(
            "s",
            DataType::structure(vec![
                Field::optional("when", P::TimestampNs),
                Field::optional("xs", DataType::list(Field::optional("element", P::Int))),
            ]),
        );
        let column = field_from_core(&f, "s").unwrap();
        assert_eq!(column.field_type, FieldType::Record);
        assert_eq!(column.fields[0].field_type, FieldType::Datetime);
        assert_eq!(column.fields[1].mode, FieldMode::Repeated);
        assert_eq!(column.fields[1].field_type, FieldType::Int64);
        let wide = Field::optional(
            "d",
            P::Decimal {
                precision: 76,
                scale: 0,
            },
        );
        assert!(field_from_core(&wide, "d").is_err());
    }

    #[test]
    fn evolution_keeps_existing_attributes_and_appends() {
        let mut existing = table().to_api();
        existing[1] = existing[1].clone().set_description("money");
        let mut planned = to_core(&table()).fields;
        planned[0].required = false; // relax id
        if let DataType::List { list } = &mut planned[4].data_type
            && let DataType::Struct { fields } = &mut list.data_type
        {
            fields[0].required = false; // relax rec.a
            fields.push(Field::optional("c", P::Date)); // add rec.c
        }
        planned.push(Field::optional("extra", P::String));
        let evolved = evolve_api_fields(&existing, &planned).unwrap();
        assert_eq!(evolved.len(), 7);
        assert_eq!(evolved[0].mode, "NULLABLE");
        assert_eq!(evolved[1].description.as_deref(), Some("money"));
        assert_eq!(evolved[4].mode, "REPEATED");
        assert_eq!(evolved[4].fields[0].mode, "NULLABLE");
        assert_eq!(evolved[4].fields[2].name, "c");
        assert_eq!(evolved[4].fields[2].r#type, "DATE");
        assert_eq!(evolved[6].name, "extra");
        assert_eq!(evolved[6].mode, "NULLABLE");
        let asked = TableSchema::from_api(&evolved);
        assert!(unapplied_changes(&asked, &asked).is_empty());
        // The emulator answers a nested addition with the old schema: detected.
        let mut ignored = asked.clone();
        ignored.fields[4].fields.pop();
        assert_eq!(unapplied_changes(&asked, &ignored), ["rec.c: column missing"]);
        assert_eq!(unapplied_changes(&asked, &table()).len(), 4);
    }
}
