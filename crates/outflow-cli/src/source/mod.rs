//! The job's source: Parquet, CSV or NDJSON files, local or in an object store, read as
//! Arrow batches.
//!
//! [`Source::open`] resolves the files and settles the schema before any data is read (from
//! the explicit schema, the first CSV or NDJSON file's first rows, or the Parquet footers),
//! so `outflow plan` knows the output schema without reading the data.
//! Reading is then one batch at a time: [`Source::events`] is a plain iterator, and
//! [`Source::stream`] runs it on a blocking thread behind a bounded channel, so at most a
//! few batches are in memory whatever the size of the input.
//!
//! Every file must fit the schema; a file that does not fails the read, naming the file
//! and, for CSV and NDJSON, the line.

mod csv;
mod files;
mod ndjson;
mod origins;
mod parquet;

use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use outflow_core::schema::field_to_arrow;
use outflow_core::{Error, Result};
use tokio::sync::mpsc;

pub use self::files::{Input, Location, SourceFile, resolve};
// Shared with the JSON reading of the Kafka source.
pub use self::origins::{RowOrigins, SinkRowOrigins, Unit};
use crate::job::{ColumnSpec, CsvOptions, Format, SourceSpec};
use outflow_core::schema::json::nulls_to_strings;

/// The resolved source: its files, their format and the schema every batch has.
#[derive(Debug)]
pub struct Source {
    files: Vec<SourceFile>,
    format: Format,
    schema: SchemaRef,
    settings: Settings,
}

/// How files are read, settled when the source is opened.
#[derive(Clone, Debug)]
struct Settings {
    batch_size: usize,
    csv: CsvOptions,
    /// Whether the schema was given rather than inferred.
    explicit_schema: bool,
}

impl Source {
    /// Resolves `spec.path` against `base` and settles the schema.
    ///
    /// Errors that the job file can fix (a missing path, no matching file, options for
    /// another format, a bad delimiter or schema) are
    /// [`InvalidConfig`](outflow_core::ErrorKind::InvalidConfig); a file that cannot be
    /// read or parsed is [`InvalidInput`](outflow_core::ErrorKind::InvalidInput) naming it.
    pub fn open(spec: &SourceSpec, base: &Path) -> Result<Source> {
        let (files, format) = files::resolve(&spec.path, base, spec.format, &spec.storage)?;
        if spec.csv.is_some() && format != Format::Csv {
            return Err(Error::invalid_config(
                "source.csv",
                format!("is for CSV files, but the format is {format}"),
            ));
        }
        if spec.ndjson.is_some() && format != Format::Ndjson {
            return Err(Error::invalid_config(
                "source.ndjson",
                format!("is for NDJSON files, but the format is {format}"),
            ));
        }
        let csv = spec.csv.clone().unwrap_or_default();
        let ndjson = spec.ndjson.clone().unwrap_or_default();
        let explicit = match format {
            Format::Csv => csv.schema.as_deref(),
            Format::Ndjson => ndjson.schema.as_deref(),
            Format::Parquet => None,
        };
        let first = &files[0];
        let given = explicit.is_some();
        let schema = match (format, explicit) {
            (_, Some(columns)) => explicit_schema(columns, format)?,
            (Format::Csv, None) => csv::infer_schema(first, &csv)?,
            (Format::Ndjson, None) => ndjson::infer_schema(first, ndjson.infer_rows)?,
            (Format::Parquet, None) => parquet::read_schema(&files)?,
        };
        if schema.fields().is_empty() {
            return Err(
                Error::invalid_input(format!("{}: the file has no columns", first.display()))
                    .with_context("file", first.display().to_string()),
            );
        }
        Ok(Source {
            files,
            format,
            schema,
            settings: Settings {
                batch_size: spec.batch_size,
                csv,
                explicit_schema: given,
            },
        })
    }

    /// The schema of every batch.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The files, in reading order.
    pub fn files(&self) -> &[SourceFile] {
        &self.files
    }

    /// Leaves out the files whose indexes in [`Source::files`] `leave_out` says (files
    /// already loaded), before reading.
    pub fn leave_out(&mut self, leave_out: impl Fn(usize) -> bool) {
        let files = std::mem::take(&mut self.files);
        self.files = files
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !leave_out(*i))
            .map(|(_, f)| f)
            .collect();
    }

    /// The files' format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The files' total size in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Reads the files in order, one batch at a time, on the calling thread.
    pub fn events(self) -> SourceEvents {
        SourceEvents {
            source: self,
            next_file: 0,
            current: None,
        }
    }

    /// Reads the files on a blocking thread, handing batches over a channel of `capacity`
    /// (at least 1) batches, so reading runs ahead of writing by at most that much. Must
    /// be called inside a Tokio runtime.
    pub fn stream(self, capacity: usize) -> SourceStream {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let task = tokio::task::spawn_blocking(move || {
            for event in self.events() {
                let failed = event.is_err();
                // A closed channel means the reader of the stream has stopped.
                if tx.blocking_send(event).is_err() || failed {
                    return;
                }
            }
        });
        SourceStream { rx, task: Some(task) }
    }
}

/// What reading the source yields.
#[derive(Debug)]
pub enum SourceEvent {
    /// A batch read from `files()[file]`; `bytes` is how far it advanced in the file.
    Batch {
        /// The file's index.
        file: usize,
        /// The rows.
        batch: RecordBatch,
        /// Bytes of the file this batch accounts for (an estimate for Parquet).
        bytes: u64,
        /// Where each row is in the file.
        origins: RowOrigins,
    },
    /// `files()[file]` is read to its end; `bytes` is the rest of its size not yet reported.
    FileDone {
        /// The file's index.
        file: usize,
        /// The bytes not yet reported by batches.
        bytes: u64,
    },
}

/// A reader of one file.
trait FileReader: Send {
    /// The next batch, or `None` at the end of the file.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>>;

    /// How many of the file's bytes have been consumed (may be an estimate).
    fn position(&self) -> u64;

    /// Where the `rows` rows of the batch [`FileReader::next_batch`] just returned are in
    /// the file.
    fn origins(&mut self, rows: usize) -> RowOrigins;
}

/// The source's batches in order, read on the calling thread; see [`Source::events`].
pub struct SourceEvents {
    source: Source,
    next_file: usize,
    current: Option<Current>,
}

struct Current {
    index: usize,
    reader: Box<dyn FileReader>,
    reported: u64,
}

impl std::fmt::Debug for SourceEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceEvents")
            .field("next_file", &self.next_file)
            .finish_non_exhaustive()
    }
}

impl SourceEvents {
    fn open_file(&self, file: &SourceFile) -> Result<Box<dyn FileReader>> {
        let settings = &self.source.settings;
        let schema = self.source.schema.clone();
        Ok(match self.source.format {
            Format::Csv => Box::new(csv::CsvReader::open(
                file,
                schema,
                &settings.csv,
                settings.batch_size,
                settings.explicit_schema,
            )?),
            Format::Ndjson => Box::new(ndjson::NdjsonReader::open(
                file,
                schema,
                settings.batch_size,
                settings.explicit_schema,
            )?),
            Format::Parquet => Box::new(parquet::ParquetReader::open(file, schema, settings.batch_size)?),
        })
    }

    fn step(&mut self) -> Result<Option<SourceEvent>> {
        loop {
            if let Some(current) = &mut self.current {
                let batch = current.reader.next_batch()?;
                let position = current.reader.position();
                let bytes = position.saturating_sub(current.reported);
                current.reported = current.reported.max(position);
                match batch {
                    Some(batch) => {
                        let origins = current.reader.origins(batch.num_rows());
                        return Ok(Some(SourceEvent::Batch {
                            file: current.index,
                            batch,
                            bytes,
                            origins,
                        }));
                    }
                    None => {
                        let index = current.index;
                        let size = self.source.files[index].size;
                        let rest = size.saturating_sub(current.reported);
                        self.current = None;
                        return Ok(Some(SourceEvent::FileDone {
                            file: index,
                            bytes: rest,
                        }));
                    }
                }
            }
            let Some(file) = self.source.files.get(self.next_file) else {
                return Ok(None);
            };
            let reader = self.open_file(file)?;
            self.current = Some(Current {
                index: self.next_file,
                reader,
                reported: 0,
            });
            self.next_file += 1;
        }
    }
}

impl Iterator for SourceEvents {
    type Item = Result<SourceEvent>;

    /// The next event; after an error the iterator ends.
    fn next(&mut self) -> Option<Self::Item> {
        match self.step() {
            Ok(event) => event.map(Ok),
            Err(err) => {
                self.next_file = self.source.files.len();
                self.current = None;
                Some(Err(err))
            }
        }
    }
}

/// The source's batches in order, read ahead on a blocking thread; see [`Source::stream`].
#[derive(Debug)]
pub struct SourceStream {
    rx: mpsc::Receiver<Result<SourceEvent>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl SourceStream {
    /// The next event, or `None` when every file is read. A reading thread that died is an
    /// error, not an early end.
    pub async fn next(&mut self) -> Option<Result<SourceEvent>> {
        if let Some(event) = self.rx.recv().await {
            return Some(event);
        }
        let task = self.task.take()?;
        match task.await {
            Ok(()) => None,
            Err(err) => Some(Err(
                Error::internal("the source reader stopped unexpectedly").with_source(err)
            )),
        }
    }
}

/// The Arrow schema of an explicit `schema` list.
pub(crate) fn explicit_schema(columns: &[ColumnSpec], format: Format) -> Result<SchemaRef> {
    let key = format!("source.{format}.schema");
    if columns.is_empty() {
        return Err(Error::invalid_config(&key, "lists no columns"));
    }
    let mut fields: Vec<Field> = Vec::with_capacity(columns.len());
    for column in columns {
        if column.name.trim().is_empty() {
            return Err(Error::invalid_config(&key, "a column name is blank"));
        }
        if fields.iter().any(|f| f.name() == &column.name) {
            return Err(Error::invalid_config(
                &key,
                format!("column {:?} is listed twice", column.name),
            ));
        }
        let field = outflow_core::schema::Field {
            id: None,
            name: column.name.clone(),
            required: column.required,
            data_type: column.data_type.clone(),
            doc: None,
        };
        let field = field_to_arrow(&field);
        if format == Format::Csv && (field.data_type().is_nested() || !csv::readable(field.data_type())) {
            return Err(Error::invalid_config(
                &key,
                format!(
                    "column {:?}: CSV cannot hold values of type {}",
                    column.name, column.data_type
                ),
            ));
        }
        fields.push(field);
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// A reader that counts the bytes it hands out, for progress.
struct Counting<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

/// Opens `file` for buffered, counted reading.
fn open_counted(file: &SourceFile) -> Result<BufReader<Counting<Input>>> {
    let handle = file.open()?;
    Ok(BufReader::with_capacity(
        256 * 1024,
        Counting {
            inner: handle,
            count: 0,
        },
    ))
}

/// The bytes of a counted reader that its consumer has taken.
fn consumed(reader: &BufReader<Counting<Input>>) -> u64 {
    reader.get_ref().count - reader.buffer().len() as u64
}

fn read_error(file: &SourceFile, err: impl std::fmt::Display) -> Error {
    Error::invalid_input(format!("cannot read {}: {err}", file.display()))
        .with_context("file", file.display().to_string())
}

/// An error in `file` at 1-based `line`.
fn line_error(file: &SourceFile, line: u64, message: impl std::fmt::Display) -> Error {
    Error::invalid_input(format!("{}, line {line}: {message}", file.display()))
        .with_context("file", file.display().to_string())
        .with_context("line", line.to_string())
}

#[cfg(test)]
pub(crate) mod testing {
    //! Test data written to temporary files.

    use std::path::Path;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};

    use super::*;

    /// Writes `text` to `dir/name`.
    pub fn write(dir: &Path, name: &str, text: &str) {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// The Arrow types of the source's columns, as Arrow prints them.
    pub fn arrow_types(source: &Source) -> Vec<String> {
        source
            .schema()
            .fields()
            .iter()
            .map(|f| f.data_type().to_string())
            .collect()
    }

    /// Writes a Parquet file of `(id, name)` rows.
    pub fn write_parquet(dir: &Path, name: &str, rows: &[(i64, Option<&str>)]) {
        let batch = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>())) as ArrayRef,
            ),
            (
                "name",
                Arc::new(StringArray::from(rows.iter().map(|r| r.1).collect::<Vec<_>>())) as ArrayRef,
            ),
        ])
        .unwrap();
        write_batch(dir, name, &batch);
    }

    /// Writes one batch as a Parquet file.
    pub fn write_batch(dir: &Path, name: &str, batch: &RecordBatch) {
        let file = std::fs::File::create(dir.join(name)).unwrap();
        let mut writer = ::parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
    }

    /// A source spec for `path` with defaults.
    pub fn spec(path: &str) -> SourceSpec {
        SourceSpec {
            path: path.to_string(),
            format: None,
            batch_size: 8192,
            csv: None,
            ndjson: None,
            storage: Default::default(),
        }
    }

    /// Every batch of the source, concatenated, with the file index of each event.
    pub fn read_all(source: Source) -> Result<(RecordBatch, Vec<usize>)> {
        let schema = source.schema().clone();
        let mut batches = Vec::new();
        let mut files = Vec::new();
        for event in source.events() {
            match event? {
                SourceEvent::Batch { file, batch, .. } => {
                    files.push(file);
                    batches.push(batch);
                }
                SourceEvent::FileDone { .. } => {}
            }
        }
        Ok((arrow::compute::concat_batches(&schema, &batches)?, files))
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;

    use super::testing::*;
    use super::*;

    #[test]
    fn options_for_another_format_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_parquet(dir.path(), "a.parquet", &[(1, Some("x"))]);
        let mut spec = spec("a.parquet");
        spec.csv = Some(CsvOptions::default());
        let err = Source::open(&spec, dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("source.csv: is for CSV files, but the format is parquet"),
            "{err}"
        );
    }

    #[test]
    fn events_account_for_every_byte_and_file() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "id\n1\n2\n3\n");
        write(dir.path(), "b.csv", "id\n4\n");
        let mut spec = spec("*.csv");
        spec.batch_size = 2;
        let source = Source::open(&spec, dir.path()).unwrap();
        let total = source.total_bytes();
        let mut bytes = 0;
        let mut rows = 0;
        let mut done = Vec::new();
        for event in source.events() {
            match event.unwrap() {
                SourceEvent::Batch { batch, bytes: b, .. } => {
                    rows += batch.num_rows();
                    bytes += b;
                }
                SourceEvent::FileDone { file, bytes: b } => {
                    done.push(file);
                    bytes += b;
                }
            }
        }
        assert_eq!((rows, bytes, done), (4, total, vec![0, 1]));
    }

    #[tokio::test]
    async fn the_stream_yields_what_the_iterator_does() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "id\n1\n2\n3\n4\n5\n");
        let mut spec = spec("a.csv");
        spec.batch_size = 2;
        let mut stream = Source::open(&spec, dir.path()).unwrap().stream(1);
        let mut ids = Vec::new();
        while let Some(event) = stream.next().await {
            if let SourceEvent::Batch { batch, .. } = event.unwrap() {
                ids.extend(
                    batch
                        .column(0)
                        .as_primitive::<Int64Type>()
                        .values()
                        .iter()
                        .copied(),
                );
            }
        }
        assert_eq!(ids, [1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn the_stream_stops_at_the_first_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "id\n1\n");
        write(dir.path(), "b.csv", "id\nx\n");
        write(dir.path(), "c.csv", "id\n3\n");
        let mut stream = Source::open(&spec("*.csv"), dir.path()).unwrap().stream(4);
        let mut results = Vec::new();
        while let Some(event) = stream.next().await {
            results.push(event.map(|e| matches!(e, SourceEvent::Batch { .. })));
        }
        assert!(results[0].as_ref().unwrap());
        let err = results.last().unwrap().as_ref().unwrap_err();
        assert!(err.to_string().contains("b.csv, line 2"), "{err}");
        assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
    }

    #[test]
    fn an_explicit_schema_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "id\n1\n");
        let mut spec = spec("a.csv");
        let column = |name: &str, t: &str| ColumnSpec {
            name: name.into(),
            data_type: crate::job::from_yaml(t).unwrap(),
            required: false,
        };
        spec.csv = Some(CsvOptions {
            schema: Some(vec![column("id", "long"), column("id", "string")]),
            ..CsvOptions::default()
        });
        let err = Source::open(&spec, dir.path()).unwrap_err();
        assert!(err.to_string().contains("column \"id\" is listed twice"), "{err}");
        spec.csv = Some(CsvOptions {
            schema: Some(vec![column("id", "{list: {name: element, type: long}}")]),
            ..CsvOptions::default()
        });
        let err = Source::open(&spec, dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("CSV cannot hold values of type list<long>"),
            "{err}"
        );
        assert_eq!(err.kind(), outflow_core::ErrorKind::InvalidConfig);
    }

    #[test]
    fn an_unreadable_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.parquet", "this is not parquet");
        let err = Source::open(&spec("a.parquet"), dir.path()).unwrap_err();
        assert_eq!(err.kind(), outflow_core::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("a.parquet"), "{err}");
    }
}
