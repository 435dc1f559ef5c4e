//! Parquet data files written by parquet-rs's synchronous writer into chunks the store takes
//! as they fill, with the data file's metrics read from the footer it returns.
//!
//! iceberg-rust's own Parquet writer goes through parquet-rs's async writer, which encodes
//! each row group into one growing `Vec` before handing it over: with the row group's
//! column buffers still alive and the `Vec` doubling, a writer held two to three row groups
//! at its peak. Here the row group is copied into fixed chunks as its columns are freed,
//! so a writer holds about one. The metrics are those AddFiles registers for a footer (the
//! same bounds, truncation and counts), plus NaN counts, which footers do not keep.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type};
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef as ArrowSchemaRef};
use bytes::Bytes;
use iceberg::io::{FileWrite, OutputFile};
use iceberg::spec::{DataFileBuilder, SchemaRef};
use iceberg::writer::CurrentFileStatus;
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder};
use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY};
use parquet::file::properties::WriterProperties;

use crate::add_files::{SchemaCache, written_data_file};

/// Bytes of one chunk handed to the store: small next to a row group, large enough that a
/// file is a few dozen writes.
const CHUNK: usize = 1 << 20;

/// Builds a [`ParquetFile`] for each file the rolling writer opens.
#[derive(Clone)]
pub(crate) struct ParquetFiles {
    props: WriterProperties,
    schema: SchemaRef,
    arrow: ArrowSchemaRef,
    /// The files share one Parquet schema, converted once for all their footers.
    schemas: Arc<SchemaCache>,
}

impl ParquetFiles {
    /// Files in `schema` (the table's; its field ids go into each file) written with `props`.
    pub(crate) fn new(props: WriterProperties, schema: SchemaRef) -> iceberg::Result<ParquetFiles> {
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
        Ok(ParquetFiles {
            props,
            schema,
            arrow,
            schemas: Arc::default(),
        })
    }
}

impl FileWriterBuilder for ParquetFiles {
    type R = ParquetFile;

    async fn build(&self, output: OutputFile) -> iceberg::Result<ParquetFile> {
        Ok(ParquetFile {
            files: self.clone(),
            output,
            open: None,
            rows: 0,
            nans: HashMap::new(),
        })
    }
}

/// One data file being written; opened in the store at its first rows.
pub(crate) struct ParquetFile {
    files: ParquetFiles,
    output: OutputFile,
    open: Option<Open>,
    rows: usize,
    nans: HashMap<i32, u64>,
}

struct Open {
    encoder: ArrowWriter<Chunks>,
    store: Box<dyn FileWrite>,
}

impl Open {
    /// Hands the chunks filled so far to the store.
    async fn upload(&mut self) -> iceberg::Result<()> {
        for chunk in self.encoder.inner_mut().take() {
            self.store.write(chunk).await?;
        }
        Ok(())
    }
}

fn parquet_error(doing: &str, e: parquet::errors::ParquetError) -> iceberg::Error {
    iceberg::Error::new(iceberg::ErrorKind::Unexpected, format!("{doing}: {e}"))
}

impl FileWriter for ParquetFile {
    async fn write(&mut self, batch: &RecordBatch) -> iceberg::Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let open = match &mut self.open {
            Some(open) => open,
            None => {
                let store = self.output.writer().await?;
                let encoder = ArrowWriter::try_new(
                    Chunks::default(),
                    self.files.arrow.clone(),
                    Some(self.files.props.clone()),
                )
                .map_err(|e| parquet_error("opening a Parquet writer", e))?;
                self.open.insert(Open { encoder, store })
            }
        };
        count_nans(self.files.arrow.fields(), batch.columns(), &mut self.nans);
        open.encoder
            .write(batch)
            .map_err(|e| parquet_error("encoding rows as Parquet", e))?;
        self.rows += batch.num_rows();
        open.upload().await
    }

    async fn close(mut self) -> iceberg::Result<Vec<DataFileBuilder>> {
        let Some(mut open) = self.open.take() else {
            return Ok(Vec::new());
        };
        let footer = open
            .encoder
            .finish()
            .map_err(|e| parquet_error("finishing a Parquet file", e))?;
        open.upload().await?;
        open.store.close().await?;
        let size = open.encoder.bytes_written() as u64;
        let mut file = written_data_file(
            self.output.location().to_string(),
            size,
            &footer,
            &self.files.schema,
            &self.files.schemas,
        )
        .map_err(|message| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("reading back the footer of {}: {message}", self.output.location()),
            )
        })?;
        file.nan_value_counts(std::mem::take(&mut self.nans));
        Ok(vec![file])
    }
}

impl CurrentFileStatus for ParquetFile {
    fn current_file_path(&self) -> String {
        self.output.location().to_string()
    }

    fn current_row_num(&self) -> usize {
        self.rows
    }

    fn current_written_size(&self) -> usize {
        self.open.as_ref().map_or(0, |open| {
            open.encoder.bytes_written() + open.encoder.in_progress_size()
        })
    }
}

/// What the encoder wrote, in chunks of [`CHUNK`] bytes, until taken.
#[derive(Default)]
struct Chunks {
    full: Vec<Bytes>,
    filling: Vec<u8>,
}

impl Chunks {
    /// The bytes written since the last call, in order.
    fn take(&mut self) -> Vec<Bytes> {
        let mut chunks = std::mem::take(&mut self.full);
        if !self.filling.is_empty() {
            chunks.push(Bytes::from(std::mem::take(&mut self.filling)));
        }
        chunks
    }
}

impl Write for Chunks {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.filling.capacity() == 0 {
            self.filling.reserve_exact(CHUNK);
        }
        let n = buf.len().min(CHUNK - self.filling.len());
        self.filling.extend_from_slice(&buf[..n]);
        if self.filling.len() == CHUNK {
            self.full.push(Bytes::from(std::mem::take(&mut self.filling)));
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Adds the NaNs of each float column in `columns` (and in their structs, lists and maps)
/// to `counts` by field id; every float field gets a count, zero included, as Iceberg's
/// writers record.
fn count_nans(fields: &arrow_schema::Fields, columns: &[ArrayRef], counts: &mut HashMap<i32, u64>) {
    for (field, column) in fields.iter().zip(columns) {
        count_field(field, column.as_ref(), counts);
    }
}

fn count_field(field: &Field, array: &dyn Array, counts: &mut HashMap<i32, u64>) {
    match field.data_type() {
        DataType::Float32 => add(field, nans::<Float32Type>(array, f32::is_nan), counts),
        DataType::Float64 => add(field, nans::<Float64Type>(array, f64::is_nan), counts),
        DataType::Struct(children) => count_nans(children, array.as_struct().columns(), counts),
        DataType::List(element) => {
            let list = array.as_list::<i32>();
            count_field(
                element,
                in_range(list.values(), list.value_offsets()).as_ref(),
                counts,
            );
        }
        DataType::LargeList(element) => {
            let list = array.as_list::<i64>();
            count_field(
                element,
                in_range(list.values(), list.value_offsets()).as_ref(),
                counts,
            );
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(parts) = entries.data_type() else {
                return;
            };
            let map = array.as_map();
            let in_map = in_range(map.entries(), map.value_offsets());
            count_nans(parts, in_map.as_struct().columns(), counts);
        }
        _ => {}
    }
}

/// Adds `nans` to the count of `field`'s id (a field without one is not counted).
fn add(field: &Field, nans: usize, counts: &mut HashMap<i32, u64>) {
    if let Some(id) = field
        .metadata()
        .get(PARQUET_FIELD_ID_META_KEY)
        .and_then(|id| id.parse::<i32>().ok())
    {
        *counts.entry(id).or_default() += nans as u64;
    }
}

/// The NaNs among the valid values of a float array.
fn nans<T: ArrowPrimitiveType>(array: &dyn Array, is_nan: fn(T::Native) -> bool) -> usize {
    array
        .as_primitive::<T>()
        .iter()
        .flatten()
        .filter(|v| is_nan(*v))
        .count()
}

/// The child values a (possibly sliced) list or map array's offsets reach.
fn in_range<O: arrow_array::OffsetSizeTrait>(values: &dyn Array, offsets: &[O]) -> ArrayRef {
    let start = offsets.first().map_or(0, |o| o.as_usize());
    let end = offsets.last().map_or(0, |o| o.as_usize());
    values.slice(start, end - start)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::Write;
    use std::sync::Arc;

    use arrow_array::builder::{Float64Builder, ListBuilder, MapBuilder, MapFieldNames, StringBuilder};
    use arrow_array::{
        ArrayRef, Float32Array, Float64Array, Int64Array, RecordBatch, StringArray, StructArray,
    };
    use iceberg::io::FileIO;
    use iceberg::spec::{DataFile, ListType, MapType, NestedField, PrimitiveType, Schema, StructType, Type};
    use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder, ParquetWriterBuilder};
    use parquet::file::properties::WriterProperties;

    use super::{CHUNK, Chunks, ParquetFiles, count_nans};

    #[test]
    fn chunks_keep_every_byte_in_order_in_whole_chunks() {
        let mut chunks = Chunks::default();
        let mut written = Vec::new();
        let mut taken = Vec::new();
        for (n, len) in [0, 1, CHUNK - 1, CHUNK, 3 * CHUNK + 7, 5, 2 * CHUNK]
            .into_iter()
            .enumerate()
        {
            let part: Vec<u8> = (0..len).map(|i| (i * 31 + n) as u8).collect();
            chunks.write_all(&part).unwrap();
            written.extend_from_slice(&part);
            if n % 2 == 1 {
                let got = chunks.take();
                // Every chunk but the last of a take is whole.
                for chunk in got.iter().rev().skip(1) {
                    assert_eq!(chunk.len(), CHUNK);
                }
                taken.extend(got);
            }
        }
        taken.extend(chunks.take());
        assert!(chunks.take().is_empty());
        let joined: Vec<u8> = taken.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(joined, written);
    }

    /// id, a double and a float at the top, a double in a struct, in a list and as a map value.
    fn schema() -> Schema {
        let double =
            |id, name: &str| NestedField::optional(id, name, Type::Primitive(PrimitiveType::Double)).into();
        Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
                double(3, "score"),
                NestedField::optional(4, "ratio", Type::Primitive(PrimitiveType::Float)).into(),
                NestedField::optional(5, "point", Type::Struct(StructType::new(vec![double(6, "x")]))).into(),
                NestedField::optional(
                    7,
                    "samples",
                    Type::List(ListType::new(
                        NestedField::list_element(8, Type::Primitive(PrimitiveType::Double), false).into(),
                    )),
                )
                .into(),
                NestedField::optional(
                    9,
                    "weights",
                    Type::Map(MapType::new(
                        NestedField::map_key_element(10, Type::Primitive(PrimitiveType::String)).into(),
                        NestedField::map_value_element(11, Type::Primitive(PrimitiveType::Double), false)
                            .into(),
                    )),
                )
                .into(),
            ])
            .build()
            .unwrap()
    }

    /// `rows` rows from `start`: every third score NaN, every fifth null; the nested doubles
    /// NaN at every fourth row.
    fn batch(arrow: &arrow_schema::SchemaRef, start: i64, rows: i64) -> RecordBatch {
        let ids: Vec<i64> = (start..start + rows).collect();
        let nan_if = |i: i64, every: i64| if i % every == 0 { f64::NAN } else { i as f64 };
        let score: Float64Array = ids
            .iter()
            .map(|&i| if i % 5 == 0 { None } else { Some(nan_if(i, 3)) })
            .collect();
        let ratio: Float32Array = ids
            .iter()
            .map(|&i| Some(if i % 7 == 0 { f32::NAN } else { 1.5 }))
            .collect();
        let name: StringArray = ids.iter().map(|i| Some(format!("n{}", i % 100))).collect();
        let fields = |i: usize| match arrow.field(i).data_type() {
            arrow_schema::DataType::Struct(f) => f.clone(),
            _ => unreachable!(),
        };
        let x: Float64Array = ids.iter().map(|&i| Some(nan_if(i, 4))).collect();
        let point = StructArray::new(fields(4), vec![Arc::new(x) as ArrayRef], None);
        let element = match arrow.field(5).data_type() {
            arrow_schema::DataType::List(f) => f.clone(),
            _ => unreachable!(),
        };
        let mut samples = ListBuilder::new(Float64Builder::new()).with_field(element);
        let (entry, key, value) = match arrow.field(6).data_type() {
            arrow_schema::DataType::Map(entries, _) => match entries.data_type() {
                arrow_schema::DataType::Struct(f) => (entries.name().clone(), f[0].clone(), f[1].clone()),
                _ => unreachable!(),
            },
            _ => unreachable!(),
        };
        let names = MapFieldNames {
            entry,
            key: key.name().clone(),
            value: value.name().clone(),
        };
        let mut weights = MapBuilder::new(Some(names), StringBuilder::new(), Float64Builder::new())
            .with_keys_field(key)
            .with_values_field(value);
        for &i in &ids {
            samples.values().append_value(nan_if(i, 4));
            samples.values().append_value(2.0);
            samples.append(true);
            weights.keys().append_value("w");
            weights.values().append_value(nan_if(i, 4));
            weights.append(true).unwrap();
        }
        RecordBatch::try_new(
            arrow.clone(),
            vec![
                Arc::new(Int64Array::from(ids.clone())),
                Arc::new(name),
                Arc::new(score),
                Arc::new(ratio),
                Arc::new(point),
                Arc::new(samples.finish()),
                Arc::new(weights.finish()),
            ],
        )
        .unwrap()
    }

    /// A directory, local files, and the test schema in Iceberg and Arrow.
    fn local() -> (
        tempfile::TempDir,
        FileIO,
        iceberg::spec::SchemaRef,
        arrow_schema::SchemaRef,
    ) {
        let schema = Arc::new(schema());
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
        (tempfile::tempdir().unwrap(), FileIO::new_with_fs(), schema, arrow)
    }

    /// Writes the batches through `builder` into `path`; the data file.
    async fn write<B: FileWriterBuilder>(
        builder: B,
        io: &FileIO,
        path: String,
        batches: &[RecordBatch],
    ) -> DataFile {
        let mut file = builder.build(io.new_output(path).unwrap()).await.unwrap();
        for b in batches {
            file.write(b).await.unwrap();
        }
        let mut built = file.close().await.unwrap();
        assert_eq!(built.len(), 1);
        built.pop().unwrap().build().unwrap()
    }

    #[test]
    fn nans_are_counted_per_field_in_structs_lists_and_maps_and_only_in_range() {
        let schema = schema();
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
        let b = batch(&arrow, 0, 60);
        let mut counts = HashMap::new();
        count_nans(arrow.fields(), b.columns(), &mut counts);
        // score: NaN at multiples of 3 that are not multiples of 5 (null there): 20 - 4.
        assert_eq!(
            counts,
            HashMap::from([(3, 16), (4, 9), (6, 15), (8, 15), (11, 15)])
        );
        // A slice counts only its own rows, lists and maps included.
        let mut counts = HashMap::new();
        count_nans(arrow.fields(), b.slice(1, 4).columns(), &mut counts);
        assert_eq!(counts, HashMap::from([(3, 1), (4, 0), (6, 1), (8, 1), (11, 1)]));
    }

    /// The same bytes as iceberg-rust's writer, and the same metrics but where AddFiles'
    /// differ on purpose (no bounds inside lists and maps).
    #[tokio::test]
    async fn files_match_iceberg_rusts_writer_and_its_metrics() {
        let (dir, io, schema, arrow) = local();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(700))
            .build();
        let batches: Vec<RecordBatch> = (0..5).map(|n| batch(&arrow, n * 300, 300)).collect();
        let at = |name: &str| format!("{}/{name}", dir.path().display());

        let ours = write(
            ParquetFiles::new(props.clone(), schema.clone()).unwrap(),
            &io,
            at("ours.parquet"),
            &batches,
        )
        .await;
        let theirs = write(
            ParquetWriterBuilder::new(props, schema.clone()),
            &io,
            at("theirs.parquet"),
            &batches,
        )
        .await;

        let bytes = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
        assert_eq!(bytes("ours.parquet"), bytes("theirs.parquet"), "the files differ");
        assert_eq!(ours.record_count(), 1500);
        assert_eq!(ours.file_size_in_bytes(), theirs.file_size_in_bytes());
        assert_eq!(ours.split_offsets(), theirs.split_offsets());
        assert_eq!(ours.split_offsets().map(<[i64]>::len), Some(3));
        assert_eq!(ours.column_sizes(), theirs.column_sizes());
        assert_eq!(ours.value_counts(), theirs.value_counts());
        assert_eq!(ours.null_value_counts(), theirs.null_value_counts());
        assert_eq!(ours.nan_value_counts(), theirs.nan_value_counts());
        assert_eq!(ours.nan_value_counts()[&3], 400);
        let outside_containers = |bounds: &HashMap<i32, iceberg::spec::Datum>| {
            bounds
                .iter()
                .filter(|(id, _)| ![8, 10, 11].contains(*id))
                .map(|(k, v)| (*k, v.clone()))
                .collect::<HashMap<_, _>>()
        };
        assert_eq!(ours.lower_bounds(), &outside_containers(theirs.lower_bounds()));
        assert_eq!(ours.upper_bounds(), &outside_containers(theirs.upper_bounds()));
        assert_eq!(ours.lower_bounds()[&1], iceberg::spec::Datum::long(0));
        assert_eq!(ours.upper_bounds()[&1], iceberg::spec::Datum::long(1499));
    }

    #[tokio::test]
    async fn a_file_without_rows_is_never_created() {
        let (dir, io, schema, arrow) = local();
        let files = ParquetFiles::new(WriterProperties::default(), schema).unwrap();
        let path = format!("{}/empty.parquet", dir.path().display());
        let mut file = files.build(io.new_output(&path).unwrap()).await.unwrap();
        file.write(&batch(&arrow, 0, 0)).await.unwrap();
        assert!(file.close().await.unwrap().is_empty());
        assert!(!std::path::Path::new(&path).exists());
    }
}
