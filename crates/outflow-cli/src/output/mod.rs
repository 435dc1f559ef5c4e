//! What the command line prints: progress on stderr, and on stdout the summary table, the
//! plan tree, or one JSON document with `--json`.
//!
//! Colour goes to terminals only: [`Style::for_stdout`] turns it off when stdout is not a
//! terminal or `NO_COLOR` is set, so redirected output is plain text.

pub mod document;
pub mod plan;
pub mod progress;
pub mod summary;

use std::io::IsTerminal;

use arrow::datatypes::{Field, Schema, SchemaRef};
use serde::Serialize;

/// Whether text is coloured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    color: bool,
}

/// The colours and emphases the output uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Paint {
    /// Added columns.
    Green,
    /// Relaxed columns.
    Yellow,
    /// Promoted columns.
    Cyan,
    /// Conflicts and errors.
    Red,
    /// Headings.
    Bold,
    /// Structure that only groups.
    Dim,
}

impl Style {
    /// Colour when stdout is a terminal and `NO_COLOR` is unset or empty.
    pub fn for_stdout() -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            color: std::io::stdout().is_terminal() && !no_color,
        }
    }

    /// Plain text.
    pub fn plain() -> Style {
        Style { color: false }
    }

    /// Coloured text.
    pub fn colored() -> Style {
        Style { color: true }
    }

    /// `text` in `paint`, or as it is without colour.
    pub fn paint(self, paint: Paint, text: &str) -> String {
        if !self.color {
            return text.to_string();
        }
        let code = match paint {
            Paint::Green => "32",
            Paint::Yellow => "33",
            Paint::Cyan => "36",
            Paint::Red => "31",
            Paint::Bold => "1",
            Paint::Dim => "2",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }
}

/// One top-level column, described for people and for JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Column {
    /// The column's name.
    pub name: String,
    /// Its type as the core schema model (and job files) write it, `long`, `string`,
    /// `struct<...>`; Arrow's name for types the model does not have.
    #[serde(rename = "type")]
    pub data_type: String,
    /// Whether it may hold nulls.
    pub nullable: bool,
}

/// The columns of `schema`.
pub fn columns(schema: &SchemaRef) -> Vec<Column> {
    schema.fields().iter().map(|f| column(f)).collect()
}

fn column(field: &Field) -> Column {
    let one = Schema::new(vec![field.clone()]);
    let data_type = match outflow_core::schema::Schema::from_arrow(&one) {
        Ok(schema) => schema.fields[0].data_type.to_string(),
        Err(_) => field.data_type().to_string(),
    };
    Column {
        name: field.name().clone(),
        data_type,
        nullable: field.is_nullable(),
    }
}

/// Pads `cells` into left-aligned columns (numbers right-aligned), two spaces apart.
fn table(rows: &[Vec<String>], numeric: &[bool]) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if numeric.get(c).copied().unwrap_or(false) {
                    format!("{cell:>width$}", width = widths[c])
                } else {
                    format!("{cell:<width$}", width = widths[c])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::DataType;

    use super::*;

    #[test]
    fn columns_use_the_core_type_names() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("n", DataType::UInt64, true),
            Field::new_list("tags", Field::new("element", DataType::Utf8, true), true),
        ]));
        let described = columns(&schema);
        assert_eq!(described[0].data_type, "long");
        assert!(!described[0].nullable);
        assert_eq!(described[1].data_type, "UInt64");
        assert_eq!(described[2].data_type, "list<string>");
    }

    #[test]
    fn paint_is_plain_without_colour() {
        assert_eq!(Style::plain().paint(Paint::Red, "x"), "x");
        assert_eq!(Style::colored().paint(Paint::Red, "x"), "\x1b[31mx\x1b[0m");
    }

    #[test]
    fn tables_align() {
        let rows = vec![
            vec!["destination".to_string(), "rows".to_string()],
            vec!["db.a".to_string(), "1,000".to_string()],
        ];
        assert_eq!(
            table(&rows, &[false, true]),
            "destination   rows\ndb.a         1,000\n"
        );
    }
}
