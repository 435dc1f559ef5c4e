//! Dynamic destinations: the table each row goes to.
//!
//! A [`Destination`] is one fixed table, a [`TableTemplate`] filled from each row's fields
//! (`db.events_{region}`), or a function of the row. [`Destination::route`] splits a batch
//! into one batch per destination, keeping the rows' order within each.

use std::fmt;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StructArray, UInt32Array};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Schema};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A function choosing a row's destination: given the batch and the row index.
pub type DestinationFn = Arc<dyn Fn(&RecordBatch, usize) -> Result<String> + Send + Sync>;

/// Where rows go.
#[derive(Clone)]
pub enum Destination {
    /// Every row to one table.
    Table(String),
    /// Each row to the table its fields fill in.
    Template(TableTemplate),
    /// Each row to the table a function names. Cannot be serialized.
    Function(DestinationFn),
}

impl Destination {
    /// Reads a destination as written in options: a name with `{field}` placeholders is a
    /// template, anything else a fixed table. Blank names are rejected.
    pub fn parse(text: &str) -> Result<Destination> {
        if text.trim().is_empty() {
            return Err(Error::invalid_config(
                "table",
                "the destination table name is blank",
            ));
        }
        if text.contains('{') || text.contains('}') {
            Ok(Destination::Template(TableTemplate::parse(text)?))
        } else {
            Ok(Destination::Table(text.to_string()))
        }
    }

    /// The fixed table, when every row goes to one.
    pub fn fixed(&self) -> Option<&str> {
        match self {
            Destination::Table(t) => Some(t),
            _ => None,
        }
    }

    /// Checks, before any data, that a template's fields exist in `schema`.
    pub fn validate(&self, schema: &Schema) -> Result<()> {
        match self {
            Destination::Template(t) => t.validate(schema),
            _ => Ok(()),
        }
    }

    /// Splits `batch` by destination, in order of first appearance; rows keep their order.
    pub fn route(&self, batch: &RecordBatch) -> Result<Vec<(String, RecordBatch)>> {
        Ok(self
            .route_rows(batch)?
            .into_iter()
            .map(|r| (r.destination, r.batch))
            .collect())
    }

    /// Like [`Destination::route`], also giving each part's row positions in `batch`.
    pub fn route_rows(&self, batch: &RecordBatch) -> Result<Vec<RoutedRows>> {
        let names = match self {
            Destination::Table(t) => {
                return Ok(vec![RoutedRows {
                    destination: t.clone(),
                    batch: batch.clone(),
                    rows: (0..batch.num_rows() as u32).collect(),
                }]);
            }
            Destination::Template(t) => t.render_rows(batch)?,
            Destination::Function(f) => (0..batch.num_rows())
                .map(|row| f(batch, row))
                .collect::<Result<Vec<_>>>()?,
        };
        group_rows(batch, names)
    }
}

/// The rows of a batch bound for one destination.
#[derive(Clone, Debug)]
pub struct RoutedRows {
    /// The destination.
    pub destination: String,
    /// The rows, in their original order.
    pub batch: RecordBatch,
    /// Their positions in the batch they came from.
    pub rows: Vec<u32>,
}

fn group_rows(batch: &RecordBatch, names: Vec<String>) -> Result<Vec<RoutedRows>> {
    let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
    for (row, name) in names.into_iter().enumerate() {
        match groups.iter_mut().find(|(n, _)| *n == name) {
            Some((_, rows)) => rows.push(row as u32),
            None => groups.push((name, vec![row as u32])),
        }
    }
    groups
        .into_iter()
        .map(|(destination, rows)| {
            let part = if rows.len() == batch.num_rows() {
                batch.clone()
            } else {
                arrow_select::take::take_record_batch(batch, &UInt32Array::from(rows.clone()))?
            };
            Ok(RoutedRows {
                destination,
                batch: part,
                rows,
            })
        })
        .collect()
}

impl fmt::Debug for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Table(t) => f.debug_tuple("Table").field(t).finish(),
            Destination::Template(t) => f.debug_tuple("Template").field(&t.to_string()).finish(),
            Destination::Function(_) => f.write_str("Function(..)"),
        }
    }
}

impl PartialEq for Destination {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Destination::Table(a), Destination::Table(b)) => a == b,
            (Destination::Template(a), Destination::Template(b)) => a == b,
            (Destination::Function(a), Destination::Function(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Table(t) => f.write_str(t),
            Destination::Template(t) => t.fmt(f),
            Destination::Function(_) => f.write_str("<function>"),
        }
    }
}

impl Serialize for Destination {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Destination::Function(_) => Err(serde::ser::Error::custom(
                "a function destination cannot be serialized; use a table name or a template",
            )),
            other => s.collect_str(other),
        }
    }
}

impl<'de> Deserialize<'de> for Destination {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Destination::parse(&text).map_err(|e| serde::de::Error::custom(e.message()))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Part {
    Text(String),
    Field(Vec<String>),
}

/// A table name with `{field}` placeholders filled from each row, e.g. `db.events_{region}`
/// or `logs_{user.country}`. A placeholder names a top-level field or a path into structs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableTemplate {
    parts: Vec<Part>,
}

impl TableTemplate {
    /// Parses a template; unbalanced braces and blank placeholders are rejected.
    pub fn parse(text: &str) -> Result<TableTemplate> {
        let bad = |why: &str| Error::invalid_config("table", format!("template {text:?}: {why}"));
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                None => {
                    parts.push(Part::Text(rest.to_string()));
                    break;
                }
                Some(i) if rest.as_bytes()[i] == b'}' => return Err(bad("a '}' has no opening '{'")),
                Some(i) => {
                    if i > 0 {
                        parts.push(Part::Text(rest[..i].to_string()));
                    }
                    let after = &rest[i + 1..];
                    let end = after.find('}').ok_or_else(|| bad("a '{' is never closed"))?;
                    let name = after[..end].trim();
                    if name.is_empty() || name.contains('{') || name.split('.').any(|s| s.trim().is_empty()) {
                        return Err(bad("a placeholder is blank or malformed"));
                    }
                    parts.push(Part::Field(name.split('.').map(str::to_string).collect()));
                    rest = &after[end + 1..];
                }
            }
        }
        if !parts.iter().any(|p| matches!(p, Part::Field(_))) {
            return Err(bad("it has no {field} placeholder"));
        }
        Ok(TableTemplate { parts })
    }

    /// The fields the template reads, as dotted paths.
    pub fn fields(&self) -> Vec<String> {
        self.parts
            .iter()
            .filter_map(|p| match p {
                Part::Field(path) => Some(path.join(".")),
                Part::Text(_) => None,
            })
            .collect()
    }

    /// Checks that every placeholder names a non-nested field of `schema`.
    pub fn validate(&self, schema: &Schema) -> Result<()> {
        for part in &self.parts {
            if let Part::Field(path) = part {
                let mut fields = schema.fields().clone();
                let mut data_type = None;
                for segment in path {
                    let field = fields.iter().find(|f| f.name() == segment).ok_or_else(|| {
                        Error::invalid_input(format!(
                            "destination template {self}: the rows have no field {}",
                            path.join(".")
                        ))
                        .with_context("column", path.join("."))
                    })?;
                    data_type = Some(field.data_type().clone());
                    fields = match field.data_type() {
                        DataType::Struct(children) => children.clone(),
                        _ => Default::default(),
                    };
                }
                if matches!(
                    data_type,
                    Some(
                        DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) | DataType::Map(..)
                    )
                ) {
                    return Err(Error::invalid_input(format!(
                        "destination template {self}: field {} is nested and cannot name a table",
                        path.join(".")
                    )));
                }
            }
        }
        Ok(())
    }

    /// The destination of every row of `batch`.
    pub fn render_rows(&self, batch: &RecordBatch) -> Result<Vec<String>> {
        self.validate(batch.schema().as_ref())?;
        let columns: Vec<Option<(String, ArrayRef)>> = self
            .parts
            .iter()
            .map(|p| match p {
                Part::Field(path) => Some((path.join("."), column_at(batch, path))),
                Part::Text(_) => None,
            })
            .collect();
        let options = FormatOptions::default();
        let formatters = columns
            .iter()
            .map(|c| {
                c.as_ref()
                    .map(|(_, a)| ArrayFormatter::try_new(a.as_ref(), &options))
                    .transpose()
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        (0..batch.num_rows())
            .map(|row| {
                let mut name = String::new();
                for ((part, column), formatter) in self.parts.iter().zip(&columns).zip(&formatters) {
                    match (part, column, formatter) {
                        (Part::Text(t), _, _) => name.push_str(t),
                        (Part::Field(_), Some((path, array)), Some(formatter)) => {
                            if array.is_null(row) {
                                return Err(Error::invalid_input(format!(
                                    "row {row}: field {path} is null, and destination template {self} needs a value"
                                ))
                                .with_context("column", path.clone())
                                .with_context("row", row.to_string()));
                            }
                            name.push_str(&formatter.value(row).to_string());
                        }
                        _ => unreachable!("placeholders always have a column"),
                    }
                }
                Ok(name)
            })
            .collect()
    }
}

/// The column at a struct path; a null parent makes the child null.
fn column_at(batch: &RecordBatch, path: &[String]) -> ArrayRef {
    let mut array = batch.column_by_name(&path[0]).expect("validated").clone();
    for segment in &path[1..] {
        let parent = array
            .as_any()
            .downcast_ref::<StructArray>()
            .expect("validated struct");
        let child = parent.column_by_name(segment).expect("validated").clone();
        array = match parent.nulls() {
            None => child,
            Some(nulls) => {
                let merged = arrow_buffer_union(nulls, child.nulls());
                arrow_array::make_array(
                    child
                        .to_data()
                        .into_builder()
                        .nulls(Some(merged))
                        .build()
                        .expect("same length"),
                )
            }
        };
    }
    array
}

fn arrow_buffer_union(
    a: &arrow_buffer::NullBuffer,
    b: Option<&arrow_buffer::NullBuffer>,
) -> arrow_buffer::NullBuffer {
    arrow_buffer::NullBuffer::union(Some(a), b).expect("parent has nulls")
}

impl fmt::Display for TableTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in &self.parts {
            match part {
                Part::Text(t) => f.write_str(t)?,
                Part::Field(path) => write!(f, "{{{}}}", path.join("."))?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{Int32Array, StringArray};
    use arrow_schema::{Field, Fields};

    use super::*;

    fn batch() -> RecordBatch {
        let user = StructArray::new(
            Fields::from(vec![Field::new("country", DataType::Utf8, true)]),
            vec![Arc::new(StringArray::from(vec!["fr", "de", "fr", "it"])) as ArrayRef],
            None,
        );
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("region", DataType::Utf8, true),
                Field::new("n", DataType::Int32, false),
                Field::new("user", user.data_type().clone(), true),
            ])),
            vec![
                Arc::new(StringArray::from(vec![Some("eu"), Some("us"), Some("eu"), None])),
                Arc::new(Int32Array::from(vec![1, 2, 3, 4])),
                Arc::new(user),
            ],
        )
        .unwrap()
    }

    #[test]
    fn routes_rows_by_template_in_first_appearance_order() {
        let d = Destination::parse("db.events_{region}_{n}").unwrap();
        let routed = d.route(&batch().slice(0, 3)).unwrap();
        let names: Vec<&str> = routed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["db.events_eu_1", "db.events_us_2", "db.events_eu_3"]);

        let by_country = Destination::parse("logs_{user.country}")
            .unwrap()
            .route(&batch())
            .unwrap();
        assert_eq!(by_country.len(), 3);
        assert_eq!(by_country[0].0, "logs_fr");
        let ns = by_country[0]
            .1
            .column_by_name("n")
            .unwrap()
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap();
        assert_eq!(ns.values(), &[1, 3]);
    }

    #[test]
    fn a_null_template_field_names_the_row_and_field() {
        let err = Destination::parse("t_{region}")
            .unwrap()
            .route(&batch())
            .unwrap_err();
        assert!(err.to_string().contains("row 3: field region is null"), "{err}");
        assert_eq!(err.context_value("column"), Some("region"));
    }

    #[test]
    fn unknown_and_nested_fields_are_rejected() {
        let schema = batch().schema();
        let err = Destination::parse("t_{nope}")
            .unwrap()
            .validate(&schema)
            .unwrap_err();
        assert!(err.to_string().contains("no field nope"), "{err}");
        let err = Destination::parse("t_{user}")
            .unwrap()
            .validate(&schema)
            .unwrap_err();
        assert!(err.to_string().contains("nested"), "{err}");
    }

    #[test]
    fn malformed_templates_are_rejected() {
        for bad in ["t_{", "t_}", "t_{}", "t_{a.}", "  "] {
            assert!(Destination::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Destination::parse("db.fixed").unwrap(),
            Destination::Table("db.fixed".into())
        );
    }

    #[test]
    fn functions_route_and_refuse_to_serialize() {
        let f: DestinationFn = Arc::new(|b: &RecordBatch, row| {
            let n = b
                .column(1)
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap()
                .value(row);
            Ok(if n % 2 == 0 { "even".into() } else { "odd".into() })
        });
        let d = Destination::Function(f);
        let routed = d.route(&batch()).unwrap();
        assert_eq!(
            routed
                .iter()
                .map(|(n, b)| (n.as_str(), b.num_rows()))
                .collect::<Vec<_>>(),
            [("odd", 2), ("even", 2)]
        );
        assert!(serde_json::to_string(&d).is_err());
    }

    #[test]
    fn serde_round_trip() {
        for text in ["db.events_{region}", "plain_table"] {
            let d = Destination::parse(text).unwrap();
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<Destination>(&json).unwrap(), d);
        }
    }
}
