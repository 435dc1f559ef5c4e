//! Partition fields and sort fields as users write them: `day(ts)`, `bucket(16, id)`,
//! `truncate(4, name) as prefix`, `region`; `id desc nulls last`.

use std::fmt;
use std::str::FromStr;

use iceberg::spec::{
    NestedField, NullOrder, Schema as IcebergSchema, SortDirection, SortField as IcebergSortField, SortOrder,
    Transform, UnboundPartitionSpec,
};
use outflow_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::client::IcebergResultExt;

/// One partition field: a transform of a source column, with the partition's name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PartitionField {
    /// The source column (a top-level or dotted struct path).
    pub source: String,
    /// The transform.
    pub transform: Transform,
    /// The partition field's name (Iceberg's default when absent: `ts_day`, `id_bucket`...).
    pub name: Option<String>,
}

impl PartitionField {
    /// The partition field's name: the given one, or Iceberg's default for the transform.
    pub fn partition_name(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        let source = self.source.replace('.', "_");
        match self.transform {
            Transform::Identity => source,
            Transform::Bucket(_) => format!("{source}_bucket"),
            Transform::Truncate(_) => format!("{source}_trunc"),
            Transform::Year => format!("{source}_year"),
            Transform::Month => format!("{source}_month"),
            Transform::Day => format!("{source}_day"),
            Transform::Hour => format!("{source}_hour"),
            Transform::Void => format!("{source}_null"),
            Transform::Unknown => format!("{source}_unknown"),
        }
    }
}

impl FromStr for PartitionField {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid_config(
                "partition_fields",
                format!(
                    "{text:?}: {why}; write `column`, `identity(column)`, `bucket(N, column)`, \
                     `truncate(W, column)`, `year|month|day|hour(column)`, optionally followed by `as name`"
                ),
            )
        };
        let (expr, name) = match text.split_once(" as ") {
            Some((expr, name)) if !name.trim().is_empty() => (expr.trim(), Some(name.trim().to_string())),
            Some(_) => return Err(bad("the name after `as` is blank")),
            None => (text.trim(), None),
        };
        if expr.is_empty() {
            return Err(bad("it is blank"));
        }
        let Some((function, rest)) = expr.split_once('(') else {
            return Ok(PartitionField {
                source: check_column(expr, bad)?,
                transform: Transform::Identity,
                name,
            });
        };
        let args = rest
            .strip_suffix(')')
            .ok_or_else(|| bad("a parenthesis is not closed"))?;
        let args: Vec<&str> = args.split(',').map(str::trim).collect();
        let number = |s: &str| {
            s.parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| bad("N and W must be positive integers"))
        };
        let (transform, source) = match (function.trim().to_ascii_lowercase().as_str(), args.as_slice()) {
            ("identity", [c]) => (Transform::Identity, *c),
            ("bucket", [n, c]) => (Transform::Bucket(number(n)?), *c),
            ("truncate", [w, c]) => (Transform::Truncate(number(w)?), *c),
            ("year" | "years", [c]) => (Transform::Year, *c),
            ("month" | "months", [c]) => (Transform::Month, *c),
            ("day" | "days", [c]) => (Transform::Day, *c),
            ("hour" | "hours", [c]) => (Transform::Hour, *c),
            _ => return Err(bad("unknown transform or wrong number of arguments")),
        };
        Ok(PartitionField {
            source: check_column(source, bad)?,
            transform,
            name,
        })
    }
}

fn check_column(column: &str, bad: impl Fn(&str) -> Error) -> Result<String> {
    if column.is_empty() || column.split('.').any(|s| s.trim().is_empty()) || column.contains(['(', ')', ' '])
    {
        return Err(bad("the column name is blank or malformed"));
    }
    Ok(column.to_string())
}

impl fmt::Display for PartitionField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.transform {
            Transform::Identity => write!(f, "{}", self.source)?,
            Transform::Bucket(n) => write!(f, "bucket({n}, {})", self.source)?,
            Transform::Truncate(w) => write!(f, "truncate({w}, {})", self.source)?,
            other => write!(f, "{other}({})", self.source)?,
        }
        if let Some(name) = &self.name {
            write!(f, " as {name}")?;
        }
        Ok(())
    }
}

impl Serialize for PartitionField {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PartitionField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        text.parse()
            .map_err(|e: Error| serde::de::Error::custom(e.message()))
    }
}

/// One field of a sort order: `column [asc|desc] [nulls first|last]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SortField {
    /// The column.
    pub source: String,
    /// Descending when true.
    pub descending: bool,
    /// Nulls first when true (the default for ascending), last otherwise.
    pub nulls_first: bool,
}

impl FromStr for SortField {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid_config(
                "sort_order",
                format!("{text:?}: {why}; write `column [asc|desc] [nulls first|nulls last]`"),
            )
        };
        let words: Vec<String> = text.split_whitespace().map(str::to_ascii_lowercase).collect();
        let source = text.split_whitespace().next().ok_or_else(|| bad("it is blank"))?;
        let (descending, rest) = match words.get(1).map(String::as_str) {
            Some("asc") => (false, &words[2..]),
            Some("desc") => (true, &words[2..]),
            _ => (false, &words[1..]),
        };
        let nulls_first = match rest.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            [] => !descending,
            ["nulls", "first"] => true,
            ["nulls", "last"] => false,
            _ => return Err(bad("unexpected words after the column")),
        };
        Ok(SortField {
            source: check_column(source, bad)?,
            descending,
            nulls_first,
        })
    }
}

impl fmt::Display for SortField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} nulls {}",
            self.source,
            if self.descending { "desc" } else { "asc" },
            if self.nulls_first { "first" } else { "last" }
        )
    }
}

impl Serialize for SortField {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SortField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        text.parse()
            .map_err(|e: Error| serde::de::Error::custom(e.message()))
    }
}

/// The option key of the partition fields, as errors name it.
const PARTITION_FIELDS: &str = "table_options.partition_fields";
/// The option key of the sort order, as errors name it.
const SORT_ORDER: &str = "table_options.sort_order";

/// The column `column` of `schema`, which a setting (`key`, the field as written) names.
fn source_field<'a>(
    schema: &'a IcebergSchema,
    column: &str,
    key: &str,
    written: &str,
) -> Result<&'a NestedField> {
    schema.field_by_name(column).map(AsRef::as_ref).ok_or_else(|| {
        Error::invalid_config(key, format!("{written}: the rows have no column {column}"))
            .with_context("column", column.to_string())
    })
}

/// A transform's name as users write it (`bucket`, not iceberg-rust's `bucket[16]`).
fn transform_name(transform: Transform) -> String {
    match transform {
        Transform::Bucket(_) => "bucket".into(),
        Transform::Truncate(_) => "truncate".into(),
        other => other.to_string(),
    }
}

/// The partition spec for `fields` over `schema` (field ids from `schema`). Every source
/// column must exist and have a type its transform takes, and the spec must bind to the
/// schema (no name colliding with a column, no field twice), as creating the table requires.
pub fn partition_spec(
    schema: &IcebergSchema,
    fields: &[PartitionField],
) -> Result<Option<UnboundPartitionSpec>> {
    if fields.is_empty() {
        return Ok(None);
    }
    let mut builder = UnboundPartitionSpec::builder();
    for field in fields {
        let written = field.to_string();
        let source = source_field(schema, &field.source, PARTITION_FIELDS, &written)?;
        if field.transform.result_type(&source.field_type).is_err() {
            return Err(Error::invalid_config(
                PARTITION_FIELDS,
                format!(
                    "{written}: column {} is {}, which the {} transform does not take",
                    field.source,
                    source.field_type,
                    transform_name(field.transform)
                ),
            )
            .with_context("column", field.source.clone()));
        }
        builder = builder
            .add_partition_field(source.id, field.partition_name(), field.transform)
            .map_err(|e| Error::invalid_config(PARTITION_FIELDS, format!("{written}: {}", e.message())))?;
    }
    let spec = builder.build();
    spec.clone()
        .bind(schema.clone())
        .map_err(|e| Error::invalid_config(PARTITION_FIELDS, e.message()))?;
    Ok(Some(spec))
}

/// The sort order for `fields` over `schema`.
pub fn sort_order(schema: &IcebergSchema, fields: &[SortField]) -> Result<Option<SortOrder>> {
    if fields.is_empty() {
        return Ok(None);
    }
    let mut builder = SortOrder::builder();
    builder.with_order_id(1);
    for field in fields {
        let written = field.to_string();
        let source = source_field(schema, &field.source, SORT_ORDER, &written)?;
        if !source.field_type.is_primitive() {
            return Err(Error::invalid_config(
                SORT_ORDER,
                format!(
                    "{written}: column {} is {}; sort by a column of a primitive type",
                    field.source, source.field_type
                ),
            )
            .with_context("column", field.source.clone()));
        }
        builder.with_sort_field(
            IcebergSortField::builder()
                .source_id(source.id)
                .transform(Transform::Identity)
                .direction(if field.descending {
                    SortDirection::Descending
                } else {
                    SortDirection::Ascending
                })
                .null_order(if field.nulls_first {
                    NullOrder::First
                } else {
                    NullOrder::Last
                })
                .build(),
        );
    }
    Ok(Some(builder.build(schema).doing("building the sort order")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_fields_parse_every_transform() {
        let cases = [
            ("region", Transform::Identity, "region"),
            ("identity(region)", Transform::Identity, "region"),
            ("bucket(16, id)", Transform::Bucket(16), "id_bucket"),
            ("truncate(4,name)", Transform::Truncate(4), "name_trunc"),
            ("year(ts)", Transform::Year, "ts_year"),
            ("month(ts)", Transform::Month, "ts_month"),
            ("day(ts)", Transform::Day, "ts_day"),
            ("hour(ts)", Transform::Hour, "ts_hour"),
            ("day(ts) as day", Transform::Day, "day"),
        ];
        for (text, transform, name) in cases {
            let f: PartitionField = text.parse().unwrap();
            assert_eq!(
                (f.transform, f.partition_name().as_str()),
                (transform, name),
                "{text}"
            );
            let again: PartitionField = f.to_string().parse().unwrap();
            assert_eq!(again, f);
        }
    }

    #[test]
    fn malformed_partition_fields_name_the_setting() {
        for bad in [
            "",
            "bucket(id)",
            "bucket(0, id)",
            "week(ts)",
            "day(ts",
            "day(ts) as ",
            "day()",
        ] {
            let err = bad.parse::<PartitionField>().unwrap_err();
            assert_eq!(err.context_value("field"), Some("partition_fields"), "{bad:?}");
        }
    }

    #[test]
    fn sort_fields_parse() {
        let f: SortField = "id".parse().unwrap();
        assert_eq!((f.descending, f.nulls_first), (false, true));
        let f: SortField = "ts DESC".parse().unwrap();
        assert_eq!((f.descending, f.nulls_first), (true, false));
        let f: SortField = "n asc nulls last".parse().unwrap();
        assert!(!f.nulls_first);
        assert!("n sideways".parse::<SortField>().is_err());
        assert_eq!(serde_json::to_string(&f).unwrap(), "\"n asc nulls last\"");
    }
}
