//! Dynamic destinations: the table each row goes to.
//!
//! A [`Destination`] is one fixed table, a [`TableTemplate`] filled from each row's fields
//! (`db.events_{region}`), or a function of the row. [`Destination::assign`] says which
//! rows go to which table, and [`Destination::route_rows`] splits a batch into one batch per
//! destination, keeping the rows' order within each. A row no table can be named for (a
//! null or unsafe template value, a function's error) is an [`UnroutedRow`]: the sinks make
//! it a failed record and write the rest.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StructArray, UInt32Array};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Schema};
use serde::{Deserialize, Serialize};

use crate::sink::{FailedRecord, row_to_json};
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

    /// Which rows of `batch` go to which table, tables in order of first appearance and
    /// rows in their order, and the rows no table could be named for. Errors only for the
    /// whole batch (a template field the rows do not have).
    pub fn assign(&self, batch: &RecordBatch) -> Result<Assignment> {
        let names: Vec<Result<String>> = match self {
            Destination::Table(t) => {
                return Ok(Assignment {
                    tables: vec![(t.clone(), (0..batch.num_rows() as u32).collect())],
                    unrouted: Vec::new(),
                });
            }
            Destination::Template(t) => t.render_rows(batch)?,
            Destination::Function(f) => (0..batch.num_rows()).map(|row| f(batch, row)).collect(),
        };
        let mut assignment = Assignment::default();
        let mut positions: HashMap<String, usize> = HashMap::new();
        for (row, name) in names.into_iter().enumerate() {
            let row = row as u32;
            match name {
                Ok(name) => match positions.get(&name) {
                    Some(&i) => assignment.tables[i].1.push(row),
                    None => {
                        positions.insert(name.clone(), assignment.tables.len());
                        assignment.tables.push((name, vec![row]));
                    }
                },
                Err(error) => assignment.unrouted.push(UnroutedRow { row, error }),
            }
        }
        Ok(assignment)
    }

    /// Like [`Destination::assign`], with each table's rows taken out as a batch.
    pub fn route_rows(&self, batch: &RecordBatch) -> Result<Routing> {
        let Assignment { tables, unrouted } = self.assign(batch)?;
        let parts = tables
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
            .collect::<Result<_>>()?;
        Ok(Routing { parts, unrouted })
    }
}

/// Which rows of a batch go to which table.
#[derive(Debug, Default)]
pub struct Assignment {
    /// Each table and the positions of its rows, tables in order of first appearance.
    pub tables: Vec<(String, Vec<u32>)>,
    /// The rows no table could be named for.
    pub unrouted: Vec<UnroutedRow>,
}

/// A batch split by destination.
#[derive(Debug)]
pub struct Routing {
    /// One part per table, in order of first appearance.
    pub parts: Vec<RoutedRows>,
    /// The rows no table could be named for.
    pub unrouted: Vec<UnroutedRow>,
}

/// A row no table could be named for, and why (naming the row and the field).
#[derive(Debug)]
pub struct UnroutedRow {
    /// Its position in the batch.
    pub row: u32,
    /// Why, with the row and the field in its context.
    pub error: Error,
}

impl UnroutedRow {
    /// The failed record a sink reports for this row of `batch`, `index` being its position
    /// among all rows given to the sink (the reason names that row).
    pub fn failed_record(&self, destination: &Destination, batch: &RecordBatch, index: u64) -> FailedRecord {
        FailedRecord {
            source: None,
            destination: destination.to_string(),
            index: Some(index),
            record: row_to_json(batch, self.row as usize),
            reason: format!("row {index}: {}", self.error.message()),
        }
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

    /// Checks that every placeholder names a non-nested field of `schema`; an error is the
    /// job's (invalid configuration of `table`), naming the column.
    pub fn validate(&self, schema: &Schema) -> Result<()> {
        for part in &self.parts {
            if let Part::Field(path) = part {
                let mut fields = schema.fields().clone();
                let mut data_type = None;
                for segment in path {
                    let field = fields.iter().find(|f| f.name() == segment).ok_or_else(|| {
                        Error::invalid_config(
                            "table",
                            format!("template {self}: the rows have no field {}", path.join(".")),
                        )
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
                    return Err(Error::invalid_config(
                        "table",
                        format!(
                            "template {self}: field {} is nested and cannot name a table",
                            path.join(".")
                        ),
                    )
                    .with_context("column", path.join(".")));
                }
            }
        }
        Ok(())
    }

    /// The destination of every row of `batch`: the table it names, or why it names none
    /// (a null value, or one that is not [safe in a table name](is_safe_value)), naming the
    /// field, with the row's position in the context. Errors for the whole batch only when
    /// a field is missing.
    pub fn render_rows(&self, batch: &RecordBatch) -> Result<Vec<Result<String>>> {
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
        let unroutable = |row: usize, path: &str, why: String| {
            Error::invalid_input(format!("field {path} {why}"))
                .with_context("column", path.to_string())
                .with_context("row", row.to_string())
        };
        Ok((0..batch.num_rows())
            .map(|row| {
                let mut name = String::new();
                for ((part, column), formatter) in self.parts.iter().zip(&columns).zip(&formatters) {
                    match (part, column, formatter) {
                        (Part::Text(t), _, _) => name.push_str(t),
                        (Part::Field(_), Some((path, array)), Some(formatter)) => {
                            if array.is_null(row) {
                                let why = format!("is null, and destination template {self} needs a value");
                                return Err(unroutable(row, path, why));
                            }
                            let value = formatter.value(row).to_string();
                            if !is_safe_value(&value) {
                                let why = format!(
                                    "is {value:?}, which destination template {self} cannot put in a \
                                     table name: a value may hold only letters, digits, '_' and '-' \
                                     (a '.' or '/' would change the table's namespace or location)"
                                );
                                return Err(unroutable(row, path, why));
                            }
                            name.push_str(&value);
                        }
                        _ => unreachable!("placeholders always have a column"),
                    }
                }
                Ok(name)
            })
            .collect())
    }
}

/// Whether a row's value may fill a template's placeholder: not empty, and only letters,
/// digits, `_` and `-`. Anything else could move a table: `a.b` adds a namespace level,
/// `a/b` a directory under the warehouse, so two values would share one location. Refusing
/// is chosen over escaping so that a table's name always reads as the value it came from.
pub fn is_safe_value(value: &str) -> bool {
    !value.is_empty() && value.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-')
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
    use crate::ErrorKind;

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

    /// Each part's destination and row count.
    fn parts(routing: &Routing) -> Vec<(&str, usize)> {
        routing
            .parts
            .iter()
            .map(|p| (p.destination.as_str(), p.batch.num_rows()))
            .collect()
    }

    #[test]
    fn routes_rows_by_template_in_first_appearance_order() {
        let d = Destination::parse("db.events_{region}_{n}").unwrap();
        let routed = d.route_rows(&batch().slice(0, 3)).unwrap();
        assert_eq!(
            parts(&routed),
            [
                ("db.events_eu_1", 1),
                ("db.events_us_2", 1),
                ("db.events_eu_3", 1)
            ]
        );

        let by_country = Destination::parse("logs_{user.country}")
            .unwrap()
            .route_rows(&batch())
            .unwrap();
        assert_eq!(
            parts(&by_country),
            [("logs_fr", 2), ("logs_de", 1), ("logs_it", 1)]
        );
        assert_eq!(by_country.parts[0].rows, [0, 2]);
        let ns = by_country.parts[0]
            .batch
            .column_by_name("n")
            .unwrap()
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap();
        assert_eq!(ns.values(), &[1, 3]);
    }

    #[test]
    fn a_null_template_field_leaves_that_row_unrouted_naming_the_row_and_field() {
        let d = Destination::parse("t_{region}").unwrap();
        let routed = d.route_rows(&batch()).unwrap();
        assert_eq!(parts(&routed), [("t_eu", 2), ("t_us", 1)]);
        assert_eq!(routed.unrouted.len(), 1);
        let unrouted = &routed.unrouted[0];
        assert_eq!(unrouted.row, 3);
        let err = &unrouted.error;
        assert!(err.to_string().contains("field region is null"), "{err}");
        assert_eq!(err.context_value("column"), Some("region"));
        assert_eq!(err.context_value("row"), Some("3"));
        let failed = unrouted.failed_record(&d, &batch(), 103);
        assert_eq!(failed.destination, "t_{region}");
        assert_eq!(failed.index, Some(103));
        assert_eq!(failed.record.unwrap()["n"], 4);
        assert!(
            failed.reason.starts_with("row 103: field region is null"),
            "{}",
            failed.reason
        );
    }

    #[test]
    fn values_that_would_move_a_table_are_refused_per_row() {
        let values = ["a/b", "a.b", "ok_1", "", "x y", "..", "é-ß", "a\\b", "a\nb"];
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("col", DataType::Utf8, false)])),
            vec![Arc::new(StringArray::from(values.to_vec()))],
        )
        .unwrap();
        let routed = Destination::parse("db.t_{col}")
            .unwrap()
            .route_rows(&batch)
            .unwrap();
        assert_eq!(parts(&routed), [("db.t_ok_1", 1), ("db.t_é-ß", 1)]);
        let refused: Vec<u32> = routed.unrouted.iter().map(|u| u.row).collect();
        assert_eq!(refused, [0, 1, 3, 4, 5, 7, 8]);
        let first = routed.unrouted[0].error.to_string();
        assert!(
            first.contains("field col is \"a/b\"") && first.contains("only letters, digits"),
            "{first}"
        );
    }

    #[test]
    fn a_function_error_leaves_that_row_unrouted() {
        let f: DestinationFn = Arc::new(|_: &RecordBatch, row| match row {
            1 => Err(Error::invalid_input("no table for row 1")),
            _ => Ok("t".into()),
        });
        let assignment = Destination::Function(f).assign(&batch()).unwrap();
        assert_eq!(assignment.tables, [("t".to_string(), vec![0, 2, 3])]);
        assert_eq!(assignment.unrouted[0].row, 1);
    }

    #[test]
    fn unknown_and_nested_fields_are_rejected() {
        let schema = batch().schema();
        let err = Destination::parse("t_{nope}")
            .unwrap()
            .validate(&schema)
            .unwrap_err();
        assert!(err.to_string().contains("no field nope"), "{err}");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert_eq!(
            (err.context_value("field"), err.context_value("column")),
            (Some("table"), Some("nope"))
        );
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
        let routed = d.route_rows(&batch()).unwrap();
        assert_eq!(parts(&routed), [("odd", 2), ("even", 2)]);
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
