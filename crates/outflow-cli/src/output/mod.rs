//! What the command line prints: progress on stderr, and on stdout the summary table, the
//! plan tree, or one JSON document with `--json`.
//!
//! Colour goes to terminals only: [`Style::for_stdout`] turns it off when stdout is not a
//! terminal or `NO_COLOR` is set, so redirected output is plain text.
//!
//! Everything goes through [`print`], [`println`] and [`eprintln`] rather than the macros
//! of the same names, which panic when the reader has gone: `outflow check job.yaml | head
//! -3` closes stdout after three lines, and that ends the command quietly.

pub mod document;
pub mod plan;
pub mod progress;
pub mod summary;

use std::fmt::Display;
use std::io::{IsTerminal, Write};

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
        Style::for_terminal(std::io::stdout().is_terminal())
    }

    /// Colour when stderr is a terminal and `NO_COLOR` is unset or empty.
    pub fn for_stderr() -> Style {
        Style::for_terminal(std::io::stderr().is_terminal())
    }

    fn for_terminal(terminal: bool) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            color: terminal && !no_color,
        }
    }

    /// Whether text is coloured.
    pub fn is_colored(self) -> bool {
        self.color
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

/// Writes `text` to stdout. When stdout is closed (the reading end of a pipe has gone, as
/// with `| head`), the process ends at once, with exit code 0 and no message: nobody is
/// left to read the rest. Any other failure to write ends it with exit code 1.
pub fn print(text: impl Display) {
    let mut out = std::io::stdout().lock();
    let Err(err) = write!(out, "{text}").and_then(|()| out.flush()) else {
        return;
    };
    if err.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln(format_args!("error: cannot write to stdout: {err}"));
    std::process::exit(crate::exit::ExitStatus::Failed.code().into());
}

/// [`print`] with a line break.
pub fn println(text: impl Display) {
    print(format_args!("{text}\n"));
}

/// Writes a line to stderr. A closed stderr loses it: there is nowhere else to say it.
pub fn eprintln(text: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// How much of an input an error quotes: at most this many characters of its first line.
pub const EXCERPT_CHARS: usize = 60;

pub use outflow_core::loads::{NAMED_FILES, some_names};

/// `text` as an error quotes it: its first line, cut to [`EXCERPT_CHARS`], ending in `...`
/// when anything was left out, so a whole file or a huge value never fills the terminal.
pub fn excerpt(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    let cut: String = line.chars().take(EXCERPT_CHARS).collect();
    if cut.len() < text.trim_end().len() {
        format!("{cut}...")
    } else {
        cut
    }
}

/// `message` with every double-quoted string in it (as Rust and serde quote input, with
/// `\"` and `\n` escapes) cut as [`excerpt`] cuts text: up to its first line break, at
/// most [`EXCERPT_CHARS`] characters.
pub fn shorten_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(1024));
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '"' {
            continue;
        }
        // The quoted text, escapes kept as written, up to the closing quote.
        let mut quoted: Vec<char> = Vec::new();
        let mut closed = false;
        while let Some(q) = chars.next() {
            match q {
                '\\' => {
                    quoted.push(q);
                    quoted.extend(chars.next());
                }
                '"' => {
                    closed = true;
                    break;
                }
                _ => quoted.push(q),
            }
        }
        let line_end = quoted
            .windows(2)
            .position(|w| w == ['\\', 'n'])
            .unwrap_or(quoted.len());
        let mut keep = line_end.min(EXCERPT_CHARS);
        // Never half an escape.
        if keep < quoted.len() && quoted[..keep].iter().rev().take_while(|c| **c == '\\').count() % 2 == 1 {
            keep -= 1;
        }
        out.extend(&quoted[..keep]);
        if keep < quoted.len() {
            out.push_str("...");
        }
        if closed {
            out.push('"');
        }
    }
    out
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
    fn quoted_input_is_cut_short() {
        assert_eq!(excerpt("short"), "short");
        assert_eq!(excerpt("two\nlines"), "two...");
        assert_eq!(
            excerpt(&"x".repeat(100)),
            format!("{}...", "x".repeat(EXCERPT_CHARS))
        );
        assert_eq!(excerpt("ends with a break\n"), "ends with a break");

        let long = format!(
            "invalid type: string {:?}, expected struct Job",
            "id,city ".repeat(50)
        );
        let short = shorten_quoted(&long);
        assert_eq!(
            short,
            format!(
                "invalid type: string \"{}...\", expected struct Job",
                &"id,city ".repeat(50)[..EXCERPT_CHARS]
            )
        );
        assert_eq!(
            shorten_quoted(r#"unknown field "a\"b\nc", expected "d""#),
            r#"unknown field "a\"b...", expected "d""#
        );
        assert_eq!(shorten_quoted("no quotes here"), "no quotes here");
        assert_eq!(shorten_quoted("dangling \"quote"), "dangling \"quote");
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
