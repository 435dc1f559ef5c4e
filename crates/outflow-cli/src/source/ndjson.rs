//! NDJSON files, through arrow-json's push decoder fed one line at a time.
//!
//! Feeding lines one by one tells which line a syntax error is on. A value that does not
//! fit its column is only found when a batch is flushed; then the batch's lines are read
//! again, one row at a time, to name the line. That costs nothing until something fails.

use std::io::{BufRead, BufReader};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::json::reader::Decoder;
use outflow_core::Result;
use outflow_core::schema::json::{JsonSample, SampleError, decoder_builder as builder};

use super::{
    Counting, FileReader, Input, RowOrigins, SourceFile, Unit, consumed, line_error, open_counted, read_error,
};

/// Infers the schema from the first `infer_rows` objects of `file`. Top-level columns come
/// in the order their keys first appear (nested fields in arrow-json's order).
pub(super) fn infer_schema(file: &SourceFile, infer_rows: usize) -> Result<SchemaRef> {
    let reader = BufReader::new(file.open()?);
    let mut sample = JsonSample::new();
    for (index, line) in reader.lines().enumerate() {
        if sample.len() >= infer_rows {
            break;
        }
        let number = index as u64 + 1;
        let line = line.map_err(|e| read_error(file, e))?;
        if line.trim().is_empty() {
            continue;
        }
        match sample.add(line.as_bytes()) {
            Ok(()) => {}
            Err(SampleError::Syntax(e)) => return Err(json_error(file, number, &e)),
            Err(SampleError::NotAnObject) => return Err(line_error(file, number, "expected a JSON object")),
        }
    }
    sample.schema().map_err(|e| read_error(file, e))
}

/// A JSON syntax error on `line`, located by column (serde_json counts lines within the one
/// line it was given, which would always say 1).
fn json_error(file: &SourceFile, line: u64, err: &serde_json::Error) -> outflow_core::Error {
    let text = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let message = text.strip_suffix(&suffix).unwrap_or(&text);
    line_error(
        file,
        line,
        format!("column {}: not valid JSON: {message}", err.column()),
    )
}

/// Reads one NDJSON file.
pub(super) struct NdjsonReader {
    file: SourceFile,
    schema: SchemaRef,
    strict: bool,
    reader: BufReader<Counting<Input>>,
    decoder: Decoder,
    batch_size: usize,
    /// Lines read so far.
    line: u64,
    /// Bytes of the lines read so far.
    offset: u64,
    /// The end of a line the decoder did not take because its batch was full.
    pending: Vec<u8>,
    /// The line and byte offset where the rows of the current batch begin.
    batch_start: (u64, u64),
    buf: Vec<u8>,
    /// The lines of the current batch's rows decoded so far (blank lines hold none).
    origins: RowOrigins,
}

impl NdjsonReader {
    /// Opens `file`. With an inferred schema, a field the schema lacks is an error; with an
    /// explicit one, such fields are ignored.
    pub(super) fn open(
        file: &SourceFile,
        schema: SchemaRef,
        batch_size: usize,
        explicit_schema: bool,
    ) -> Result<NdjsonReader> {
        let strict = !explicit_schema;
        let decoder = builder(schema.clone(), batch_size, strict)
            .build_decoder()
            .map_err(|e| read_error(file, e))?;
        Ok(NdjsonReader {
            file: file.clone(),
            schema,
            strict,
            reader: open_counted(file)?,
            decoder,
            batch_size,
            line: 0,
            offset: 0,
            pending: Vec::new(),
            batch_start: (1, 0),
            buf: Vec::new(),
            origins: RowOrigins::new(Unit::Line),
        })
    }

    /// Feeds `bytes` (part of the current line) to the decoder; returns what it left. The
    /// rows it completes are on the current line.
    fn feed(&mut self, bytes: &[u8]) -> Result<usize> {
        let used = self
            .decoder
            .decode(bytes)
            .map_err(|e| line_error(&self.file, self.line, e))?;
        let complete = self.decoder.len() - usize::from(self.decoder.has_partial_record());
        while self.origins.len() < complete {
            self.origins.push(self.line);
        }
        Ok(used)
    }

    /// Finds the line of the first row in the current batch that does not decode.
    fn locate_bad_row(&self) -> Option<u64> {
        let (first_line, offset) = self.batch_start;
        let file = self.file.open_at(offset).ok()?;
        let mut decoder = builder(self.schema.clone(), 1, self.strict)
            .build_decoder()
            .ok()?;
        let mut line = first_line;
        let mut text = Vec::new();
        let mut reader = BufReader::new(file);
        while line <= self.line {
            text.clear();
            if reader.read_until(b'\n', &mut text).ok()? == 0 {
                return None;
            }
            let mut rest = text.as_slice();
            while !rest.is_empty() {
                let used = decoder.decode(rest).ok()?;
                if !decoder.is_empty() && decoder.flush().is_err() {
                    return Some(line);
                }
                rest = &rest[used..];
            }
            line += 1;
        }
        None
    }
}

impl FileReader for NdjsonReader {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        self.batch_start = if self.pending.is_empty() {
            (self.line + 1, self.offset)
        } else {
            // The batch starts inside the last line read; the line is read again on error.
            (self.line, self.offset - self.pending.len() as u64)
        };
        if !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            let used = self.feed(&pending)?;
            self.pending = pending[used..].to_vec();
        }
        let mut at_end = false;
        while self.pending.is_empty() && self.decoder.len() < self.batch_size {
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut buf)
                .map_err(|e| read_error(&self.file, e))?;
            if n == 0 {
                self.buf = buf;
                at_end = true;
                break;
            }
            self.line += 1;
            self.offset += n as u64;
            let used = self.feed(&buf)?;
            if used < buf.len() {
                self.pending = buf[used..].to_vec();
            }
            self.buf = buf;
        }
        if at_end && self.decoder.has_partial_record() {
            return Err(line_error(
                &self.file,
                self.line,
                "the file ends inside a JSON object",
            ));
        }
        match self.decoder.flush() {
            Ok(batch) => Ok(batch),
            Err(err) => Err(match self.locate_bad_row() {
                Some(line) => line_error(&self.file, line, err),
                None => line_error(&self.file, self.batch_start.0, err),
            }),
        }
    }

    fn position(&self) -> u64 {
        consumed(&self.reader)
    }

    fn origins(&mut self, rows: usize) -> RowOrigins {
        let mut origins = std::mem::replace(&mut self.origins, RowOrigins::new(Unit::Line));
        // Every row is counted as it completes; should the decoder say otherwise, the rest
        // are placed on the last line read rather than shifting later rows' lines.
        while origins.len() < rows {
            origins.push(self.line);
        }
        origins
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, Float64Type, Int64Type};

    use super::super::Source;
    use super::super::testing::*;
    use crate::job::{ColumnSpec, NdjsonOptions};

    #[test]
    fn an_inferred_schema_keeps_field_order_and_nesting() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.ndjson",
            "{\"id\": 1, \"user\": {\"name\": \"ann\"}, \"tags\": [\"x\"]}\n\n{\"id\": 2, \"score\": 1.5}\n",
        );
        let source = Source::open(&spec("a.ndjson"), dir.path()).unwrap();
        let schema = source.schema().clone();
        let names: Vec<_> = schema.fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["id", "user", "tags", "score"]);
        assert!(matches!(schema.field(1).data_type(), DataType::Struct(_)));
        let (batch, _) = read_all(source).unwrap();
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 2]);
        let user = batch.column(1).as_struct();
        assert_eq!(user.column(0).as_string::<i32>().value(0), "ann");
        assert!(batch.column(3).as_primitive::<Float64Type>().is_null(0));
        assert_eq!(batch.column(3).as_primitive::<Float64Type>().value(1), 1.5);
    }

    #[test]
    fn an_explicit_schema_ignores_other_fields() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.jsonl", "{\"id\": 1, \"x\": true}\n{\"id\": 2}\n");
        let mut spec = spec("a.jsonl");
        spec.ndjson = Some(NdjsonOptions {
            schema: Some(vec![ColumnSpec {
                name: "id".into(),
                data_type: crate::job::from_yaml("int").unwrap(),
                required: true,
            }]),
            ..NdjsonOptions::default()
        });
        let (batch, _) = read_all(Source::open(&spec, dir.path()).unwrap()).unwrap();
        assert_eq!(batch.num_columns(), 1);
        assert_eq!(batch.column(0).data_type(), &DataType::Int32);
        assert_eq!(batch.num_rows(), 2);
    }

    #[test]
    fn values_of_mixed_types_are_read_as_text() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.ndjson",
            "{\"code\": 17}\n{\"code\": \"A7\"}\n{\"code\": true}\n",
        );
        let source = Source::open(&spec("a.ndjson"), dir.path()).unwrap();
        assert_eq!(source.schema().field(0).data_type(), &DataType::Utf8);
        let (batch, _) = read_all(source).unwrap();
        let codes = batch.column(0).as_string::<i32>();
        assert_eq!(
            [codes.value(0), codes.value(1), codes.value(2)],
            ["17", "A7", "true"]
        );
    }

    #[test]
    fn a_syntax_error_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.ndjson",
            "{\"id\": 1}\n{\"id\": 2}\n{\"id\": nope}\n",
        );
        // Among the rows read to infer the schema...
        let err = Source::open(&spec("a.ndjson"), dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("a.ndjson, line 3: column 9: not valid JSON"),
            "{err}"
        );
        // ...and after them.
        let mut spec = spec("a.ndjson");
        spec.ndjson = Some(NdjsonOptions {
            infer_rows: 1,
            ..NdjsonOptions::default()
        });
        let err = read_all(Source::open(&spec, dir.path()).unwrap()).unwrap_err();
        assert!(err.to_string().contains("a.ndjson, line 3:"), "{err}");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for i in 0..10 {
            text.push_str(&format!("{{\"id\": {i}}}\n"));
        }
        text.push_str("{\"id\": \"eleven\"}\n{\"id\": 12}\n");
        write(dir.path(), "a.ndjson", &text);
        let mut spec = spec("a.ndjson");
        spec.batch_size = 4;
        spec.ndjson = Some(NdjsonOptions {
            infer_rows: 5,
            ..NdjsonOptions::default()
        });
        let err = read_all(Source::open(&spec, dir.path()).unwrap()).unwrap_err();
        assert!(err.to_string().contains("a.ndjson, line 11:"), "{err}");
        assert_eq!(err.context_value("line"), Some("11"));
    }

    #[test]
    fn a_field_the_inferred_schema_lacks_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.ndjson", "{\"id\": 1}\n");
        write(
            dir.path(),
            "b.ndjson",
            "{\"id\": 2}\n{\"id\": 3, \"surprise\": 1}\n",
        );
        let err = read_all(Source::open(&spec("*.ndjson"), dir.path()).unwrap()).unwrap_err();
        assert!(err.to_string().contains("b.ndjson, line 2:"), "{err}");
        assert!(err.to_string().contains("surprise"), "{err}");
    }

    #[test]
    fn a_bad_line_in_the_inferred_rows_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.ndjson", "{\"id\": 1}\n[1, 2]\n");
        let err = Source::open(&spec("a.ndjson"), dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("a.ndjson, line 2: expected a JSON object"),
            "{err}"
        );
        write(dir.path(), "b.ndjson", "{\"id\": 1\n");
        let err = Source::open(&spec("b.ndjson"), dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("b.ndjson, line 1: column 8: not valid JSON: EOF"),
            "{err}"
        );
    }
}
