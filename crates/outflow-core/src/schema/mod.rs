//! A table-neutral schema model.
//!
//! One model expresses what Iceberg, BigQuery and Bigtable tables need: field ids (Iceberg),
//! required or optional fields (BigQuery's REQUIRED and NULLABLE; REPEATED is a list),
//! primitive types from `boolean` to `decimal(P,S)`, timestamps with and without zone, and
//! nested structs, lists and maps. The evolution planner works on this model, and each sink
//! converts it to its service's own.
//!
//! Columns are named by dotted paths ([`path`](split_path)); a name with a dot in it is
//! quoted in backticks. A list's element is `element` and a map's parts are `key` and
//! `value`, as in Iceberg: `addresses.element.city`, `attrs.value.score`.

mod arrow;
mod conform;
pub mod json;
mod matching;
mod name_mapping;
mod path;
mod stats;
mod type_name;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

pub use self::arrow::{FIELD_ID_KEY, JSON_EXTENSION, UUID_EXTENSION, field_to_arrow};
pub use self::conform::{conform_batch, conform_batch_mapped};
pub use self::matching::{ColumnKey, LevelMatch, match_level, trusts_ids};
pub use self::name_mapping::{MappedField, NAME_MAPPING_PROPERTY, NameMapping};
pub use self::path::{join_path, path_of, quote_name, split_path};
pub(crate) use self::path::{names as path_names, split_last as split_last_name};
pub use self::stats::{InputSchema, NullCount};
pub use self::type_name::PRIMITIVE_NAMES;

/// The path segment naming a list's element.
pub const LIST_ELEMENT: &str = "element";
/// The path segment naming a map's key.
pub const MAP_KEY: &str = "key";
/// The path segment naming a map's value.
pub const MAP_VALUE: &str = "value";

/// A primitive (non-nested) type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PrimitiveType {
    /// True or false.
    Boolean,
    /// 32-bit signed integer.
    Int,
    /// 64-bit signed integer.
    Long,
    /// 32-bit IEEE 754 float.
    Float,
    /// 64-bit IEEE 754 float.
    Double,
    /// Fixed-point decimal with `precision` digits, `scale` of them after the point.
    Decimal {
        /// Total number of digits (1 to 76).
        precision: u8,
        /// Digits after the point.
        scale: i8,
    },
    /// Calendar date without time or zone.
    Date,
    /// Time of day in microseconds, without date or zone.
    Time,
    /// Date and time in microseconds, without zone (BigQuery DATETIME).
    Timestamp,
    /// Instant in microseconds, stored as UTC (BigQuery TIMESTAMP).
    TimestampTz,
    /// Date and time in nanoseconds, without zone.
    TimestampNs,
    /// Instant in nanoseconds, stored as UTC.
    TimestampTzNs,
    /// UTF-8 text.
    String,
    /// A 16-byte universally unique identifier.
    Uuid,
    /// Bytes of a fixed length.
    Fixed(u32),
    /// Bytes of any length.
    Binary,
    /// JSON text (BigQuery JSON); stored as a string where the service has no JSON type.
    Json,
}

impl PrimitiveType {
    /// Whether a value of this type can be read as `wider` without loss, the promotions
    /// Iceberg allows: int to long, float to double, and a decimal's precision at the same
    /// scale. A type widens to itself.
    pub fn widens_to(self, wider: PrimitiveType) -> bool {
        use PrimitiveType::*;
        match (self, wider) {
            (a, b) if a == b => true,
            (Int, Long) | (Float, Double) => true,
            (
                Decimal {
                    precision: p1,
                    scale: s1,
                },
                Decimal {
                    precision: p2,
                    scale: s2,
                },
            ) => s1 == s2 && p1 <= p2,
            _ => false,
        }
    }
}

impl Serialize for PrimitiveType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PrimitiveType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        s.parse()
            .map_err(|e: Error| serde::de::Error::custom(e.message()))
    }
}

/// A field's type: a primitive, or a struct, list or map of fields.
///
/// Read from text as Iceberg, Spark and DuckDB write types (`long`, `list<string>`,
/// `struct<a: int, b: string>`...; see [`PRIMITIVE_NAMES`]) and printed as Iceberg does.
/// Deserialized from that text or from the structured form it serializes to, a one-key map
/// (`{struct: [fields]}`, `{list: field}`, `{map: {key, value}}`) that keeps field ids and
/// docs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum DataType {
    /// A primitive type.
    Primitive(PrimitiveType),
    /// A struct of named fields.
    Struct {
        /// The struct's fields, in order.
        #[serde(rename = "struct")]
        fields: Vec<Field>,
    },
    /// A list; the field is its element (named `element`).
    List {
        /// The element field.
        list: Box<Field>,
    },
    /// A map; keys are always required.
    Map {
        /// The key field (named `key`) and value field (named `value`).
        map: Box<MapFields>,
    },
}

impl<'de> Deserialize<'de> for DataType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(DataTypeVisitor)
    }
}

struct DataTypeVisitor;

impl<'de> serde::de::Visitor<'de> for DataTypeVisitor {
    type Value = DataType;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a type such as long, decimal(10,2), list<string> or struct<a: int>")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<DataType, E> {
        s.parse().map_err(|e: Error| E::custom(e.message()))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<DataType, A::Error> {
        const FORMS: &[&str] = &["struct", "list", "map"];
        let Some(key) = map.next_key::<std::string::String>()? else {
            return Err(serde::de::Error::invalid_length(0, &self));
        };
        let data_type = match key.as_str() {
            "struct" => DataType::Struct {
                fields: map.next_value()?,
            },
            "list" => DataType::List {
                list: map.next_value()?,
            },
            "map" => DataType::Map {
                map: map.next_value()?,
            },
            other => return Err(serde::de::Error::unknown_field(other, FORMS)),
        };
        if let Some(extra) = map.next_key::<std::string::String>()? {
            return Err(serde::de::Error::custom(format!(
                "a type is one key ({key}), not also {extra}"
            )));
        }
        Ok(data_type)
    }
}

/// The key and value fields of a map.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MapFields {
    /// The key field.
    pub key: Field,
    /// The value field.
    pub value: Field,
}

impl DataType {
    /// A struct type.
    pub fn structure(fields: Vec<Field>) -> Self {
        DataType::Struct { fields }
    }

    /// A list of `element` (whose name is set to `element`).
    pub fn list(element: Field) -> Self {
        DataType::List {
            list: Box::new(element.renamed(LIST_ELEMENT)),
        }
    }

    /// A map from `key` to `value` (renamed `key` and `value`; the key made required).
    pub fn map(key: Field, value: Field) -> Self {
        let mut key = key.renamed(MAP_KEY);
        key.required = true;
        DataType::Map {
            map: Box::new(MapFields {
                key,
                value: value.renamed(MAP_VALUE),
            }),
        }
    }

    /// The primitive type, if this is one.
    pub fn as_primitive(&self) -> Option<PrimitiveType> {
        match self {
            DataType::Primitive(p) => Some(*p),
            _ => None,
        }
    }

    /// The kind of type, for messages: `primitive`, `struct`, `list` or `map`.
    pub fn kind(&self) -> &'static str {
        match self {
            DataType::Primitive(_) => "primitive",
            DataType::Struct { .. } => "struct",
            DataType::List { .. } => "list",
            DataType::Map { .. } => "map",
        }
    }

    /// The nested fields one level down, with the path segment each lives under
    /// (field names for structs, `element` for lists, `key`/`value` for maps).
    pub fn children(&self) -> Vec<&Field> {
        match self {
            DataType::Primitive(_) => Vec::new(),
            DataType::Struct { fields } => fields.iter().collect(),
            DataType::List { list } => vec![list.as_ref()],
            DataType::Map { map } => vec![&map.key, &map.value],
        }
    }

    /// Mutable access to the nested fields one level down.
    pub fn children_mut(&mut self) -> Vec<&mut Field> {
        match self {
            DataType::Primitive(_) => Vec::new(),
            DataType::Struct { fields } => fields.iter_mut().collect(),
            DataType::List { list } => vec![list.as_mut()],
            DataType::Map { map } => {
                let MapFields { key, value } = map.as_mut();
                vec![key, value]
            }
        }
    }

    /// Whether this is a list or a map (whose children are repeated).
    pub fn is_container(&self) -> bool {
        matches!(self, DataType::List { .. } | DataType::Map { .. })
    }
}

impl From<PrimitiveType> for DataType {
    fn from(p: PrimitiveType) -> Self {
        DataType::Primitive(p)
    }
}

/// A named, typed field; required fields never hold nulls.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Field {
    /// The field id (Iceberg), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i32>,
    /// The field's name.
    pub name: String,
    /// Whether the field is required (never null).
    #[serde(default)]
    pub required: bool,
    /// The field's type.
    #[serde(rename = "type")]
    pub data_type: DataType,
    /// A description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
}

impl Field {
    /// A required field without id.
    pub fn required(name: impl Into<String>, data_type: impl Into<DataType>) -> Self {
        Field {
            id: None,
            name: name.into(),
            required: true,
            data_type: data_type.into(),
            doc: None,
        }
    }

    /// An optional field without id.
    pub fn optional(name: impl Into<String>, data_type: impl Into<DataType>) -> Self {
        Field {
            required: false,
            ..Field::required(name, data_type)
        }
    }

    /// The same field with an id.
    pub fn with_id(mut self, id: i32) -> Self {
        self.id = Some(id);
        self
    }

    /// The same field with a description.
    pub fn with_doc(mut self, doc: impl Into<String>) -> Self {
        self.doc = Some(doc.into());
        self
    }

    /// The same field under another name.
    pub fn renamed(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

/// The schema of a table or of an input: its top-level fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Schema {
    /// The top-level fields, in order.
    pub fields: Vec<Field>,
}

impl Schema {
    /// A schema of these top-level fields.
    pub fn new(fields: Vec<Field>) -> Self {
        Schema { fields }
    }

    /// The top-level field named `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The field at a path (`a.b`, `list.element.x`, `map.value.y`, `` `a.b`.c ``).
    pub fn field_at(&self, path: &str) -> Option<&Field> {
        let names = split_path(path).ok()?;
        let (first, rest) = names.split_first()?;
        let mut field = self.field(first)?;
        for name in rest {
            field = field.data_type.children().into_iter().find(|c| &c.name == name)?;
        }
        Some(field)
    }

    /// Calls `visit(path, field, under_container)` for every field at every level, parents
    /// before children; `under_container` is true below a list or map.
    pub fn visit(&self, mut visit: impl FnMut(&str, &Field, bool)) {
        fn walk(prefix: &str, field: &Field, under: bool, visit: &mut dyn FnMut(&str, &Field, bool)) {
            let path = join_path(prefix, &field.name);
            visit(&path, field, under);
            let below = under || field.data_type.is_container();
            for child in field.data_type.children() {
                walk(&path, child, below, visit);
            }
        }
        for field in &self.fields {
            walk("", field, false, &mut visit);
        }
    }

    /// Every path in the schema, parents before children.
    pub fn paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.visit(|path, _, _| out.push(path.to_string()));
        out
    }

    /// The highest field id in the schema, or 0 when none has one.
    pub fn max_field_id(&self) -> i32 {
        let mut max = 0;
        self.visit(|_, f, _| max = max.max(f.id.unwrap_or(0)));
        max
    }

    /// The path of the field with `id`, if any.
    pub fn path_of_id(&self, id: i32) -> Option<String> {
        let mut found = None;
        self.visit(|path, f, _| {
            if found.is_none() && f.id == Some(id) {
                found = Some(path.to_string());
            }
        });
        found
    }

    /// Gives every field without an id a fresh one, counting up from `last_id + 1` in
    /// depth-first order (a field before its children). Returns the last id assigned.
    pub fn assign_missing_ids(&mut self, mut last_id: i32) -> i32 {
        fn walk(field: &mut Field, last: &mut i32) {
            if field.id.is_none() {
                *last += 1;
                field.id = Some(*last);
            }
            for child in field.data_type.children_mut() {
                walk(child, last);
            }
        }
        for field in &mut self.fields {
            walk(field, &mut last_id);
        }
        last_id
    }

    /// The same schema with every field id removed.
    pub fn without_ids(&self) -> Schema {
        fn strip(field: &mut Field) {
            field.id = None;
            for child in field.data_type.children_mut() {
                strip(child);
            }
        }
        let mut out = self.clone();
        out.fields.iter_mut().for_each(strip);
        out
    }

    /// Checks that names are non-blank and unique among siblings, and ids unique.
    pub fn validate(&self) -> Result<()> {
        fn check_siblings(prefix: &str, fields: &[Field]) -> Result<()> {
            let mut seen = std::collections::BTreeSet::new();
            for f in fields {
                if f.name.trim().is_empty() {
                    let at = if prefix.is_empty() {
                        "the top level".to_string()
                    } else {
                        prefix.to_string()
                    };
                    return Err(Error::invalid_input(format!(
                        "a field under {at} has a blank name"
                    )));
                }
                if !seen.insert(f.name.as_str()) {
                    return Err(Error::invalid_input(format!(
                        "field {} appears twice",
                        join_path(prefix, &f.name)
                    )));
                }
            }
            Ok(())
        }
        check_siblings("", &self.fields)?;
        let mut result = Ok(());
        let mut ids = std::collections::BTreeMap::new();
        self.visit(|path, f, _| {
            if result.is_err() {
                return;
            }
            if let DataType::Struct { fields } = &f.data_type {
                result = check_siblings(path, fields);
            }
            if let Some(id) = f.id
                && let Some(other) = ids.insert(id, path.to_string())
            {
                result = Err(Error::invalid_input(format!(
                    "fields {other} and {path} share id {id}"
                )));
            }
        });
        result
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        DataType::structure(self.fields.clone()).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PrimitiveType::*;

    fn nested() -> Schema {
        Schema::new(vec![
            Field::required("id", Long),
            Field::optional(
                "addresses",
                DataType::list(Field::optional(
                    "element",
                    DataType::structure(vec![Field::required("city", String)]),
                )),
            ),
            Field::optional(
                "attrs",
                DataType::map(
                    Field::required("key", String),
                    Field::optional(
                        "value",
                        DataType::structure(vec![Field::optional("score", Double)]),
                    ),
                ),
            ),
        ])
    }

    #[test]
    fn paths_go_through_lists_and_maps() {
        assert_eq!(
            nested().paths(),
            vec![
                "id",
                "addresses",
                "addresses.element",
                "addresses.element.city",
                "attrs",
                "attrs.key",
                "attrs.value",
                "attrs.value.score"
            ]
        );
        assert_eq!(
            nested().field_at("attrs.value.score").unwrap().data_type,
            Double.into()
        );
        assert!(nested().field_at("attrs.value.nope").is_none());
    }

    #[test]
    fn widening_follows_iceberg_promotions() {
        assert!(Int.widens_to(Long));
        assert!(Float.widens_to(Double));
        assert!(!Long.widens_to(Int));
        assert!(!Int.widens_to(Double));
        let d = |p, s| Decimal {
            precision: p,
            scale: s,
        };
        assert!(d(10, 2).widens_to(d(12, 2)));
        assert!(!d(12, 2).widens_to(d(10, 2)));
        assert!(!d(10, 2).widens_to(d(12, 3)));
    }

    #[test]
    fn primitive_names_round_trip() {
        for t in [
            Boolean,
            Int,
            Long,
            Float,
            Double,
            Date,
            Time,
            Timestamp,
            TimestampTz,
            TimestampNs,
            TimestampTzNs,
            String,
            Uuid,
            Binary,
            Json,
            Fixed(16),
            Decimal {
                precision: 38,
                scale: 9,
            },
        ] {
            assert_eq!(t.to_string().parse::<PrimitiveType>().unwrap(), t);
        }
        assert!("decimal(0,0)".parse::<PrimitiveType>().is_err());
        assert!("decimal(5,6)".parse::<PrimitiveType>().is_err());
        assert_eq!("varchar".parse::<PrimitiveType>().unwrap(), String);
    }

    #[test]
    fn ids_are_assigned_depth_first() {
        let mut s = nested();
        assert_eq!(s.assign_missing_ids(0), 8);
        assert_eq!(s.field_at("addresses.element.city").unwrap().id, Some(4));
        assert_eq!(s.path_of_id(8).as_deref(), Some("attrs.value.score"));
        assert_eq!(s.max_field_id(), 8);
        assert_eq!(s.without_ids().max_field_id(), 0);
    }

    #[test]
    fn validate_rejects_blank_and_duplicate_names() {
        let blank = Schema::new(vec![Field::required(" ", Int)]);
        assert!(blank.validate().unwrap_err().to_string().contains("blank name"));
        let dup = Schema::new(vec![Field::required("a", Int), Field::optional("a", Long)]);
        assert!(
            dup.validate()
                .unwrap_err()
                .to_string()
                .contains("field a appears twice")
        );
        let nested_dup = Schema::new(vec![Field::required(
            "s",
            DataType::structure(vec![Field::required("x", Int), Field::required("x", Int)]),
        )]);
        assert!(
            nested_dup
                .validate()
                .unwrap_err()
                .to_string()
                .contains("s.x appears twice")
        );
        nested().validate().unwrap();
    }

    #[test]
    fn serde_round_trip() {
        let mut s = nested();
        s.assign_missing_ids(0);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Schema>(&json).unwrap(), s);
        let yaml = "fields:\n  - name: id\n    required: true\n    type: long\n  - name: tags\n    type:\n      list: {name: element, type: string}\n";
        let parsed: Schema = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(parsed.field_at("tags.element").unwrap().data_type, String.into());
    }

    #[test]
    fn types_deserialize_from_their_text_or_their_structured_form() {
        let text = "fields:\n  - {name: tags, type: 'list<string>'}\n  - {name: attrs, type: 'map<string, struct<score: double>>'}\n";
        let from_text: Schema = serde_yaml_ng::from_str(text).unwrap();
        let structured = "fields:\n  - {name: tags, type: {list: {name: element, type: string}}}\n  - name: attrs\n    type: {map: {key: {name: key, type: string, required: true}, value: {name: value, type: {struct: [{name: score, type: double}]}}}}\n";
        let from_structure: Schema = serde_yaml_ng::from_str(structured).unwrap();
        assert_eq!(from_text, from_structure);
        assert_eq!(from_text.fields[1], nested().fields[2]);

        let err = serde_yaml_ng::from_str::<Field>("{name: x, type: integr}")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown type \"integr\"; did you mean \"integer\"?"),
            "{err}"
        );
        assert!(!err.contains("untagged"), "{err}");
        let err = serde_yaml_ng::from_str::<Field>("{name: x, type: {array: []}}")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown field `array`, expected one of `struct`, `list`, `map`"),
            "{err}"
        );
        let err = serde_yaml_ng::from_str::<Field>("{name: x, type: {list: {name: e, type: strin}}}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean \"string\"?"), "{err}");
    }

    #[test]
    fn display_reads_like_iceberg() {
        assert_eq!(
            nested().to_string(),
            "struct<id: long not null, addresses: list<struct<city: string not null>>, attrs: map<string, struct<score: double>>>"
        );
    }
}
