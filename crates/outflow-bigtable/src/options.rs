//! What users write to configure Bigtable, as serde types whose field docs are the user
//! docs: the sink's options ([`BigtableSinkOptions`]) and what a created table looks like
//! ([`TableCreateOptions`]: its column families, their garbage-collection rules and their
//! value types). Their builders are in [`crate::builder`].
//!
//! [`TableCreateOptions`] in YAML:
//!
//! ```yaml
//! column_families:
//!   - name: profile                      # raw, no rule: every version is kept
//!   - name: events
//!     gc_rule: {max_age: 7d}
//!   - name: recent
//!     gc_rule:
//!       union: [{max_versions: 3}, {max_age: 30d}]
//!   - name: clicks
//!     type: {aggregate: sum}             # Int64 counters, summed by Bigtable
//! ```
//!
//! `gc_rule` is `{max_versions: N}`, `{max_age: DURATION}`, `{union: [RULE...]}` or
//! `{intersection: [RULE...]}`, nested as deep as needed; `type` is `raw` (the default) or
//! `{aggregate: sum|min|max|hll}`. Options written before value types existed (families
//! with rules only, as a list without `type` or as a map from family name to rule) read
//! back as raw families.

use std::fmt;
use std::time::Duration;

use arrow_schema::Schema;
use gcloud_sdk::google::bigtable::admin::v2 as admin;
use gcloud_sdk::prost_types;
use outflow_core::changes::OperationColumn;
use outflow_core::{CreateDisposition, Destination, Error, Result, RetryPolicy};
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::batch::Batching;
use crate::builder::{BigtableSinkOptionsBuilder, TableCreateOptionsBuilder};
use crate::client::BigtableConnection;
use crate::schema::{CellTimestamp, ColumnMapping, RowEncoder, RowKey, RowMapping};
use crate::sink::Settings;

/// When Bigtable may delete old cells of a column family.
///
/// Without a rule a family keeps every cell version forever; see the crate docs for why
/// that matters for an at-least-once sink. Deletion is lazy: Bigtable collects garbage in
/// the background, so reads may still see cells a rule allows it to drop.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GcRule {
    /// Keep at most this many versions of each cell (`{max_versions: 3}`).
    MaxVersions(u32),
    /// Keep cells younger than this, by cell timestamp (`{max_age: 7d}`).
    MaxAge(Duration),
    /// Delete a cell when any of the rules would (`{union: [...]}`).
    Union(Vec<GcRule>),
    /// Delete a cell only when all of the rules would (`{intersection: [...]}`).
    Intersection(Vec<GcRule>),
}

impl GcRule {
    /// Checks the numbers fit the service's types (versions in an `i32`, ages in seconds
    /// in an `i64`), naming the offending rule; the service checks everything else.
    fn validate(&self, field: &str) -> Result<()> {
        match self {
            GcRule::MaxVersions(n) if i32::try_from(*n).is_err() => Err(Error::invalid_config(
                field,
                format!("max_versions {n} is larger than Bigtable accepts ({})", i32::MAX),
            )),
            GcRule::MaxAge(age) if i64::try_from(age.as_secs()).is_err() => Err(Error::invalid_config(
                field,
                format!("max_age {age:?} is larger than Bigtable accepts"),
            )),
            GcRule::Union(rules) | GcRule::Intersection(rules) => rules
                .iter()
                .enumerate()
                .try_for_each(|(i, r)| r.validate(&format!("{field}[{i}]"))),
            _ => Ok(()),
        }
    }

    /// The rule as the admin API takes it.
    pub(crate) fn to_proto(&self) -> admin::GcRule {
        use admin::gc_rule::{Intersection, Rule, Union};
        let rule = match self {
            GcRule::MaxVersions(n) => Rule::MaxNumVersions(i32::try_from(*n).unwrap_or(i32::MAX)),
            GcRule::MaxAge(age) => Rule::MaxAge(prost_types::Duration {
                seconds: i64::try_from(age.as_secs()).unwrap_or(i64::MAX),
                nanos: age.subsec_nanos() as i32,
            }),
            GcRule::Union(rules) => Rule::Union(Union {
                rules: rules.iter().map(GcRule::to_proto).collect(),
            }),
            GcRule::Intersection(rules) => Rule::Intersection(Intersection {
                rules: rules.iter().map(GcRule::to_proto).collect(),
            }),
        };
        admin::GcRule { rule: Some(rule) }
    }

    /// The rule the admin API returned; `None` for an empty rule (no rule) and for shapes
    /// Outflow cannot express (a negative count or age).
    pub(crate) fn from_proto(rule: &admin::GcRule) -> Option<GcRule> {
        use admin::gc_rule::Rule;
        Some(match rule.rule.as_ref()? {
            Rule::MaxNumVersions(n) => GcRule::MaxVersions(u32::try_from(*n).ok()?),
            Rule::MaxAge(d) => GcRule::MaxAge(Duration::new(
                u64::try_from(d.seconds).ok()?,
                u32::try_from(d.nanos).ok()?,
            )),
            Rule::Union(u) => GcRule::Union(u.rules.iter().map(GcRule::from_proto).collect::<Option<_>>()?),
            Rule::Intersection(i) => {
                GcRule::Intersection(i.rules.iter().map(GcRule::from_proto).collect::<Option<_>>()?)
            }
        })
    }
}

impl fmt::Display for GcRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, op: &str, rules: &[GcRule]| {
            f.write_str("(")?;
            for (i, r) in rules.iter().enumerate() {
                if i > 0 {
                    write!(f, " {op} ")?;
                }
                write!(f, "{r}")?;
            }
            f.write_str(")")
        };
        match self {
            GcRule::MaxVersions(n) => write!(f, "max_versions={n}"),
            GcRule::MaxAge(d) => write!(f, "max_age={}", humantime::format_duration(*d)),
            GcRule::Union(rules) => list(f, "or", rules),
            GcRule::Intersection(rules) => list(f, "and", rules),
        }
    }
}

// GC rules are written as one-key maps (`{max_age: 7d}`) in every format, YAML included
// (whose default for enums would be a `!tag`), so they are serialized by hand.
impl Serialize for GcRule {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        struct Age(Duration);
        impl Serialize for Age {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                outflow_core::duration::serialize(&self.0, s)
            }
        }
        let mut map = s.serialize_map(Some(1))?;
        match self {
            GcRule::MaxVersions(n) => map.serialize_entry("max_versions", n)?,
            GcRule::MaxAge(d) => map.serialize_entry("max_age", &Age(*d))?,
            GcRule::Union(rules) => map.serialize_entry("union", rules)?,
            GcRule::Intersection(rules) => map.serialize_entry("intersection", rules)?,
        }
        map.end()
    }
}

/// Reads `T` through a JSON value, so that one-key maps read as enum variants in every
/// format: serde's derived enums expect `!tags` from YAML readers, which users don't write.
pub(crate) fn via_json<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> std::result::Result<T, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    serde_json::from_value(value).map_err(de::Error::custom)
}

impl<'de> Deserialize<'de> for GcRule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case", deny_unknown_fields)]
        enum Form {
            MaxVersions(u32),
            #[serde(with = "outflow_core::duration")]
            MaxAge(Duration),
            Union(Vec<GcRule>),
            Intersection(Vec<GcRule>),
        }
        Ok(match via_json::<D, Form>(d)? {
            Form::MaxVersions(n) => GcRule::MaxVersions(n),
            Form::MaxAge(age) => GcRule::MaxAge(age),
            Form::Union(rules) => GcRule::Union(rules),
            Form::Intersection(rules) => GcRule::Intersection(rules),
        })
    }
}

/// What a column family's cells hold.
///
/// Aggregate families take Int64 inputs (`AddToCell`) and keep one value per cell that
/// Bigtable combines on write; their values read back as 8-byte big-endian integers
/// (a binary sketch for [`ValueType::HyperLogLog`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// Plain bytes, written with `SetCell` (`raw`, the default).
    #[default]
    Raw,
    /// The sum of the Int64 inputs (`{aggregate: sum}`).
    Sum,
    /// The smallest Int64 input (`{aggregate: min}`).
    Min,
    /// The largest Int64 input (`{aggregate: max}`).
    Max,
    /// A HyperLogLog++ estimate of the number of distinct Int64 inputs
    /// (`{aggregate: hll}`).
    HyperLogLog,
}

impl ValueType {
    /// Every value type.
    pub const ALL: [ValueType; 5] = [
        ValueType::Raw,
        ValueType::Sum,
        ValueType::Min,
        ValueType::Max,
        ValueType::HyperLogLog,
    ];

    /// Whether the family is an aggregate (written with `AddToCell`).
    pub fn is_aggregate(self) -> bool {
        self != ValueType::Raw
    }

    /// The name as written in options: `raw`, `sum`, `min`, `max`, `hll`.
    pub fn as_str(self) -> &'static str {
        match self {
            ValueType::Raw => "raw",
            ValueType::Sum => "sum",
            ValueType::Min => "min",
            ValueType::Max => "max",
            ValueType::HyperLogLog => "hll",
        }
    }

    fn aggregate_from_name(name: &str) -> Option<ValueType> {
        let folded: String = name
            .chars()
            .filter(|c| !matches!(c, '_' | '-' | ' ' | '+'))
            .flat_map(char::to_lowercase)
            .collect();
        Some(match folded.as_str() {
            "sum" => ValueType::Sum,
            "min" => ValueType::Min,
            "max" => ValueType::Max,
            "hll" | "hyperloglog" | "hllpp" | "hllppuniquecount" => ValueType::HyperLogLog,
            _ => return None,
        })
    }

    /// The family's value type as the admin API takes it: none for raw, an aggregate
    /// over big-endian Int64 otherwise.
    pub(crate) fn to_proto(self) -> Option<admin::Type> {
        use admin::r#type::aggregate::{Aggregator, HyperLogLogPlusPlusUniqueCount, Max, Min, Sum};
        use admin::r#type::int64::Encoding;
        use admin::r#type::int64::encoding::{BigEndianBytes, Encoding as IntEncoding};
        use admin::r#type::{Aggregate, Int64, Kind};
        let aggregator = match self {
            ValueType::Raw => return None,
            ValueType::Sum => Aggregator::Sum(Sum {}),
            ValueType::Min => Aggregator::Min(Min {}),
            ValueType::Max => Aggregator::Max(Max {}),
            ValueType::HyperLogLog => Aggregator::HllppUniqueCount(HyperLogLogPlusPlusUniqueCount {}),
        };
        let int64 = admin::Type {
            kind: Some(Kind::Int64Type(Int64 {
                encoding: Some(Encoding {
                    encoding: Some(IntEncoding::BigEndianBytes(BigEndianBytes::default())),
                }),
            })),
        };
        Some(admin::Type {
            kind: Some(Kind::AggregateType(Box::new(Aggregate {
                input_type: Some(Box::new(int64)),
                state_type: None,
                aggregator: Some(aggregator),
            }))),
        })
    }

    /// Reads a family's value type from the admin API. `Err` describes a type Outflow
    /// does not declare (another input type or encoding, a structured type...).
    pub(crate) fn from_proto(value_type: Option<&admin::Type>) -> std::result::Result<ValueType, String> {
        use admin::r#type::Kind;
        use admin::r#type::aggregate::Aggregator;
        use admin::r#type::int64::encoding::Encoding as IntEncoding;
        let Some(value_type) = value_type else {
            return Ok(ValueType::Raw);
        };
        let describe = || format!("{:?}", value_type.kind);
        let Some(Kind::AggregateType(aggregate)) = &value_type.kind else {
            return match &value_type.kind {
                None => Ok(ValueType::Raw),
                Some(_) => Err(describe()),
            };
        };
        let big_endian_int64 = matches!(
            aggregate.input_type.as_deref().and_then(|t| t.kind.as_ref()),
            Some(Kind::Int64Type(int)) if matches!(
                int.encoding.as_ref().and_then(|e| e.encoding.as_ref()),
                Some(IntEncoding::BigEndianBytes(_))
            )
        );
        match (&aggregate.aggregator, big_endian_int64) {
            (Some(Aggregator::Sum(_)), true) => Ok(ValueType::Sum),
            (Some(Aggregator::Min(_)), true) => Ok(ValueType::Min),
            (Some(Aggregator::Max(_)), true) => Ok(ValueType::Max),
            (Some(Aggregator::HllppUniqueCount(_)), true) => Ok(ValueType::HyperLogLog),
            _ => Err(describe()),
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ValueType {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        if *self == ValueType::Raw {
            return s.serialize_str("raw");
        }
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("aggregate", self.as_str())?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for ValueType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct TypeVisitor;
        impl<'de> Visitor<'de> for TypeVisitor {
            type Value = ValueType;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`raw` or `{aggregate: sum|min|max|hll}`")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<ValueType, E> {
                if v.trim().eq_ignore_ascii_case("raw") {
                    Ok(ValueType::Raw)
                } else {
                    Err(E::custom(format!(
                        "unknown value type {v:?}; expected `raw` or `{{aggregate: sum|min|max|hll}}`"
                    )))
                }
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<ValueType, A::Error> {
                let key: String = map
                    .next_key()?
                    .ok_or_else(|| de::Error::custom("an empty map is not a value type"))?;
                if key != "aggregate" {
                    return Err(de::Error::unknown_field(&key, &["aggregate"]));
                }
                let name: String = map.next_value()?;
                if map.next_key::<String>()?.is_some() {
                    return Err(de::Error::custom("a value type has exactly one key, `aggregate`"));
                }
                ValueType::aggregate_from_name(&name).ok_or_else(|| {
                    de::Error::custom(format!(
                        "unknown aggregate {name:?}; expected one of sum, min, max, hll"
                    ))
                })
            }
        }
        d.deserialize_any(TypeVisitor)
    }
}

/// One column family to create: a name, an optional GC rule and a value type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnFamily {
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) gc_rule: Option<GcRule>,
    // Older options have no `type`: their families are raw.
    #[serde(default, rename = "type")]
    pub(crate) value_type: ValueType,
}

impl ColumnFamily {
    /// A raw family without a GC rule.
    pub fn new(name: impl Into<String>) -> Self {
        ColumnFamily {
            name: name.into(),
            gc_rule: None,
            value_type: ValueType::Raw,
        }
    }

    /// The same family with a GC rule.
    pub fn with_gc_rule(mut self, rule: GcRule) -> Self {
        self.gc_rule = Some(rule);
        self
    }

    /// The same family with a value type.
    pub fn with_value_type(mut self, value_type: ValueType) -> Self {
        self.value_type = value_type;
        self
    }

    /// The family's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The GC rule; `None` keeps every cell.
    pub fn gc_rule(&self) -> Option<&GcRule> {
        self.gc_rule.as_ref()
    }

    /// The value type.
    pub fn value_type(&self) -> ValueType {
        self.value_type
    }

    /// The family as the admin API takes it. No rule is sent as no `GcRule` at all: an
    /// empty `GcRule` message is not the same thing to every server.
    pub(crate) fn to_proto(&self) -> admin::ColumnFamily {
        admin::ColumnFamily {
            gc_rule: self.gc_rule.as_ref().map(GcRule::to_proto),
            value_type: self.value_type.to_proto(),
        }
    }

    /// A one-line description for plans and logs: `clicks (sum, gc max_age=7d)`.
    pub fn describe(&self) -> String {
        match &self.gc_rule {
            Some(rule) => format!("{} ({}, gc {rule})", self.name, self.value_type),
            None => format!("{} ({}, no gc rule)", self.name, self.value_type),
        }
    }
}

/// The column families of a table the sink creates, in declaration order.
///
/// Built with [`TableCreateOptions::builder`] or read from serde; either way it is
/// validated: at least one family, no blank or repeated names. Bigtable's own name grammar
/// and limits are left to the service.
///
/// ```
/// use std::time::Duration;
/// use outflow_bigtable::{ColumnFamily, GcRule, TableCreateOptions, ValueType};
///
/// let from_file = TableCreateOptions::from_yaml(
///     r#"
/// column_families:
///   - name: events
///     gc_rule: {union: [{max_versions: 3}, {max_age: 7d}]}
///   - {name: clicks, type: {aggregate: sum}}
/// "#,
/// )?;
/// let built = TableCreateOptions::builder()
///     .column_family(ColumnFamily::new("events").with_gc_rule(GcRule::Union(vec![
///         GcRule::MaxVersions(3),
///         GcRule::MaxAge(Duration::from_secs(7 * 86_400)),
///     ])))
///     .column_family(ColumnFamily::new("clicks").with_value_type(ValueType::Sum))
///     .build()?;
/// assert_eq!(from_file, built);
/// assert!(TableCreateOptions::builder().build().is_err(), "no families");
/// # Ok::<(), outflow_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableCreateOptions {
    column_families: Vec<ColumnFamily>,
}

impl TableCreateOptions {
    /// A builder with no families yet.
    pub fn builder() -> TableCreateOptionsBuilder {
        TableCreateOptionsBuilder::default()
    }

    /// The families, in declaration order.
    pub fn column_families(&self) -> &[ColumnFamily] {
        &self.column_families
    }

    /// The family called `name`, if declared.
    pub fn family(&self, name: &str) -> Option<&ColumnFamily> {
        self.column_families.iter().find(|f| f.name == name)
    }

    /// Whether any family is an aggregate; such options make preparation check the value
    /// types of families that already exist.
    pub fn has_aggregates(&self) -> bool {
        self.column_families.iter().any(|f| f.value_type.is_aggregate())
    }

    /// Reads options from YAML or JSON text (JSON is YAML), as in an options file.
    pub fn from_yaml(text: &str) -> Result<TableCreateOptions> {
        serde_yaml_ng::from_str(text)
            .map_err(|e| Error::invalid_config("column_families", format!("cannot read table options: {e}")))
    }

    /// Reads an options file (YAML or JSON).
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<TableCreateOptions> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::from(e)
                .with_context("file", path.display().to_string())
                .with_retryable(false)
        })?;
        TableCreateOptions::from_yaml(&text).map_err(|e| {
            Error::invalid_config("column_families", format!("{}: {}", path.display(), e.message()))
                .with_context("file", path.display().to_string())
        })
    }

    pub(crate) fn validate(column_families: Vec<ColumnFamily>) -> Result<TableCreateOptions> {
        if column_families.is_empty() {
            return Err(Error::invalid_config(
                "column_families",
                "at least one column family is required: a Bigtable table without families \
                 rejects every write",
            ));
        }
        for (i, family) in column_families.iter().enumerate() {
            if family.name.trim().is_empty() {
                return Err(Error::invalid_config(
                    &format!("column_families[{i}].name"),
                    "a column family name must not be blank",
                ));
            }
            if column_families[..i].iter().any(|f| f.name == family.name) {
                return Err(Error::invalid_config(
                    &format!("column_families[{i}].name"),
                    format!("column family {:?} is declared twice", family.name),
                )
                .with_context("family", family.name.clone()));
            }
            if let Some(rule) = &family.gc_rule {
                rule.validate(&format!("column_families[{i}].gc_rule"))?;
            }
        }
        Ok(TableCreateOptions { column_families })
    }
}

impl Serialize for TableCreateOptions {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("column_families", &self.column_families)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for TableCreateOptions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Form {
            #[serde(deserialize_with = "families")]
            column_families: Vec<ColumnFamily>,
        }
        let form = Form::deserialize(d)?;
        TableCreateOptions::validate(form.column_families).map_err(|e| de::Error::custom(e.message()))
    }
}

/// `column_families` as a list of families, or in the form from before value types: a
/// map from family name to GC rule (or null), in declaration order.
fn families<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<ColumnFamily>, D::Error> {
    struct FamiliesVisitor;
    impl<'de> Visitor<'de> for FamiliesVisitor {
        type Value = Vec<ColumnFamily>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of column families, or a map from family name to GC rule")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(family) = seq.next_element::<ColumnFamily>()? {
                out.push(family);
            }
            Ok(out)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some((name, rule)) = map.next_entry::<String, Option<GcRule>>()? {
                out.push(ColumnFamily {
                    name,
                    gc_rule: rule,
                    value_type: ValueType::Raw,
                });
            }
            Ok(out)
        }
    }
    d.deserialize_any(FamiliesVisitor)
}

/// The request timeout of a sink's options and a client's calls unless set otherwise.
pub(crate) fn default_request_timeout() -> Duration {
    Duration::from_secs(60)
}

fn is_default_request_timeout(d: &Duration) -> bool {
    *d == default_request_timeout()
}

/// Bigtable's change data: each row's operation, applied by its row key (the row key's
/// fields are the change key).
///
/// ```yaml
/// changes: { operation: { column: op }, delete: row }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Changes {
    /// The column holding each row's operation, and its values (Debezium's by default).
    pub operation: OperationColumn,
    /// What a delete removes.
    #[serde(default)]
    pub delete: ChangeDelete,
}

/// What a change that deletes removes from its row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeDelete {
    /// The whole row.
    #[default]
    Row,
    /// Each family in which the deleting row has a non-null value.
    Families,
    /// Each column in which the deleting row has a non-null value.
    Cells,
}

impl ChangeDelete {
    /// The delete marker's word for it.
    pub(crate) fn marker(self) -> &'static str {
        match self {
            ChangeDelete::Row => "row",
            ChangeDelete::Families => "families",
            ChangeDelete::Cells => "cells",
        }
    }
}

/// The column the sink adds to change rows to say which delete (its delete marker).
pub(crate) const CHANGE_MARKER: &str = "__outflow_change_delete";

/// Everything the Bigtable sink needs, serializable: what a job file's `bigtable:` section
/// holds. Build it with [`BigtableSinkOptions::builder`]; deserialized options are checked
/// by [`BigtableSinkOptions::validate`] (and when a sink is connected).
///
/// ```yaml
/// project: my-project
/// instance: my-instance
/// table: events                  # or a template: events_{region}
/// create_disposition: create_if_needed
/// table_options:
///   column_families:
///     - {name: cf, gc_rule: {max_versions: 1}}
///     - {name: clicks, type: {aggregate: sum}}
/// row_key: {fields: [region, id], separator: "#"}
/// columns: {explicit: [{field: name, family: cf}, {field: clicks, family: clicks}]}
/// timestamp: {field: event_time}   # or write_time (default), server_time
/// delete_marker: op                # optional
/// batching: {max_entries: 10000, max_bytes: 16777216, max_outstanding_requests: 4}
/// retry: {max_attempts: 10, deadline: 2m}
/// request_timeout: 60s
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BigtableSinkOptions {
    /// The Google Cloud project.
    #[serde(default)]
    pub(crate) project: String,
    /// The Bigtable instance.
    #[serde(default)]
    pub(crate) instance: String,
    /// The table (its id, not its full path), or a template filled from each row
    /// (`events_{region}`).
    #[serde(default, rename = "table", skip_serializing_if = "Option::is_none")]
    pub(crate) destination: Option<Destination>,
    /// The app profile requests go through (the instance's default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) app_profile_id: Option<String>,
    /// An explicit endpoint (`host:port`, `http://..` or `https://..`), used without
    /// credentials: an emulator or a local proxy. Without it, `BIGTABLE_EMULATOR_HOST` when
    /// set, else the service with Application Default Credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) endpoint: Option<String>,
    /// Whether a missing table may be created (the default, which needs `table_options`).
    #[serde(default)]
    pub(crate) create_disposition: CreateDisposition,
    /// The column families to create or add; required with `create_if_needed`, refused
    /// with `create_never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) table_options: Option<TableCreateOptions>,
    /// How row keys are made: a field, or fields joined by a separator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) row_key: Option<RowKey>,
    /// Which fields go to which family and qualifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) columns: Option<ColumnMapping>,
    /// Where cell timestamps come from: the write time (the default), a field, or the
    /// server's clock.
    #[serde(default)]
    pub(crate) timestamp: CellTimestamp,
    /// A field saying whether a row writes or deletes (see the builder's `delete_marker`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) delete_marker: Option<String>,
    /// Change data: rows carry an operation, and are applied by their row key (see
    /// [`Changes`]). Replaces `delete_marker`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) changes: Option<Changes>,
    /// Request sizes and flow control.
    #[serde(default)]
    pub(crate) batching: Batching,
    /// How transient failures are retried (idempotent entries only).
    #[serde(default)]
    pub(crate) retry: RetryPolicy,
    /// The longest one call may take (each MutateRows attempt, each table read or change),
    /// and less when the retry deadline is nearer.
    #[serde(
        default = "default_request_timeout",
        with = "outflow_core::duration",
        skip_serializing_if = "is_default_request_timeout"
    )]
    pub(crate) request_timeout: Duration,
    /// Set by [`BigtableSinkOptions::for_checkpoints`]: every row must give the same cells
    /// when written again. Never read from a job file.
    #[serde(skip)]
    pub(crate) replays_only: bool,
}

impl Default for BigtableSinkOptions {
    fn default() -> Self {
        BigtableSinkOptions {
            project: String::new(),
            instance: String::new(),
            destination: None,
            app_profile_id: None,
            endpoint: None,
            create_disposition: CreateDisposition::default(),
            table_options: None,
            row_key: None,
            columns: None,
            timestamp: CellTimestamp::default(),
            delete_marker: None,
            changes: None,
            batching: Batching::default(),
            retry: RetryPolicy::default(),
            request_timeout: default_request_timeout(),
            replays_only: false,
        }
    }
}

impl BigtableSinkOptions {
    /// A builder with the defaults: create if needed (which needs table options), write
    /// time timestamps, default batching and retries, a 60 s limit per request.
    pub fn builder() -> BigtableSinkOptionsBuilder {
        BigtableSinkOptionsBuilder::default()
    }

    /// A builder holding these options, to change some.
    pub fn to_builder(&self) -> BigtableSinkOptionsBuilder {
        BigtableSinkOptionsBuilder::from_options(self.clone())
    }

    /// Where rows go: one table, or a table per row from a template; `None` until set.
    pub fn destination(&self) -> Option<&Destination> {
        self.destination.as_ref()
    }

    /// Whether a missing table may be created.
    pub fn create_disposition(&self) -> CreateDisposition {
        self.create_disposition
    }

    /// The families to create or add.
    pub fn table_options(&self) -> Option<&TableCreateOptions> {
        self.table_options.as_ref()
    }

    /// How transient failures are retried.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Checks the options without I/O, naming the field at fault.
    pub fn validate(&self) -> Result<()> {
        self.settings().map(|_| ())
    }

    /// Checks the options against the schema of the rows the sink will receive, without
    /// I/O: the fields a table template names, and the row key, column, timestamp and
    /// delete-marker fields, each present with a type its role takes. The error names the
    /// option and the column. What `outflow check` adds to [`validate`](Self::validate);
    /// the column families are checked against the table when it is prepared.
    pub fn check_input(&self, schema: &Schema) -> Result<()> {
        let settings = self.settings()?;
        settings.destination.validate(schema)?;
        if let Some(changes) = &self.changes
            && schema.index_of(&changes.operation.column).is_err()
        {
            return Err(Error::invalid_config(
                "changes.operation.column",
                format!("{:?} is not a column of the input", changes.operation.column),
            ));
        }
        RowEncoder::for_fields(&settings.encoded_schema(schema), &settings.mapping).map(|_| ())
    }

    /// Checks everything without I/O, naming the field at fault, and gives the settings a
    /// sink runs with.
    pub(crate) fn settings(&self) -> Result<Settings> {
        let mut connection = BigtableConnection::new(self.project.clone(), self.instance.clone());
        if let Some(profile) = &self.app_profile_id {
            connection = connection.with_app_profile_id(profile.clone());
        }
        if let Some(endpoint) = &self.endpoint {
            connection = connection.with_endpoint(endpoint.clone());
        }
        connection.validate()?;
        let destination = self.destination.clone().ok_or_else(|| {
            Error::invalid_config("table", "name the table (or a per-row destination) to write to")
        })?;
        if let Destination::Table(table) = &destination
            && table.trim().is_empty()
        {
            return Err(Error::invalid_config("table", "must not be blank"));
        }
        match (self.create_disposition, &self.table_options) {
            (CreateDisposition::CreateNever, Some(_)) => {
                return Err(Error::invalid_config(
                    "table_options",
                    "table options cannot be combined with create_never: they describe a table to \
                     create or reconcile, and create_never never touches the table",
                ));
            }
            (CreateDisposition::CreateIfNeeded, None) => {
                return Err(Error::invalid_config(
                    "table_options",
                    "create_if_needed needs table options: a Bigtable table's schema is its column \
                     families, which the sink cannot guess (use create_never for an existing table)",
                ));
            }
            _ => {}
        }
        let row_key = self
            .row_key
            .clone()
            .ok_or_else(|| Error::invalid_config("row_key", "name the field(s) the row key is made of"))?;
        row_key.validate()?;
        let columns = self.columns.clone().ok_or_else(|| {
            Error::invalid_config(
                "columns",
                "say where fields go: {family: NAME}, {explicit: [...]} or struct_families",
            )
        })?;
        columns.validate()?;
        if let CellTimestamp::Field(field) = &self.timestamp
            && field.trim().is_empty()
        {
            return Err(Error::invalid_config("timestamp.field", "must not be blank"));
        }
        if self.delete_marker.as_ref().is_some_and(|f| f.trim().is_empty()) {
            return Err(Error::invalid_config("delete_marker", "must not be blank"));
        }
        if let Some(changes) = &self.changes {
            changes.operation.validate()?;
            if self.delete_marker.is_some() {
                return Err(Error::invalid_config(
                    "delete_marker",
                    "changes says which rows delete (its operation column); drop delete_marker",
                ));
            }
            if row_key.field_names().contains(&changes.operation.column) {
                return Err(Error::invalid_config(
                    "changes.operation.column",
                    format!("{:?} is a row key field", changes.operation.column),
                ));
            }
        }
        self.batching.validate()?;
        self.retry.validate().map_err(|e| {
            let field = e.context_value("field").unwrap_or_default();
            let why = e.message().split_once(": ").map_or(e.message(), |(_, why)| why);
            Error::invalid_config(&format!("retry.{field}"), why)
        })?;
        if self.request_timeout.is_zero() {
            return Err(Error::invalid_config(
                "request_timeout",
                "must be longer than zero",
            ));
        }
        Ok(Settings {
            connection,
            destination,
            disposition: self.create_disposition,
            table_options: self.table_options.clone(),
            mapping: RowMapping {
                row_key,
                columns,
                timestamp: self.timestamp.clone(),
                delete_marker: match &self.changes {
                    Some(_) => Some(CHANGE_MARKER.to_string()),
                    None => self.delete_marker.clone(),
                },
            },
            changes: self.changes.clone(),
            batching: self.batching.clone(),
            retry: self.retry.clone(),
            request_timeout: self.request_timeout,
            replays_only: self.replays_only,
        })
    }

    /// These options for the checkpoints of a streaming job. Bigtable applies rows as they
    /// arrive, so a job that restarts writes the records since its last checkpoint again;
    /// under exactly-once (`at_least_once` false) that must give the same cells. So the
    /// cells must be timed by a field of the record (`timestamp: {field: ...}`; the Kafka
    /// source's `timestamp_column` gives each record's own time), not by the clock, and no
    /// field may go to an aggregate (AddToCell) family, which would count it twice (checked
    /// against the table's families when it is prepared). Under at-least-once anything
    /// goes, and a restart may add cell versions or count aggregates again.
    pub fn for_checkpoints(&self, at_least_once: bool) -> Result<BigtableSinkOptions> {
        if !at_least_once && !matches!(self.timestamp, CellTimestamp::Field(_)) {
            return Err(Error::invalid_config(
                "timestamp",
                "a streaming job writes the records since its last checkpoint again when it \
                 restarts, and cells timed by the clock would then be new versions: time them by \
                 a field of the record (timestamp: {field: ...}; the Kafka source's \
                 timestamp_column gives each record's own time), or accept that with \
                 checkpoint.delivery: at_least_once",
            ));
        }
        let mut options = self.clone();
        options.replays_only = !at_least_once;
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use outflow_core::ErrorKind;

    use super::*;

    fn days(n: u64) -> Duration {
        Duration::from_secs(n * 86_400)
    }

    fn every_shape() -> TableCreateOptions {
        TableCreateOptions::builder()
            .column_family(ColumnFamily::new("plain"))
            .column_family(ColumnFamily::new("versions").with_gc_rule(GcRule::MaxVersions(3)))
            .column_family(ColumnFamily::new("age").with_gc_rule(GcRule::MaxAge(days(7))))
            .column_family(ColumnFamily::new("either").with_gc_rule(GcRule::Union(vec![
                GcRule::MaxVersions(10),
                GcRule::Intersection(vec![GcRule::MaxAge(days(30)), GcRule::MaxVersions(1)]),
            ])))
            .column_family(ColumnFamily::new("both").with_gc_rule(GcRule::Intersection(vec![
                GcRule::MaxAge(Duration::from_millis(1500)),
                GcRule::MaxVersions(2),
            ])))
            .column_family(ColumnFamily::new("total").with_value_type(ValueType::Sum))
            .column_family(ColumnFamily::new("low").with_value_type(ValueType::Min))
            .column_family(
                ColumnFamily::new("high")
                    .with_value_type(ValueType::Max)
                    .with_gc_rule(GcRule::MaxAge(days(1))),
            )
            .column_family(ColumnFamily::new("distinct").with_value_type(ValueType::HyperLogLog))
            .build()
            .unwrap()
    }

    #[test]
    fn defaults() {
        let family = ColumnFamily::new("cf");
        assert_eq!(family.gc_rule(), None);
        assert_eq!(family.value_type(), ValueType::Raw);
        assert_eq!(ValueType::default(), ValueType::Raw);
        let options = TableCreateOptions::builder()
            .raw_family("cf", None)
            .build()
            .unwrap();
        assert_eq!(options.column_families(), &[family]);
        assert!(!options.has_aggregates());
    }

    #[test]
    fn setters_keep_declaration_order() {
        let options = every_shape();
        let names: Vec<&str> = options.column_families().iter().map(ColumnFamily::name).collect();
        assert_eq!(
            names,
            [
                "plain", "versions", "age", "either", "both", "total", "low", "high", "distinct"
            ]
        );
        assert!(options.has_aggregates());
        assert_eq!(options.family("high").unwrap().value_type(), ValueType::Max);
        assert_eq!(
            options.family("high").unwrap().gc_rule(),
            Some(&GcRule::MaxAge(days(1)))
        );
        assert_eq!(
            options.family("either").unwrap().describe(),
            "either (raw, gc (max_versions=10 or (max_age=30days and max_versions=1)))"
        );
    }

    #[test]
    fn build_rejects_empty_blank_and_repeated_names() {
        let err = TableCreateOptions::builder().build().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert_eq!(err.context_value("field"), Some("column_families"));
        assert!(err.to_string().contains("at least one column family"), "{err}");

        let err = TableCreateOptions::builder()
            .raw_family("ok", None)
            .raw_family("  ", None)
            .build()
            .unwrap_err();
        assert_eq!(err.context_value("field"), Some("column_families[1].name"));
        assert!(err.to_string().contains("must not be blank"), "{err}");

        let err = TableCreateOptions::builder()
            .raw_family("cf", None)
            .column_family(ColumnFamily::new("cf").with_value_type(ValueType::Sum))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("\"cf\" is declared twice"), "{err}");

        let err = TableCreateOptions::builder()
            .raw_family("cf", Some(GcRule::Union(vec![GcRule::MaxVersions(u32::MAX)])))
            .build()
            .unwrap_err();
        assert_eq!(err.context_value("field"), Some("column_families[0].gc_rule[0]"));
    }

    #[test]
    fn serde_form_is_what_users_write() {
        let yaml = r#"
column_families:
  - name: plain
  - name: versions
    gc_rule: {max_versions: 3}
  - name: age
    gc_rule: {max_age: 7d}
  - name: either
    gc_rule:
      union:
        - {max_versions: 10}
        - intersection: [{max_age: 30d}, {max_versions: 1}]
  - name: both
    gc_rule: {intersection: [{max_age: 1s 500ms}, {max_versions: 2}]}
  - {name: total, type: {aggregate: sum}}
  - {name: low, type: {aggregate: min}}
  - {name: high, type: {aggregate: max}, gc_rule: {max_age: 1d}}
  - {name: distinct, type: {aggregate: hll}}
"#;
        let options = TableCreateOptions::from_yaml(yaml).unwrap();
        assert_eq!(options, every_shape());
    }

    #[test]
    fn serde_round_trips_in_json_and_yaml() {
        let options = every_shape();
        let json = serde_json::to_string(&options).unwrap();
        assert!(
            json.starts_with(r#"{"column_families":[{"name":"plain","type":"raw"}"#),
            "{json}"
        );
        assert!(
            json.contains(r#"{"name":"age","gc_rule":{"max_age":"7days"},"type":"raw"}"#),
            "{json}"
        );
        assert!(
            json.contains(r#"{"name":"total","type":{"aggregate":"sum"}}"#),
            "{json}"
        );
        assert_eq!(
            serde_json::from_str::<TableCreateOptions>(&json).unwrap(),
            options
        );
        let yaml = serde_yaml_ng::to_string(&options).unwrap();
        assert!(!yaml.contains('!'), "rules are maps, not YAML tags:\n{yaml}");
        assert_eq!(TableCreateOptions::from_yaml(&yaml).unwrap(), options);
    }

    #[test]
    fn the_form_before_types_reads_back_as_raw() {
        // A list of families with rules only, as written before value types existed.
        let list = r#"{"column_families":[{"name":"a","gc_rule":{"max_versions":1}},{"name":"b"}]}"#;
        let options: TableCreateOptions = serde_json::from_str(list).unwrap();
        assert_eq!(
            options,
            TableCreateOptions::builder()
                .raw_family("a", Some(GcRule::MaxVersions(1)))
                .raw_family("b", None)
                .build()
                .unwrap()
        );
        // The family-to-rule map of the same era, order kept.
        let map = "column_families:\n  zeta: {max_age: 1h}\n  alpha: null\n";
        let options = TableCreateOptions::from_yaml(map).unwrap();
        let names: Vec<_> = options
            .column_families()
            .iter()
            .map(|f| (f.name(), f.value_type()))
            .collect();
        assert_eq!(names, [("zeta", ValueType::Raw), ("alpha", ValueType::Raw)]);
        assert_eq!(
            options.family("zeta").unwrap().gc_rule(),
            Some(&GcRule::MaxAge(Duration::from_secs(3600)))
        );
    }

    #[test]
    fn serde_rejects_what_build_rejects_and_unknown_shapes() {
        for bad in [
            r#"{"column_families":[]}"#,
            r#"{"column_families":[{"name":""}]}"#,
            r#"{"column_families":[{"name":"a"},{"name":"a"}]}"#,
            r#"{"column_families":[{"name":"a","type":"counter"}]}"#,
            r#"{"column_families":[{"name":"a","type":{"aggregate":"avg"}}]}"#,
            r#"{"column_families":[{"name":"a","gc_rule":{"max_size":3}}]}"#,
            r#"{"column_families":[{"name":"a","gc_rule":{"max_age":"soon"}}]}"#,
            r#"{"column_families":[{"name":"a","colour":"red"}]}"#,
            r#"{"families":[{"name":"a"}]}"#,
        ] {
            assert!(serde_json::from_str::<TableCreateOptions>(bad).is_err(), "{bad}");
        }
        let err = TableCreateOptions::from_yaml("column_families: []").unwrap_err();
        assert!(err.to_string().contains("at least one column family"), "{err}");
    }

    #[test]
    fn aggregate_names_have_aliases() {
        for (text, expected) in [
            ("{aggregate: HLL}", ValueType::HyperLogLog),
            ("{aggregate: hyperloglog}", ValueType::HyperLogLog),
            ("{aggregate: HLL++}", ValueType::HyperLogLog),
            ("{aggregate: Sum}", ValueType::Sum),
            ("RAW", ValueType::Raw),
        ] {
            assert_eq!(
                serde_yaml_ng::from_str::<ValueType>(text).unwrap(),
                expected,
                "{text}"
            );
        }
    }

    fn sink_options(row_key: RowKey, columns: ColumnMapping) -> crate::BigtableSinkOptionsBuilder {
        BigtableSinkOptions::builder()
            .project("p")
            .instance("i")
            .destination(Destination::parse("users_{region}").unwrap())
            .create_disposition(CreateDisposition::CreateNever)
            .row_key(row_key)
            .columns(columns)
    }

    fn rows() -> Schema {
        use arrow_schema::{DataType, Field, TimeUnit};
        Schema::new(vec![
            Field::new("user_id", DataType::Utf8, false),
            Field::new("region", DataType::Utf8, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("seen", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ])
    }

    #[test]
    fn check_input_accepts_the_fields_the_rows_have() {
        sink_options(
            RowKey::fields(["region", "user_id"], "#"),
            ColumnMapping::explicit([crate::Column::new("name", "profile")]),
        )
        .timestamp(CellTimestamp::Field("seen".into()))
        .build()
        .unwrap()
        .check_input(&rows())
        .unwrap();
    }

    #[test]
    fn check_input_names_the_option_and_the_column() {
        let family = || ColumnMapping::family("cf");
        let cases = [
            (
                sink_options(RowKey::field("userid"), family()),
                "row_key",
                "userid",
            ),
            (
                sink_options(RowKey::fields(["user_id", "regoin"], "#"), family()),
                "row_key",
                "regoin",
            ),
            (
                sink_options(
                    RowKey::field("user_id"),
                    ColumnMapping::explicit([
                        crate::Column::new("name", "cf"),
                        crate::Column::new("nmae", "cf"),
                    ]),
                ),
                "columns.explicit[1].field",
                "nmae",
            ),
            (
                sink_options(RowKey::field("user_id"), family())
                    .timestamp(CellTimestamp::Field("seen_at".into())),
                "timestamp.field",
                "seen_at",
            ),
            (
                sink_options(RowKey::field("user_id"), family())
                    .timestamp(CellTimestamp::Field("name".into())),
                "timestamp.field",
                "name",
            ),
            (
                sink_options(RowKey::field("user_id"), family()).delete_marker("op"),
                "delete_marker",
                "op",
            ),
            (
                sink_options(RowKey::field("user_id"), ColumnMapping::StructFamilies),
                "columns",
                "region",
            ),
            (
                sink_options(RowKey::field("user_id"), family())
                    .destination(Destination::parse("users_{country}").unwrap()),
                "table",
                "country",
            ),
        ];
        for (builder, key, column) in cases {
            let err = builder.build().unwrap().check_input(&rows()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
            assert_eq!(err.context_value("field"), Some(key), "{err}");
            assert_eq!(err.context_value("column"), Some(column), "{err}");
        }
    }

    #[test]
    fn protos_round_trip() {
        for family in every_shape().column_families() {
            let proto = family.to_proto();
            assert_eq!(
                proto.gc_rule.as_ref().and_then(GcRule::from_proto).as_ref(),
                family.gc_rule()
            );
            assert_eq!(
                ValueType::from_proto(proto.value_type.as_ref()),
                Ok(family.value_type())
            );
        }
        assert!(ColumnFamily::new("x").to_proto().gc_rule.is_none());
        assert_eq!(GcRule::from_proto(&admin::GcRule { rule: None }), None);
        let unknown = admin::Type {
            kind: Some(admin::r#type::Kind::BoolType(admin::r#type::Bool {})),
        };
        assert!(ValueType::from_proto(Some(&unknown)).is_err());
    }
}
