//! CSV files, through arrow-csv's push decoder.
//!
//! The decoder is driven here rather than through arrow-csv's `Reader` so that errors can
//! name the file and a line counted the way an editor counts: arrow-csv numbers lines one
//! way for malformed records and another for unparsable values, and both are mapped to the
//! 1-based line of the record (header included) here.

use std::io::{BufRead, BufReader};
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::csv::reader::{Decoder, Format as CsvFormat, ReaderBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use outflow_core::{Error, Result};

use super::{
    Counting, FileReader, Input, RowOrigins, SourceFile, Unit, consumed, line_error, nulls_to_strings,
    open_counted, read_error,
};
use crate::job::CsvOptions;

/// Whether arrow-csv can parse text into values of type `t`.
pub(super) fn readable(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Null | Boolean
            | Int8
            | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Float32
            | Float64
            | Decimal32(..)
            | Decimal64(..)
            | Decimal128(..)
            | Decimal256(..)
            | Date32
            | Date64
            | Time32(_)
            | Time64(_)
            | Timestamp(..)
            | Utf8
            | Utf8View
    )
}

fn ascii(key: &str, c: char) -> Result<u8> {
    if c.is_ascii() {
        Ok(c as u8)
    } else {
        Err(Error::invalid_config(
            key,
            format!("{c:?} is not one ASCII character"),
        ))
    }
}

fn format(options: &CsvOptions) -> Result<CsvFormat> {
    let mut format = CsvFormat::default()
        .with_header(options.header)
        .with_delimiter(ascii("source.csv.delimiter", options.delimiter)?);
    if let Some(quote) = options.quote {
        format = format.with_quote(ascii("source.csv.quote", quote)?);
    }
    Ok(format)
}

/// Infers the schema from the first `infer_rows` rows of `file`.
pub(super) fn infer_schema(file: &SourceFile, options: &CsvOptions) -> Result<SchemaRef> {
    let format = format(options)?;
    let reader = BufReader::new(file.open()?);
    let (schema, _) = format
        .infer_schema(reader, Some(options.infer_rows))
        .map_err(|e| csv_error(file, e, None))?;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_name(without_bom(f.name())))
        .collect();
    let fields = with_zones(file, options, fields)?;
    Ok(Arc::new(nulls_to_strings(Schema::new(fields))))
}

/// arrow-csv infers every timestamp without a zone, and reading `2026-11-01T00:02:00Z` or
/// `...+01:00` into such a column would keep the UTC wall time and drop the zone. So the
/// inferred rows are read again as text: a timestamp column whose values all carry a zone
/// becomes `timestamptz` (values converted to UTC), one whose values carry none stays
/// `timestamp`, and one that mixes both is read as strings, since either choice would
/// misread some of them.
fn with_zones(file: &SourceFile, options: &CsvOptions, fields: Vec<Field>) -> Result<Vec<Field>> {
    let timestamps: Vec<usize> = (0..fields.len())
        .filter(|&i| matches!(fields[i].data_type(), DataType::Timestamp(_, None)))
        .collect();
    if timestamps.is_empty() {
        return Ok(fields);
    }
    let text = Schema::new(
        fields
            .iter()
            .map(|f| Field::new(f.name(), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    );
    let reader = BufReader::new(file.open()?);
    let batches = ReaderBuilder::new(Arc::new(text))
        .with_format(format(options)?)
        .with_projection(timestamps.clone())
        .with_bounds(0, options.infer_rows)
        .build_buffered(reader)
        .map_err(|e| csv_error(file, e, None))?;
    // Per timestamp column: whether a value with a zone, and one without, was seen.
    let mut seen = vec![(false, false); timestamps.len()];
    for batch in batches {
        let batch = batch.map_err(|e| csv_error(file, e, None))?;
        for (column, seen) in batch.columns().iter().zip(&mut seen) {
            for value in column.as_string::<i32>().iter().flatten() {
                if has_zone(value) {
                    seen.0 = true;
                } else {
                    seen.1 = true;
                }
            }
        }
    }
    let mut fields = fields;
    for (&i, seen) in timestamps.iter().zip(seen) {
        let field = &fields[i];
        let data_type = match (field.data_type(), seen) {
            (DataType::Timestamp(unit, _), (true, false)) => {
                DataType::Timestamp(*unit, Some("+00:00".into()))
            }
            (_, (true, true)) => DataType::Utf8,
            (other, _) => other.clone(),
        };
        fields[i] = field.clone().with_data_type(data_type);
    }
    Ok(fields)
}

/// Whether a timestamp arrow-csv inferred (`YYYY-MM-DD[T ]HH:MM:SS`, an optional fraction)
/// has anything after it, which arrow-csv reads as a zone: `Z`, `+01:00`, `-0500`.
fn has_zone(value: &str) -> bool {
    let rest = value.trim().get(19..).unwrap_or("");
    let rest = match rest.strip_prefix('.') {
        Some(fraction) => fraction.trim_start_matches(|c: char| c.is_ascii_digit()),
        None => rest,
    };
    !rest.trim().is_empty()
}

/// Reads one CSV file.
pub(super) struct CsvReader {
    file: SourceFile,
    reader: BufReader<Counting<Input>>,
    decoder: Decoder,
    /// Said after a value that does not parse, when the schema was inferred.
    hint: Option<String>,
    /// The line of the next record, counted as errors count them: one record a line.
    next_line: u64,
}

impl CsvReader {
    /// Opens `file`, checking its header against the schema's column names.
    pub(super) fn open(
        file: &SourceFile,
        schema: SchemaRef,
        options: &CsvOptions,
        batch_size: usize,
        explicit_schema: bool,
    ) -> Result<CsvReader> {
        let format = format(options)?;
        // An empty file (an empty partition) has no header to check and no rows.
        if options.header && file.size > 0 {
            check_header(file, &format, &schema)?;
        }
        let mut builder = ReaderBuilder::new(schema)
            .with_header(options.header)
            .with_delimiter(ascii("source.csv.delimiter", options.delimiter)?)
            .with_batch_size(batch_size);
        if let Some(quote) = options.quote {
            builder = builder.with_quote(ascii("source.csv.quote", quote)?);
        }
        let hint = (!explicit_schema).then(|| {
            format!(
                "the types were inferred from the first {} rows of the first file; \
                 give source.csv.schema or raise source.csv.infer_rows",
                options.infer_rows
            )
        });
        Ok(CsvReader {
            file: file.clone(),
            reader: open_counted(file)?,
            decoder: builder.build_decoder(),
            hint,
            next_line: if options.header { 2 } else { 1 },
        })
    }

    fn error(&self, err: ArrowError) -> Error {
        csv_error(&self.file, err, self.hint.as_deref())
    }
}

/// An arrow-csv error in `file`, with its line when the error gives one; `hint` follows a
/// value that does not parse.
fn csv_error(file: &SourceFile, err: ArrowError, hint: Option<&str>) -> Error {
    let (line, message) = locate(&err);
    let message = match (&err, hint) {
        (ArrowError::ParseError(_), Some(hint)) => format!("{message} ({hint})"),
        _ => message,
    };
    match line {
        Some(line) => line_error(file, line, message),
        None => read_error(file, message),
    }
}

impl FileReader for CsvReader {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let buf = self.reader.fill_buf().map_err(|e| read_error(&self.file, e))?;
            let decoded = self.decoder.decode(buf).map_err(|e| self.error(e))?;
            self.reader.consume(decoded);
            // Stop when the input is exhausted or a batch is full.
            if decoded == 0 || self.decoder.capacity() == 0 {
                break;
            }
        }
        self.decoder.flush().map_err(|e| self.error(e))
    }

    fn position(&self) -> u64 {
        consumed(&self.reader)
    }

    fn origins(&mut self, rows: usize) -> RowOrigins {
        let origins = RowOrigins::consecutive(Unit::Line, self.next_line, rows);
        self.next_line += rows as u64;
        origins
    }
}

fn check_header(file: &SourceFile, format: &CsvFormat, schema: &SchemaRef) -> Result<()> {
    let reader = BufReader::new(file.open()?);
    let (header, _) = format
        .infer_schema(reader, Some(0))
        .map_err(|e| read_error(file, e))?;
    let found: Vec<&str> = header.fields().iter().map(|f| without_bom(f.name())).collect();
    let expected: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    if found != expected {
        return Err(line_error(
            file,
            1,
            format!(
                "the header names the columns [{}], but the schema has [{}]",
                found.join(", "),
                expected.join(", ")
            ),
        ));
    }
    Ok(())
}

/// A header name without the byte-order mark spreadsheet programs put before the first one.
fn without_bom(name: &str) -> &str {
    name.strip_prefix('\u{feff}').unwrap_or(name)
}

/// The 1-based line an arrow-csv error is about, and its message with that line number.
fn locate(err: &ArrowError) -> (Option<u64>, String) {
    let text = err.to_string();
    let Some((start, end, number)) = find_line_number(&text) else {
        return (None, text);
    };
    // Value errors count lines from 0; record errors count from 1.
    let line = match err {
        ArrowError::ParseError(_) => number + 1,
        _ => number,
    };
    (Some(line), format!("{}{line}{}", &text[..start], &text[end..]))
}

/// Where the number after the first "line " is in `text`, and its value.
fn find_line_number(text: &str) -> Option<(usize, usize, u64)> {
    let start = text.find("line ")? + "line ".len();
    let digits = text[start..].bytes().take_while(u8::is_ascii_digit).count();
    let number = text[start..start + digits].parse().ok()?;
    Some((start, start + digits, number))
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, Int64Type};

    use super::super::Source;
    use super::super::testing::*;
    use crate::job::{ColumnSpec, CsvOptions, Format};

    fn column(name: &str, t: &str, required: bool) -> ColumnSpec {
        ColumnSpec {
            name: name.into(),
            data_type: crate::job::from_yaml(t).unwrap(),
            required,
        }
    }

    #[test]
    fn header_and_delimiter_with_an_explicit_schema() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "in.txt", "id;amount;name\n1;2.5;ann\n2;;\n");
        let mut spec = spec("in.txt");
        spec.format = Some(Format::Csv);
        spec.csv = Some(CsvOptions {
            delimiter: ';',
            schema: Some(vec![
                column("id", "long", true),
                column("amount", "decimal(5,2)", false),
                column("name", "string", false),
            ]),
            ..CsvOptions::default()
        });
        let source = Source::open(&spec, dir.path()).unwrap();
        let schema = source.schema().clone();
        assert!(!schema.field(0).is_nullable());
        assert_eq!(
            schema.field(1).data_type(),
            &arrow::datatypes::DataType::Decimal128(5, 2)
        );
        let (batch, _) = read_all(source).unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 2]);
        let amount = batch.column(1).as_primitive::<arrow::datatypes::Decimal128Type>();
        assert_eq!(amount.value(0), 250);
        assert!(amount.is_null(1));
        assert_eq!(batch.column(2).as_string::<i32>().value(0), "ann");
    }

    #[test]
    fn without_a_header_the_schema_names_the_columns() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "in.csv", "1,x\n2,y\n");
        let mut spec = spec("in.csv");
        spec.csv = Some(CsvOptions {
            header: false,
            ..CsvOptions::default()
        });
        let source = Source::open(&spec, dir.path()).unwrap();
        let names: Vec<_> = source
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["column_1", "column_2"]);
        assert_eq!(read_all(source).unwrap().0.num_rows(), 2);
    }

    #[test]
    fn an_inferred_schema_reads_every_file() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.csv",
            "id,price,when,note\n1,2.5,2024-01-02,\n2,3,2024-02-03,\n",
        );
        write(
            dir.path(),
            "b.csv",
            "id,price,when,note\n3,4.25,2024-03-04,late\n",
        );
        let source = Source::open(&spec("*.csv"), dir.path()).unwrap();
        // An empty column becomes a string column, so later values are kept.
        assert_eq!(arrow_types(&source), ["Int64", "Float64", "Date32", "Utf8"]);
        let (batch, files) = read_all(source).unwrap();
        assert_eq!(files, [0, 1]);
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 2, 3]);
        assert_eq!(batch.column(1).as_primitive::<Float64Type>().value(2), 4.25);
        assert_eq!(batch.column(3).as_string::<i32>().value(2), "late");
    }

    #[test]
    fn an_inferred_timestamp_keeps_its_zone() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.csv",
            "utc,offset,local,mixed\n\
             2026-11-01T00:02:00Z,2026-11-01T01:02:00+01:00,2026-11-01T00:02:00,2026-11-01T00:02:00Z\n\
             2026-11-01 00:03:00.5Z,2026-11-01T01:03:00-0500,2026-11-01 00:03:00.25,2026-11-01T00:03:00\n",
        );
        let source = Source::open(&spec("a.csv"), dir.path()).unwrap();
        assert_eq!(
            arrow_types(&source),
            [
                "Timestamp(ms, \"+00:00\")",
                "Timestamp(s, \"+00:00\")",
                "Timestamp(ms)",
                "Utf8"
            ]
        );
        let described = crate::output::columns(source.schema());
        assert_eq!(described[0].data_type, "timestamptz");
        assert_eq!(described[2].data_type, "timestamp");
        let (batch, _) = read_all(source).unwrap();
        let offset = batch
            .column(1)
            .as_primitive::<arrow::datatypes::TimestampSecondType>();
        // 01:02 at +01:00 is 00:02 UTC; 01:03 at -05:00 is 06:03 UTC.
        assert_eq!(offset.value(0), 1_793_491_320);
        assert_eq!(offset.value(1), 1_793_491_320 + 6 * 3600 + 60);
    }

    #[test]
    fn a_value_that_does_not_parse_names_file_line_and_hint() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "id,name\n1,a\n2,b\n");
        write(dir.path(), "b.csv", "id,name\n3,c\nfour,d\n");
        let source = Source::open(&spec("*.csv"), dir.path()).unwrap();
        let err = read_all(source).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("b.csv, line 3:"), "{message}");
        assert!(message.contains("'four'"), "{message}");
        assert!(message.contains("at line 3"), "{message}");
        assert!(message.contains("raise source.csv.infer_rows"), "{message}");
        assert_eq!(err.context_value("line"), Some("3"));
    }

    #[test]
    fn a_malformed_row_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "id,name\n1,a\n2,b,extra\n3,c\n");
        // Among the rows read to infer the schema...
        let err = Source::open(&spec("a.csv"), dir.path()).unwrap_err();
        assert!(err.to_string().contains("a.csv, line 3:"), "{err}");
        assert!(
            err.to_string().contains("Expected 2 records, found 3 records"),
            "{err}"
        );
        // ...and after them.
        let mut spec = spec("a.csv");
        spec.batch_size = 1;
        spec.csv = Some(CsvOptions {
            infer_rows: 1,
            ..CsvOptions::default()
        });
        let err = read_all(Source::open(&spec, dir.path()).unwrap()).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("a.csv, line 3:"), "{message}");
        assert!(
            message.contains("incorrect number of fields for line 3, expected 2 got"),
            "{message}"
        );
        assert_eq!(err.context_value("line"), Some("3"));
    }

    #[test]
    fn a_header_that_differs_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "id,name\n1,a\n");
        write(dir.path(), "b.csv", "name,id\nb,2\n");
        let err = read_all(Source::open(&spec("*.csv"), dir.path()).unwrap()).unwrap_err();
        assert!(
            err.to_string().contains(
                "b.csv, line 1: the header names the columns [name, id], but the schema has [id, name]"
            ),
            "{err}"
        );
    }

    #[test]
    fn an_empty_file_after_the_first_has_no_rows() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "id\n1\n");
        write(dir.path(), "b.csv", "");
        let (batch, _) = read_all(Source::open(&spec("*.csv"), dir.path()).unwrap()).unwrap();
        assert_eq!(batch.num_rows(), 1);
        let err = Source::open(&spec("b.csv"), dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("b.csv: the file has no columns"),
            "{err}"
        );
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_name() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "\u{feff}id,name\n1,a\n");
        write(dir.path(), "b.csv", "\u{feff}id,name\n2,b\n");
        let source = Source::open(&spec("*.csv"), dir.path()).unwrap();
        assert_eq!(source.schema().field(0).name(), "id");
        assert_eq!(read_all(source).unwrap().0.num_rows(), 2);
    }

    #[test]
    fn a_bad_delimiter_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "id\n1\n");
        let mut spec = spec("a.csv");
        spec.csv = Some(CsvOptions {
            delimiter: '€',
            ..CsvOptions::default()
        });
        let err = Source::open(&spec, dir.path()).unwrap_err();
        assert_eq!(err.kind(), outflow_core::ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("source.csv.delimiter"), "{err}");
    }
}
