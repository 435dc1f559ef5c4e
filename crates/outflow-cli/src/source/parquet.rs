//! Parquet files: local ones through parquet's synchronous Arrow reader (the source runs
//! on its own blocking thread, so the async reader would add nothing), objects through the
//! async reader, which reads the footer by a suffix request and then only the column chunks
//! of each row group, waited for on that thread.
//!
//! Files must agree on column names and types. A column that is optional in any file is
//! optional in the source schema, so every footer is read when the source is opened: the
//! schema the sink is prepared for must hold every file's rows.

use std::fs::File;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{Field, Schema, SchemaRef};
use futures::StreamExt;
use outflow_core::{Error, Result};
use outflow_store::{ObjectParquet, blocking};
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::async_reader::ParquetRecordBatchStream;

use super::{FileReader, Location, RowOrigins, SourceFile, Unit, read_error};

fn builder(file: &SourceFile, path: &std::path::Path) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let handle = File::open(path).map_err(|e| read_error(file, e))?;
    ParquetRecordBatchReaderBuilder::try_new(handle).map_err(|e| read_error(file, e))
}

/// The async reader's builder for an object, its footer read.
fn object_builder(file: &SourceFile) -> Option<Result<ParquetRecordBatchStreamBuilder<ObjectParquet>>> {
    let Location::Object(url, store) = &file.location else {
        return None;
    };
    let object = ObjectParquet::new(store.clone(), url.clone(), file.size);
    let built = blocking::block_on(ParquetRecordBatchStreamBuilder::new(object));
    Some(built.map_err(|e| read_error(file, e)))
}

/// The Arrow schema in `file`'s footer.
fn footer_schema(file: &SourceFile) -> Result<SchemaRef> {
    match &file.location {
        Location::Local(path) => Ok(builder(file, path)?.schema().clone()),
        Location::Object(..) => Ok(object_builder(file).expect("an object")?.schema().clone()),
    }
}

/// The schema of `files`: the first file's, with a top-level column optional when it is
/// optional in any file. Fails, naming the file, when a file's columns differ.
pub(super) fn read_schema(files: &[SourceFile]) -> Result<SchemaRef> {
    let first = &files[0];
    let schema = footer_schema(first)?;
    let mut optional: Vec<bool> = schema.fields().iter().map(|f| f.is_nullable()).collect();
    for file in &files[1..] {
        let found = footer_schema(file)?;
        check_schema(file, &found, &schema, first)?;
        for (flag, field) in optional.iter_mut().zip(found.fields()) {
            *flag |= field.is_nullable();
        }
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(optional)
        .map(|(f, optional)| f.as_ref().clone().with_nullable(optional))
        .collect();
    Ok(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

/// Where a file's batches come from.
enum Batches {
    Local(ParquetRecordBatchReader),
    /// `None` only while a batch is being read.
    Object(Option<ParquetRecordBatchStream<ObjectParquet>>),
}

/// Reads one Parquet file.
pub(super) struct ParquetReader {
    batches: Batches,
    file: SourceFile,
    schema: SchemaRef,
    rows: u64,
    rows_read: u64,
}

impl ParquetReader {
    /// Opens `file`, whose columns [`read_schema`] checked.
    pub(super) fn open(file: &SourceFile, schema: SchemaRef, batch_size: usize) -> Result<ParquetReader> {
        let (rows, batches) = match &file.location {
            Location::Local(path) => {
                let builder = builder(file, path)?;
                let rows = builder.metadata().file_metadata().num_rows();
                let reader = builder
                    .with_batch_size(batch_size)
                    .build()
                    .map_err(|e| read_error(file, e))?;
                (rows, Batches::Local(reader))
            }
            Location::Object(..) => {
                let builder = object_builder(file).expect("an object")?;
                let rows = builder.metadata().file_metadata().num_rows();
                let stream = builder
                    .with_batch_size(batch_size)
                    .build()
                    .map_err(|e| read_error(file, e))?;
                (rows, Batches::Object(Some(stream)))
            }
        };
        Ok(ParquetReader {
            batches,
            file: file.clone(),
            schema,
            rows: rows.max(0) as u64,
            rows_read: 0,
        })
    }

    fn next_read(&mut self) -> Option<Result<RecordBatch>> {
        let file = &self.file;
        match &mut self.batches {
            Batches::Local(reader) => reader.next().map(|r| r.map_err(|e| read_error(file, e))),
            Batches::Object(slot) => {
                let mut stream = slot.take()?;
                let (stream, next) = blocking::block_on(async move {
                    let next = stream.next().await;
                    (stream, next)
                });
                *slot = Some(stream);
                next.map(|r| r.map_err(|e| read_error(file, e)))
            }
        }
    }

    /// The batch under the source's schema: nested types that differ only in names or
    /// metadata (a list's element called `item` or `element`) are cast to it.
    fn conform(&self, batch: RecordBatch) -> Result<RecordBatch> {
        if batch.schema().fields() == self.schema.fields() {
            return Ok(batch);
        }
        let columns = batch
            .columns()
            .iter()
            .zip(self.schema.fields())
            .map(|(column, field)| {
                if column.data_type() == field.data_type() {
                    Ok(column.clone())
                } else {
                    arrow::compute::cast(column, field.data_type())
                }
            })
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()
            .map_err(|e| read_error(&self.file, e))?;
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| read_error(&self.file, e))
    }
}

impl FileReader for ParquetReader {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        match self.next_read() {
            None => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok(batch)) => {
                self.rows_read += batch.num_rows() as u64;
                self.conform(batch).map(Some)
            }
        }
    }

    fn position(&self) -> u64 {
        // Parquet is read by row group, so bytes are counted in proportion to rows.
        match self.rows {
            0 => 0,
            rows => (self.file.size as u128 * self.rows_read.min(rows) as u128 / rows as u128) as u64,
        }
    }

    fn origins(&mut self, rows: usize) -> RowOrigins {
        RowOrigins::consecutive(Unit::Row, self.rows_read - rows as u64, rows)
    }
}

fn check_schema(file: &SourceFile, found: &Schema, expected: &Schema, first: &SourceFile) -> Result<()> {
    let mismatch = |what: String| {
        Error::invalid_input(format!(
            "{}: {what}; every file must match the first, {}",
            file.display(),
            first.display()
        ))
        .with_context("file", file.display().to_string())
    };
    let names = |s: &Schema| {
        s.fields()
            .iter()
            .map(|f| f.name().clone())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if found.fields().len() != expected.fields().len()
        || found
            .fields()
            .iter()
            .zip(expected.fields())
            .any(|(a, b)| a.name() != b.name())
    {
        return Err(mismatch(format!(
            "the columns are [{}], not [{}]",
            names(found),
            names(expected)
        )));
    }
    for (a, b) in found.fields().iter().zip(expected.fields()) {
        if !a.data_type().equals_datatype(b.data_type()) {
            return Err(mismatch(format!(
                "column {} is {}, not {}",
                a.name(),
                a.data_type(),
                b.data_type()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::super::Source;
    use super::super::testing::*;

    #[test]
    fn files_are_read_in_order_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        write_parquet(dir.path(), "part-1.parquet", &[(3, Some("c")), (4, None)]);
        write_parquet(dir.path(), "part-0.parquet", &[(1, Some("a")), (2, Some("b"))]);
        let mut spec = spec("part-*.parquet");
        spec.batch_size = 1;
        let source = Source::open(&spec, dir.path()).unwrap();
        assert_eq!(source.files().len(), 2);
        let (batch, files) = read_all(source).unwrap();
        assert_eq!(files, [0, 0, 1, 1]);
        assert_eq!(
            batch.column(0).as_primitive::<Int64Type>().values(),
            &[1, 2, 3, 4]
        );
        assert!(batch.column(1).is_null(3));
    }

    #[test]
    fn a_directory_is_read_sorted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("t")).unwrap();
        write_parquet(&dir.path().join("t"), "b.parquet", &[(2, None)]);
        write_parquet(&dir.path().join("t"), "a.parquet", &[(1, None)]);
        let (batch, _) = read_all(Source::open(&spec("t"), dir.path()).unwrap()).unwrap();
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 2]);
    }

    #[test]
    fn a_file_with_other_columns_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write_parquet(dir.path(), "a.parquet", &[(1, None)]);
        let other = RecordBatch::try_from_iter([
            ("id", Arc::new(Int32Array::from(vec![1])) as ArrayRef),
            ("name", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ])
        .unwrap();
        write_batch(dir.path(), "b.parquet", &other);
        let err = Source::open(&spec("*.parquet"), dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("b.parquet: column id is Int32, not Int64"),
            "{err}"
        );
        assert!(
            err.to_string().contains("every file must match the first"),
            "{err}"
        );
    }

    #[test]
    fn a_column_optional_in_any_file_is_optional() {
        let dir = tempfile::tempdir().unwrap();
        // Without nulls the writer declares `name` required; with them, optional.
        write_parquet(dir.path(), "a.parquet", &[(1, Some("a"))]);
        write_parquet(dir.path(), "b.parquet", &[(2, None)]);
        write_parquet(dir.path(), "c.parquet", &[(3, Some("c"))]);
        let source = Source::open(&spec("*.parquet"), dir.path()).unwrap();
        assert!(!source.schema().field(0).is_nullable());
        assert!(source.schema().field(1).is_nullable());
        let (batch, _) = read_all(source).unwrap();
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 2, 3]);
        assert!(batch.column(1).is_null(1));
        assert_eq!(batch.column(1).as_string::<i32>().value(2), "c");
    }

    #[test]
    fn field_metadata_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let field = Field::new("id", DataType::Int64, false)
            .with_metadata([("PARQUET:field_id".to_string(), "7".to_string())].into());
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![field])),
            vec![Arc::new(Int64Array::from(vec![1]))],
        )
        .unwrap();
        write_batch(dir.path(), "a.parquet", &batch);
        let source = Source::open(&spec("a.parquet"), dir.path()).unwrap();
        assert_eq!(source.schema().field(0).metadata()["PARQUET:field_id"], "7");
    }
}
