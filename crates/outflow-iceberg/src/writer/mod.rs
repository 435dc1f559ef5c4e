//! A table's open data files: Parquet (Outflow's own file writer, in [`parquet_file`])
//! through iceberg-rust's rolling and fan-out writers, spread over writer tasks so that
//! encoding, the costly part of a write, uses every core.

mod parquet_file;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::PartitionKey;
use iceberg::spec::{DataFile, DataFileFormat, SchemaRef, TableMetadata};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::base_writer::equality_delete_writer::{
    EqualityDeleteFileWriterBuilder, EqualityDeleteWriterConfig,
};
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator, LocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use outflow_core::{Error, Result};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use self::parquet_file::ParquetFiles;
use crate::client::IcebergResultExt;
use crate::options::IcebergSinkOptions;

/// The names of one writer's data files for one table, and the path of every file opened
/// under them.
///
/// A writer that fails loses the list of the files it had already closed (iceberg-rust's
/// rolling writer hands them over only when it closes), yet those files may be in the store.
/// The paths recorded here are what an abort deletes, or names when it cannot, so that no
/// file is orphaned silently.
#[derive(Clone, Debug)]
pub(crate) struct FileNames {
    names: DefaultFileNameGenerator,
    opened: Arc<Mutex<Vec<String>>>,
}

impl FileNames {
    /// Names unique by their counter, kept apart from other writers' by `writer_id`.
    pub(crate) fn new(writer_id: &str) -> FileNames {
        FileNames {
            names: DefaultFileNameGenerator::new(
                format!("outflow-{writer_id}"),
                None,
                DataFileFormat::Parquet,
            ),
            opened: Arc::default(),
        }
    }

    /// Every file opened and not yet forgotten, in order.
    pub(crate) fn opened(&self) -> Vec<String> {
        self.opened.lock().expect("the list of opened files").clone()
    }

    /// Forgets the files in `done` (committed, or deleted).
    pub(crate) fn forget(&self, done: &HashSet<&str>) {
        self.opened
            .lock()
            .expect("the list of opened files")
            .retain(|path| !done.contains(path.as_str()));
    }
}

/// The table's data file locations, each one recorded as it is handed out.
#[derive(Clone, Debug)]
pub(crate) struct TrackedLocations {
    inner: DefaultLocationGenerator,
    opened: Arc<Mutex<Vec<String>>>,
    /// Every data file directly under `data/`, with no `field=value` directory. For tables
    /// in GCS: OpenDAL 0.57's GCS writer (iceberg-rust's storage) encodes object names twice
    /// (apache/opendal#7926), so `region=eu/f.parquet` would be stored as
    /// `region%3Deu/f.parquet` and never found again. Readers take each file's path from the
    /// manifests, so partition directories are a convention Iceberg does not need.
    flat: bool,
}

impl TrackedLocations {
    pub(crate) fn new(metadata: &TableMetadata, opened: Arc<Mutex<Vec<String>>>) -> Result<TrackedLocations> {
        Ok(TrackedLocations {
            inner: DefaultLocationGenerator::new(metadata).doing("locating data files")?,
            opened,
            flat: metadata.location().starts_with("gs://"),
        })
    }
}

impl LocationGenerator for TrackedLocations {
    fn generate_location(&self, partition_key: Option<&PartitionKey>, file_name: &str) -> String {
        let partition_key = if self.flat { None } else { partition_key };
        let location = self.inner.generate_location(partition_key, file_name);
        self.opened
            .lock()
            .expect("the list of opened files")
            .push(location.clone());
        location
    }
}

type ParquetRolling = RollingFileWriterBuilder<ParquetFiles, TrackedLocations, DefaultFileNameGenerator>;
pub(crate) type DataWriterBuilder =
    DataFileWriterBuilder<ParquetFiles, TrackedLocations, DefaultFileNameGenerator>;

/// Open data files of one table.
enum FileWriter {
    Plain(Box<dyn IcebergWriter>),
    Partitioned(Box<PartitionedFiles>),
}

/// One open data file per partition value.
struct PartitionedFiles {
    splitter: RecordBatchPartitionSplitter,
    fanout: FanoutWriter<DataWriterBuilder>,
}

impl FileWriter {
    async fn write(&mut self, batch: RecordBatch, name: &str) -> Result<()> {
        match self {
            FileWriter::Plain(writer) => writer.write(batch).await.doing(format!("writing to {name}")),
            FileWriter::Partitioned(files) => {
                let parts = files
                    .splitter
                    .split(&batch)
                    .doing(format!("partitioning rows for {name}"))?;
                for (key, part) in parts {
                    files
                        .fanout
                        .write(key, part)
                        .await
                        .doing(format!("writing to {name}"))?;
                }
                Ok(())
            }
        }
    }

    async fn close(self, name: &str) -> Result<Vec<DataFile>> {
        match self {
            FileWriter::Plain(mut writer) => writer
                .close()
                .await
                .doing(format!("closing data files of {name}")),
            FileWriter::Partitioned(files) => files
                .fanout
                .close()
                .await
                .doing(format!("closing data files of {name}")),
        }
    }
}

/// A table's open data files, spread over writers that each run in their own task: Parquet
/// encoding is the costly part of a write, and this way it overlaps with the caller's work
/// and uses every core. Batches go to the writers in turn; each has its own files.
pub(crate) struct ParallelWriters {
    lanes: Vec<Lane>,
    next: usize,
}

struct Lane {
    batches: Option<tokio::sync::mpsc::Sender<RecordBatch>>,
    done: Option<tokio::task::JoinHandle<Result<Vec<DataFile>>>>,
}

/// The outcome of a writer task, as Outflow's error.
fn joined(
    outcome: std::result::Result<Result<Vec<DataFile>>, tokio::task::JoinError>,
) -> Result<Vec<DataFile>> {
    outcome.unwrap_or_else(|e| Err(Error::internal(format!("a data file writer failed: {e}"))))
}

impl ParallelWriters {
    pub(crate) async fn open(
        table: &Table,
        options: &IcebergSinkOptions,
        names: &FileNames,
        name: &str,
    ) -> Result<ParallelWriters> {
        let mut lanes = Vec::new();
        for _ in 0..options.parallel_writers() {
            let mut files = open_files(table, options, names).await?;
            // One batch waiting per writer bounds the memory in flight.
            let (tx, mut rx) = tokio::sync::mpsc::channel::<RecordBatch>(1);
            let name = name.to_string();
            let done = tokio::spawn(async move {
                while let Some(batch) = rx.recv().await {
                    files.write(batch, &name).await?;
                }
                files.close(&name).await
            });
            lanes.push(Lane {
                batches: Some(tx),
                done: Some(done),
            });
        }
        Ok(ParallelWriters { lanes, next: 0 })
    }

    pub(crate) async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        let count = self.lanes.len();
        let lane = &mut self.lanes[self.next];
        self.next = (self.next + 1) % count;
        let (Some(sender), Some(done)) = (lane.batches.as_ref(), lane.done.as_mut()) else {
            return Err(Error::internal("a data file writer of this table failed earlier"));
        };
        if sender.send(batch).await.is_ok() {
            return Ok(());
        }
        // The writer stopped: its task holds the reason.
        let outcome = joined(done.await);
        lane.batches = None;
        lane.done = None;
        match outcome {
            Err(e) => Err(e),
            Ok(_) => Err(Error::internal("a data file writer stopped early")),
        }
    }

    pub(crate) async fn close(self) -> Result<Vec<DataFile>> {
        let mut files = Vec::new();
        let mut first_error = None;
        for mut lane in self.lanes {
            lane.batches = None;
            // A lane that already failed lost rows: nothing of this table may be committed.
            let Some(done) = lane.done else {
                first_error.get_or_insert(Error::internal("a data file writer of this table failed earlier"));
                continue;
            };
            match joined(done.await) {
                Ok(written) => files.extend(written),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(files),
        }
    }
}

/// Data files of `table` in its current schema, rolled over at `target_bytes`, zstd at
/// `level`: the writer builder every writer of Outflow's starts from.
pub(crate) fn data_files(
    table: &Table,
    target_bytes: u64,
    level: i32,
    names: &FileNames,
) -> Result<DataWriterBuilder> {
    let rolling = rolling_files(
        table,
        table.metadata().current_schema().clone(),
        target_bytes,
        level,
        names,
    )?;
    Ok(DataFileWriterBuilder::new(rolling))
}

/// Writes equality delete files of `table` holding `keys`, batches of the columns of
/// `key_schema` (the table's key fields, with their ids), and returns them closed. The
/// files are named and tracked like the table's data files, so an abort removes them too.
pub(crate) async fn equality_delete_files(
    table: &Table,
    key_schema: SchemaRef,
    keys: Vec<RecordBatch>,
    options: &IcebergSinkOptions,
    names: &FileNames,
) -> Result<Vec<DataFile>> {
    let ids = key_schema.as_struct().fields().iter().map(|f| f.id).collect();
    let rolling = rolling_files(
        table,
        key_schema.clone(),
        options.target_file_size_bytes(),
        options.compression_level(),
        names,
    )?;
    let config = EqualityDeleteWriterConfig::new(ids, key_schema).doing("opening equality delete files")?;
    let mut writer = EqualityDeleteFileWriterBuilder::new(rolling, config)
        .build(None)
        .await
        .doing("opening an equality delete file")?;
    for batch in keys {
        writer.write(batch).await.doing("writing equality deletes")?;
    }
    writer.close().await.doing("closing equality delete files")
}

/// Parquet files of `table` in `schema`, rolled over at `target_bytes`, zstd at `level`.
fn rolling_files(
    table: &Table,
    schema: SchemaRef,
    target_bytes: u64,
    level: i32,
    names: &FileNames,
) -> Result<ParquetRolling> {
    let level =
        ZstdLevel::try_new(level).map_err(|e| Error::invalid_config("compression_level", e.to_string()))?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .build();
    Ok(RollingFileWriterBuilder::new(
        ParquetFiles::new(properties, schema).doing("opening data files")?,
        target_bytes as usize,
        table.file_io().clone(),
        TrackedLocations::new(table.metadata(), names.opened.clone())?,
        names.names.clone(),
    ))
}

/// Opens data files for `table`: one rolling writer, or one per partition value.
async fn open_files(table: &Table, options: &IcebergSinkOptions, names: &FileNames) -> Result<FileWriter> {
    let metadata = table.metadata();
    let builder = data_files(
        table,
        options.target_file_size_bytes(),
        options.compression_level(),
        names,
    )?;
    let spec = metadata.default_partition_spec();
    if spec.is_unpartitioned() {
        let writer = builder.build(None).await.doing("opening a data file")?;
        return Ok(FileWriter::Plain(Box::new(writer)));
    }
    let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(
        metadata.current_schema().clone(),
        spec.clone(),
    )
    .doing("partitioning rows")?;
    Ok(FileWriter::Partitioned(Box::new(PartitionedFiles {
        splitter,
        fanout: FanoutWriter::new(builder),
    })))
}
