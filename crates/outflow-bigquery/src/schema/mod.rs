//! Table schemas in BigQuery's own terms: the JSON schema format of `bq` and the REST API
//! (`[{"name": "id", "type": "INT64", "mode": "REQUIRED"}, ...]`), which is also what users
//! write in YAML job files and in `outflow bigquery ensure-table` schema files.
//!
//! Types are read in standard SQL (`INT64`, `FLOAT64`, `BOOL`, `STRUCT`) and legacy
//! (`INTEGER`, `FLOAT`, `BOOLEAN`, `RECORD`) spellings, in any case, and written in standard
//! SQL, except `RECORD`, the name the API itself uses.

pub mod types;

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use google_cloud_bigquery_v2::model as bq;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use outflow_core::{Error, ErrorKind, Result};

/// A BigQuery column type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FieldType {
    /// 64-bit integer (`INT64`, `INTEGER`).
    Int64,
    /// 64-bit float (`FLOAT64`, `FLOAT`).
    Float64,
    /// Decimal with 38 digits, 9 after the point (`NUMERIC`, `DECIMAL`).
    Numeric,
    /// Decimal with 76 digits, 38 after the point (`BIGNUMERIC`, `BIGDECIMAL`).
    BigNumeric,
    /// Boolean (`BOOL`, `BOOLEAN`).
    Bool,
    /// UTF-8 text.
    String,
    /// Bytes.
    Bytes,
    /// Calendar date.
    Date,
    /// Time of day, microseconds.
    Time,
    /// Date and time without zone, microseconds.
    Datetime,
    /// Instant, microseconds, UTC.
    Timestamp,
    /// JSON document.
    Json,
    /// Nested fields (`RECORD`, `STRUCT`).
    Record,
    /// Geography, written as WKT or GeoJSON text.
    Geography,
    /// A type Outflow does not write (`INTERVAL`, `RANGE`...), kept as the service names it.
    Other(String),
}

impl FieldType {
    /// The name Outflow writes: standard SQL, and `RECORD` for nested fields.
    pub fn as_str(&self) -> &str {
        match self {
            FieldType::Int64 => "INT64",
            FieldType::Float64 => "FLOAT64",
            FieldType::Numeric => "NUMERIC",
            FieldType::BigNumeric => "BIGNUMERIC",
            FieldType::Bool => "BOOL",
            FieldType::String => "STRING",
            FieldType::Bytes => "BYTES",
            FieldType::Date => "DATE",
            FieldType::Time => "TIME",
            FieldType::Datetime => "DATETIME",
            FieldType::Timestamp => "TIMESTAMP",
            FieldType::Json => "JSON",
            FieldType::Record => "RECORD",
            FieldType::Geography => "GEOGRAPHY",
            FieldType::Other(name) => name,
        }
    }

    /// The types Outflow writes, for messages.
    pub const SUPPORTED: &'static str = "INT64, FLOAT64, NUMERIC, BIGNUMERIC, BOOL, STRING, BYTES, DATE, TIME, \
                                         DATETIME, TIMESTAMP, JSON, RECORD, GEOGRAPHY";
}

impl FromStr for FieldType {
    type Err = std::convert::Infallible;

    /// Never fails: a name Outflow does not know becomes [`FieldType::Other`], which schema
    /// validation rejects in user schemas and which tables read from the service may hold.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_uppercase().as_str() {
            "INT64" | "INTEGER" => FieldType::Int64,
            "FLOAT64" | "FLOAT" => FieldType::Float64,
            "NUMERIC" | "DECIMAL" => FieldType::Numeric,
            "BIGNUMERIC" | "BIGDECIMAL" => FieldType::BigNumeric,
            "BOOL" | "BOOLEAN" => FieldType::Bool,
            "STRING" => FieldType::String,
            "BYTES" => FieldType::Bytes,
            "DATE" => FieldType::Date,
            "TIME" => FieldType::Time,
            "DATETIME" => FieldType::Datetime,
            "TIMESTAMP" => FieldType::Timestamp,
            "JSON" => FieldType::Json,
            "RECORD" | "STRUCT" => FieldType::Record,
            "GEOGRAPHY" => FieldType::Geography,
            other => FieldType::Other(other.to_string()),
        })
    }
}

impl fmt::Display for FieldType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FieldType {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FieldType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(text.parse().unwrap_or_else(|never| match never {}))
    }
}

/// A column's mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FieldMode {
    /// May be null (the default).
    #[default]
    Nullable,
    /// Never null.
    Required,
    /// An array of the type; never null (a null array reads as empty), elements never null.
    Repeated,
}

impl FieldMode {
    /// The API's name.
    pub fn as_str(self) -> &'static str {
        match self {
            FieldMode::Nullable => "NULLABLE",
            FieldMode::Required => "REQUIRED",
            FieldMode::Repeated => "REPEATED",
        }
    }

    fn is_nullable(&self) -> bool {
        *self == FieldMode::Nullable
    }
}

impl FromStr for FieldMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_uppercase().as_str() {
            "" | "NULLABLE" => Ok(FieldMode::Nullable),
            "REQUIRED" => Ok(FieldMode::Required),
            "REPEATED" => Ok(FieldMode::Repeated),
            _ => Err(Error::invalid_config(
                "mode",
                format!("unknown mode {s:?} (NULLABLE, REQUIRED or REPEATED)"),
            )),
        }
    }
}

impl fmt::Display for FieldMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FieldMode {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FieldMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        text.parse().map_err(|e: Error| de::Error::custom(e.message()))
    }
}

/// One column of a BigQuery table schema, in the API's JSON form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableField {
    /// The column name.
    pub name: String,
    /// The column type.
    #[serde(rename = "type")]
    pub field_type: FieldType,
    /// NULLABLE (the default), REQUIRED or REPEATED.
    #[serde(default, skip_serializing_if = "FieldMode::is_nullable")]
    pub mode: FieldMode,
    /// The nested fields of a RECORD.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<TableField>,
    /// A description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// NUMERIC(P, S) / BIGNUMERIC(P, S) precision. The API writes it as a string.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "number_or_string"
    )]
    pub precision: Option<u32>,
    /// NUMERIC(P, S) / BIGNUMERIC(P, S) scale.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "number_or_string"
    )]
    pub scale: Option<u32>,
    /// STRING(L) / BYTES(L) maximum length.
    #[serde(
        default,
        rename = "maxLength",
        alias = "max_length",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "number_or_string"
    )]
    pub max_length: Option<u64>,
}

fn number_or_string<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr + Deserialize<'de>,
    T::Err: fmt::Display,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either<T> {
        Number(T),
        Text(String),
    }
    match Option::<Either<T>>::deserialize(d)? {
        None => Ok(None),
        Some(Either::Number(n)) => Ok(Some(n)),
        Some(Either::Text(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|e| de::Error::custom(format!("{s:?} is not a number: {e}"))),
    }
}

impl TableField {
    /// A NULLABLE column.
    pub fn new(name: impl Into<String>, field_type: FieldType) -> Self {
        TableField {
            name: name.into(),
            field_type,
            mode: FieldMode::Nullable,
            fields: Vec::new(),
            description: None,
            precision: None,
            scale: None,
            max_length: None,
        }
    }

    /// A NULLABLE RECORD of `fields`.
    pub fn record(name: impl Into<String>, fields: Vec<TableField>) -> Self {
        TableField {
            fields,
            ..TableField::new(name, FieldType::Record)
        }
    }

    /// The same column with another mode.
    pub fn with_mode(mut self, mode: FieldMode) -> Self {
        self.mode = mode;
        self
    }

    /// The same column, REQUIRED.
    pub fn required(self) -> Self {
        self.with_mode(FieldMode::Required)
    }

    /// The same column, REPEATED.
    pub fn repeated(self) -> Self {
        self.with_mode(FieldMode::Repeated)
    }

    /// The same column with a description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Reads the API's field (types in either spelling, a missing mode as NULLABLE).
    pub fn from_api(field: &bq::TableFieldSchema) -> TableField {
        let positive = |v: i64| u32::try_from(v).ok().filter(|v| *v > 0);
        TableField {
            name: field.name.clone(),
            field_type: field.r#type.parse().unwrap_or_else(|never| match never {}),
            mode: field.mode.parse().unwrap_or_default(),
            fields: field.fields.iter().map(TableField::from_api).collect(),
            description: field.description.clone().filter(|d| !d.is_empty()),
            precision: positive(field.precision),
            // A scale of 0 with a precision is meaningful; without one it is the API's unset.
            scale: u32::try_from(field.scale)
                .ok()
                .filter(|s| *s > 0 || field.precision > 0),
            max_length: u64::try_from(field.max_length).ok().filter(|v| *v > 0),
        }
    }

    /// The API's field.
    pub fn to_api(&self) -> bq::TableFieldSchema {
        let mut out = bq::TableFieldSchema::new()
            .set_name(&self.name)
            .set_type(self.field_type.as_str())
            .set_mode(self.mode.as_str())
            .set_fields(self.fields.iter().map(TableField::to_api).collect::<Vec<_>>());
        if let Some(d) = &self.description {
            out = out.set_description(d.clone());
        }
        if let Some(p) = self.precision {
            out = out.set_precision(i64::from(p));
        }
        if let Some(s) = self.scale {
            out = out.set_scale(i64::from(s));
        }
        if let Some(l) = self.max_length {
            out = out.set_max_length(l as i64);
        }
        out
    }
}

/// A table schema: its top-level columns.
///
/// Deserializes from a list of fields or from an object with a `fields` list (what
/// `bq show --schema` and tables.get print), in JSON or YAML; serializes as the list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TableSchema {
    /// The top-level columns, in order.
    pub fields: Vec<TableField>,
}

impl TableSchema {
    /// A schema of these columns.
    pub fn new(fields: Vec<TableField>) -> Self {
        TableSchema { fields }
    }

    /// Reads a schema from the API's fields.
    pub fn from_api(fields: &[bq::TableFieldSchema]) -> Self {
        TableSchema::new(fields.iter().map(TableField::from_api).collect())
    }

    /// The API's fields.
    pub fn to_api(&self) -> Vec<bq::TableFieldSchema> {
        self.fields.iter().map(TableField::to_api).collect()
    }

    /// Parses a schema file's text: JSON (BigQuery's schema format) or the same in YAML.
    pub fn from_text(text: &str) -> Result<TableSchema> {
        let schema: TableSchema = match serde_json::from_str(text) {
            Ok(schema) => schema,
            Err(json_err) if text.trim_start().starts_with(['[', '{']) => {
                return Err(Error::invalid_config(
                    "schema",
                    format!("invalid JSON schema: {json_err}"),
                ));
            }
            Err(_) => serde_yaml_ng::from_str(text)
                .map_err(|e| Error::invalid_config("schema", format!("invalid schema: {e}")))?,
        };
        schema.validate()?;
        Ok(schema)
    }

    /// Reads and validates a schema file (JSON or YAML).
    pub fn from_file(path: impl AsRef<Path>) -> Result<TableSchema> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::from(e).with_context("file", path.display().to_string()))?;
        TableSchema::from_text(&text).map_err(|e| {
            Error::invalid_config("schema", format!("{}: {}", path.display(), e.message()))
                .with_context("file", path.display().to_string())
        })
    }

    /// The top-level column named `name`, compared as BigQuery does: without case.
    pub fn field(&self, name: &str) -> Option<&TableField> {
        self.fields.iter().find(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// Checks the schema against BigQuery's rules, naming the column at fault: names present,
    /// unique without case and not reserved; types known; RECORDs with fields and only
    /// them; precision, scale and length only where they apply and within range.
    pub fn validate(&self) -> Result<()> {
        if self.fields.is_empty() {
            return Err(Error::invalid_config("schema", "the schema has no columns"));
        }
        validate_level(&self.fields, "", 1)
    }
}

/// BigQuery allows 15 levels of nested RECORDs.
const MAX_DEPTH: usize = 15;
const RESERVED_PREFIXES: [&str; 6] = [
    "_partition",
    "_table_",
    "_file_",
    "_row_timestamp",
    "__root__",
    "_colidentifier",
];

fn validate_level(fields: &[TableField], prefix: &str, depth: usize) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for f in fields {
        let path = if prefix.is_empty() {
            f.name.clone()
        } else {
            format!("{prefix}.{}", f.name)
        };
        let bad = |why: String| {
            Error::invalid_config("schema", format!("column {path}: {why}"))
                .with_context("column", path.clone())
        };
        if f.name.trim().is_empty() {
            let at = if prefix.is_empty() {
                "the top level"
            } else {
                prefix
            };
            return Err(Error::invalid_config(
                "schema",
                format!("a column under {at} has a blank name"),
            ));
        }
        if f.name.contains('.') || f.name.len() > 300 || f.name != f.name.trim() {
            return Err(bad(
                "names hold no dots and no outer spaces, and are at most 300 characters".into(),
            ));
        }
        let lower = f.name.to_ascii_lowercase();
        if prefix.is_empty() && RESERVED_PREFIXES.iter().any(|p| lower.starts_with(p)) {
            return Err(bad("the name starts with a prefix BigQuery reserves".into()));
        }
        if !seen.insert(lower) {
            return Err(bad(
                "the name appears twice (BigQuery compares names without case)".into(),
            ));
        }
        if let FieldType::Other(name) = &f.field_type {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "schema: column {path}: type {name:?} is not supported (supported: {})",
                    FieldType::SUPPORTED
                ),
            )
            .with_context("field", "schema")
            .with_context("column", path.clone()));
        }
        match (&f.field_type, f.fields.is_empty()) {
            (FieldType::Record, true) => return Err(bad("a RECORD needs at least one field".into())),
            (FieldType::Record, false) => {
                if depth >= MAX_DEPTH {
                    return Err(bad(format!("RECORDs nest at most {MAX_DEPTH} levels deep")));
                }
                validate_level(&f.fields, &path, depth + 1)?;
            }
            (t, false) => return Err(bad(format!("only a RECORD has fields, not {t}"))),
            _ => {}
        }
        validate_parameters(f).map_err(bad)?;
    }
    Ok(())
}

fn validate_parameters(f: &TableField) -> std::result::Result<(), String> {
    let (max_scale, max_integer_digits) = match f.field_type {
        FieldType::Numeric => (9, 29),
        FieldType::BigNumeric => (38, 38),
        _ => {
            if f.precision.is_some() || f.scale.is_some() {
                return Err(format!(
                    "precision and scale apply to NUMERIC and BIGNUMERIC, not {}",
                    f.field_type
                ));
            }
            if f.max_length.is_some() && !matches!(f.field_type, FieldType::String | FieldType::Bytes) {
                return Err(format!(
                    "maxLength applies to STRING and BYTES, not {}",
                    f.field_type
                ));
            }
            return Ok(());
        }
    };
    if f.max_length.is_some() {
        return Err(format!(
            "maxLength applies to STRING and BYTES, not {}",
            f.field_type
        ));
    }
    match (f.precision, f.scale) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err("a scale needs a precision".into()),
        (Some(p), scale) => {
            let s = scale.unwrap_or(0);
            if s > max_scale {
                return Err(format!("{} scale must be at most {max_scale}", f.field_type));
            }
            if p < s.max(1) || p > s + max_integer_digits {
                return Err(format!(
                    "{} precision must be between max(1, scale) and scale + {max_integer_digits}",
                    f.field_type
                ));
            }
            Ok(())
        }
    }
}

impl Serialize for TableSchema {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.fields.serialize(s)
    }
}

impl<'de> Deserialize<'de> for TableSchema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct SchemaVisitor;
        impl<'de> Visitor<'de> for SchemaVisitor {
            type Value = TableSchema;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of fields, or an object with a `fields` list")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<TableSchema, A::Error> {
                let fields = Vec::<TableField>::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                Ok(TableSchema::new(fields))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<TableSchema, A::Error> {
                let mut fields = None;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "fields" => fields = Some(map.next_value::<Vec<TableField>>()?),
                        other => return Err(de::Error::unknown_field(other, &["fields"])),
                    }
                }
                fields
                    .map(TableSchema::new)
                    .ok_or_else(|| de::Error::missing_field("fields"))
            }
        }
        d.deserialize_any(SchemaVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TableSchema {
        TableSchema::new(vec![
            TableField::new("id", FieldType::Int64).required(),
            TableField::new("tags", FieldType::String).repeated(),
            TableField::record(
                "address",
                vec![
                    TableField::new("city", FieldType::String),
                    TableField::new("zip", FieldType::String).required(),
                ],
            ),
            TableField {
                precision: Some(10),
                scale: Some(2),
                ..TableField::new("amount", FieldType::Numeric)
            },
        ])
    }

    #[test]
    fn reads_bq_json_in_either_shape_and_any_spelling() {
        let json = r#"[
            {"name": "id", "type": "INTEGER", "mode": "required"},
            {"name": "tags", "type": "string", "mode": "REPEATED"},
            {"name": "address", "type": "STRUCT", "fields": [
                {"name": "city", "type": "STRING", "mode": "NULLABLE"},
                {"name": "zip", "type": "STRING", "mode": "REQUIRED"}]},
            {"name": "amount", "type": "NUMERIC", "precision": "10", "scale": "2"}
        ]"#;
        assert_eq!(TableSchema::from_text(json).unwrap(), sample());
        let wrapped = format!("{{\"fields\": {json}}}");
        assert_eq!(TableSchema::from_text(&wrapped).unwrap(), sample());
        let yaml = "- {name: id, type: INT64, mode: REQUIRED}\n- {name: tags, type: STRING, mode: REPEATED}\n\
                    - name: address\n  type: RECORD\n  fields:\n    - {name: city, type: STRING}\n    - {name: zip, type: STRING, mode: REQUIRED}\n\
                    - {name: amount, type: NUMERIC, precision: 10, scale: 2}\n";
        assert_eq!(TableSchema::from_text(yaml).unwrap(), sample());
    }

    #[test]
    fn serde_round_trip_writes_standard_names() {
        let json = serde_json::to_string(&sample()).unwrap();
        assert!(json.contains(r#""type":"INT64","mode":"REQUIRED""#), "{json}");
        assert!(!json.contains("NULLABLE"), "{json}");
        assert_eq!(serde_json::from_str::<TableSchema>(&json).unwrap(), sample());
        let yaml = serde_yaml_ng::to_string(&sample()).unwrap();
        assert_eq!(serde_yaml_ng::from_str::<TableSchema>(&yaml).unwrap(), sample());
    }

    #[test]
    fn api_round_trip_keeps_parameters() {
        let api = sample().to_api();
        assert_eq!(api[0].r#type, "INT64");
        assert_eq!(api[3].precision, 10);
        assert_eq!(TableSchema::from_api(&api), sample());
        // What tables.get returns: legacy names, explicit NULLABLE.
        let got: Vec<bq::TableFieldSchema> = serde_json::from_str(
            r#"[{"name":"id","type":"INTEGER","mode":"REQUIRED"},{"name":"f","type":"FLOAT","mode":"NULLABLE"},
                {"name":"r","type":"RANGE","mode":"NULLABLE"}]"#,
        )
        .unwrap();
        let schema = TableSchema::from_api(&got);
        assert_eq!(schema.fields[0].field_type, FieldType::Int64);
        assert_eq!(schema.fields[1].field_type, FieldType::Float64);
        assert_eq!(schema.fields[2].field_type, FieldType::Other("RANGE".into()));
    }

    #[test]
    fn validation_names_the_column() {
        let cases: Vec<(Vec<TableField>, &str, &str)> = vec![
            (vec![TableField::new("", FieldType::Int64)], "", "blank name"),
            (
                vec![
                    TableField::new("a", FieldType::Int64),
                    TableField::new("A", FieldType::String),
                ],
                "A",
                "appears twice",
            ),
            (
                vec![TableField::new("r", FieldType::Record)],
                "r",
                "at least one field",
            ),
            (
                vec![TableField {
                    fields: vec![TableField::new("x", FieldType::Int64)],
                    ..TableField::new("s", FieldType::String)
                }],
                "s",
                "only a RECORD",
            ),
            (
                vec![TableField::new("x", "WIBBLE".parse().unwrap())],
                "x",
                "not supported",
            ),
            (
                vec![TableField {
                    precision: Some(40),
                    scale: Some(2),
                    ..TableField::new("n", FieldType::Numeric)
                }],
                "n",
                "precision",
            ),
            (
                vec![TableField {
                    scale: Some(2),
                    ..TableField::new("n", FieldType::Numeric)
                }],
                "n",
                "needs a precision",
            ),
            (
                vec![TableField::new("_PARTITIONTIME", FieldType::Int64)],
                "_PARTITIONTIME",
                "reserves",
            ),
            (
                vec![TableField::record(
                    "r",
                    vec![TableField::new("a.b", FieldType::Int64)],
                )],
                "r.a.b",
                "no dots",
            ),
        ];
        for (fields, column, message) in cases {
            let err = TableSchema::new(fields).validate().unwrap_err();
            assert!(err.to_string().contains(message), "{column}: {err}");
            if !column.is_empty() {
                assert_eq!(err.context_value("column"), Some(column), "{err}");
            }
        }
        assert!(TableSchema::default().validate().is_err());
        sample().validate().unwrap();
    }

    #[test]
    fn unknown_keys_and_modes_are_rejected() {
        let err = TableSchema::from_text(r#"[{"name":"a","type":"INT64","mdoe":"REQUIRED"}]"#).unwrap_err();
        assert!(err.to_string().contains("mdoe"), "{err}");
        let err = TableSchema::from_text(r#"[{"name":"a","type":"INT64","mode":"OPTIONAL"}]"#).unwrap_err();
        assert!(err.to_string().contains("OPTIONAL"), "{err}");
    }
}
