//! Reading a group of files (their deletes applied) and writing its rows again.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ord::sort::{SortColumn, lexsort_to_indices};
use arrow_schema::{ArrowError, DataType, SortOptions};
use futures::{StreamExt, TryStreamExt};
use iceberg::Runtime;
use iceberg::arrow::{ArrowReader, ArrowReaderBuilder};
use iceberg::scan::FileScanTask;
use iceberg::spec::{
    DataFile, NullOrder, PartitionKey, PartitionSpecRef, SchemaRef, SortDirection, Transform,
};
use iceberg::table::Table;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use outflow_core::{Error, ErrorKind, Result};

use super::equality::{DeleteFileCache, EqualityDeletes};
use super::plan::{CompactSettings, PlannedGroup};
use super::{LiveFile, delete_files};
use crate::client::IcebergResultExt;
use crate::options::DEFAULT_COMPRESSION_LEVEL;
use crate::schema::table_name;
use crate::writer::{FileNames, data_files};

/// Scan tasks of every live data file of snapshot `snapshot_id`, by path: each carries the
/// delete files that apply to it.
pub(super) async fn scan_tasks(table: &Table, snapshot_id: i64) -> Result<HashMap<String, FileScanTask>> {
    let name = table_name(table.identifier());
    let scan = table
        .scan()
        .snapshot_id(snapshot_id)
        .select_all()
        .build()
        .doing(format_args!("planning a scan of {name}"))?;
    let tasks: Vec<FileScanTask> = scan
        .plan_files()
        .await
        .doing(format_args!("planning a scan of {name}"))?
        .try_collect()
        .await
        .doing(format_args!("planning a scan of {name}"))?;
    Ok(tasks.into_iter().map(|t| (t.data_file_path.clone(), t)).collect())
}

/// Reads `group`'s files, their deletes applied, and writes their rows again as files of the
/// target size in the same partition; the new files, or an error naming the file that
/// failed (what was written so far is deleted).
pub(super) async fn rewrite_group(
    table: &Table,
    group: &PlannedGroup,
    inputs: &[&LiveFile],
    tasks: Result<Vec<FileScanTask>>,
    settings: &CompactSettings,
    sort: bool,
    names: &FileNames,
) -> Result<Vec<DataFile>> {
    let metadata = table.metadata();
    let name = table_name(table.identifier());
    let schema: SchemaRef = metadata.current_schema().clone();
    let spec: PartitionSpecRef = metadata
        .partition_spec_by_id(group.spec_id)
        .cloned()
        .ok_or_else(|| Error::internal(format!("{name}: unknown partition spec {}", group.spec_id)))?;
    let field_ids: Vec<i32> = schema.as_struct().fields().iter().map(|f| f.id).collect();
    let mut tasks = tasks?;
    for task in &mut tasks {
        // Rows come out in the current schema, whatever schema the file was written in.
        task.schema = schema.clone();
        task.project_field_ids = field_ids.clone();
    }
    let key = (!spec.is_unpartitioned())
        .then(|| PartitionKey::new(spec.as_ref().clone(), schema.clone(), inputs[0].partition.clone()));
    let builder = data_files(table, settings.target_bytes, DEFAULT_COMPRESSION_LEVEL, names)?;
    let mut writer = builder
        .build(key)
        .await
        .doing(format_args!("opening a data file of {name}"))?;
    let runtime = Runtime::try_current().doing("finding the runtime")?;
    let reader = ArrowReaderBuilder::new(table.file_io().clone(), runtime)
        .with_batch_size(READ_BATCH_ROWS)
        .build();
    let what = format!(
        "reading the {} files of {name} partition '{}' to rewrite them",
        tasks.len(),
        group.partition
    );
    // Equality deletes are applied here, through a set of keys; the reader applies the
    // position deletes. Each file is read on its own, as its own deletes apply to it.
    let arrow = iceberg::arrow::schema_to_arrow_schema(&schema).doing(&what)?;
    let columns: Arc<Vec<(i32, DataType)>> = Arc::new(
        field_ids
            .iter()
            .zip(arrow.fields())
            .map(|(id, field)| (*id, field.data_type().clone()))
            .collect(),
    );
    let mut cache = DeleteFileCache::default();
    let mut reads = Vec::with_capacity(tasks.len());
    for mut task in tasks {
        let equality = cache
            .take_equality(table.file_io(), &mut task.deletes, &columns)
            .await?;
        reads.push((task, equality));
    }
    drop(cache);
    // Without equality deletes, one read of every file lets the reader overlap them.
    let mut batches = if reads.iter().all(|(_, equality)| equality.is_empty()) {
        let tasks = reads.into_iter().map(|(task, _)| Ok(task));
        reader
            .read(futures::stream::iter(tasks).boxed())
            .doing(&what)?
            .stream()
    } else {
        files_read_one_by_one(reader, reads, columns)
    };
    let mut outcome = Ok(());
    if sort {
        // The whole group, sorted, then written in slices.
        outcome = async {
            let columns = sort_columns(table)?;
            let read: Vec<RecordBatch> = batches.try_collect().await.doing(&what)?;
            let Some(first) = read.first() else {
                return Ok(());
            };
            let all = arrow_select::concat::concat_batches(&first.schema(), &read)
                .map_err(|e| Error::internal(format!("joining the rows of {name}: {e}")))?;
            drop(read);
            let sorted = sort_batch(&all, &columns)
                .map_err(|e| Error::internal(format!("sorting the rows of {name}: {e}")))?;
            drop(all);
            let mut offset = 0;
            while offset < sorted.num_rows() {
                let length = SORTED_SLICE_ROWS.min(sorted.num_rows() - offset);
                writer
                    .write(sorted.slice(offset, length))
                    .await
                    .doing(format_args!("writing to {name}"))?;
                offset += length;
            }
            Ok(())
        }
        .await;
    } else {
        // Decoding runs in a task of its own, so that it overlaps with encoding (the two
        // costly parts) on another core; two batches in flight bound the memory.
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let reading = tokio::spawn(async move {
            while let Some(batch) = batches.next().await {
                let failed = batch.is_err();
                if tx.send(batch).await.is_err() || failed {
                    break;
                }
            }
        });
        while let Some(batch) = rx.recv().await {
            let written = match batch.doing(&what) {
                Ok(batch) => writer.write(batch).await.doing(format_args!("writing to {name}")),
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                outcome = Err(e);
                break;
            }
        }
        drop(rx);
        reading.abort();
    }
    let files = writer
        .close()
        .await
        .doing(format_args!("closing data files of {name}"));
    match (outcome, files) {
        (Ok(()), Ok(files)) => Ok(files),
        (Err(e), Ok(files)) => {
            delete_files(table.file_io(), files.iter().map(|f| f.file_path())).await;
            Err(e)
        }
        (Err(e), Err(_)) | (Ok(()), Err(e)) => Err(e),
    }
}

/// The batches of each file read on its own, its equality deletes applied.
fn files_read_one_by_one(
    reader: ArrowReader,
    reads: Vec<(FileScanTask, EqualityDeletes)>,
    columns: Arc<Vec<(i32, DataType)>>,
) -> futures::stream::BoxStream<'static, iceberg::Result<RecordBatch>> {
    futures::stream::iter(reads)
        .map(move |(task, equality)| {
            let reader = reader.clone();
            let columns = columns.clone();
            async move {
                let read = reader.read(futures::stream::iter([Ok(task)]).boxed())?.stream();
                Ok::<_, iceberg::Error>(read.map(move |batch| {
                    batch.and_then(|batch| {
                        equality.keep(batch, &columns).map_err(|e| {
                            iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.message().to_string())
                        })
                    })
                }))
            }
        })
        .buffered(1)
        .try_flatten()
        .boxed()
}

/// Rows per batch read: larger than parquet-rs's default (1,024), since every batch costs
/// the reader and the writer a fixed amount on top of its rows.
const READ_BATCH_ROWS: usize = 8 * 1024;

/// Rows per write of a sorted group.
const SORTED_SLICE_ROWS: usize = 64 * 1024;

/// The table's sort order as columns of its current schema: (column index, descending,
/// nulls first). Identity fields of top-level columns only.
pub(super) fn sort_columns(table: &Table) -> Result<Vec<(usize, bool, bool)>> {
    let metadata = table.metadata();
    let name = table_name(table.identifier());
    let order = metadata.default_sort_order();
    if order.is_unsorted() {
        return Err(Error::invalid_config(
            "sort",
            format!("table {name} has no sort order to sort by"),
        ));
    }
    let fields = metadata.current_schema().as_struct().fields();
    order
        .fields
        .iter()
        .map(|field| {
            let column = fields.iter().position(|f| f.id == field.source_id);
            match (column, field.transform) {
                (Some(column), Transform::Identity) => Ok((
                    column,
                    field.direction == SortDirection::Descending,
                    field.null_order == NullOrder::First,
                )),
                _ => Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "the sort order of {name} sorts by {} of field {}; compaction sorts by \
                         identity fields of top-level columns only",
                        field.transform, field.source_id
                    ),
                )),
            }
        })
        .collect()
}

/// `batch`'s rows in the order `columns` say.
fn sort_batch(
    batch: &RecordBatch,
    columns: &[(usize, bool, bool)],
) -> std::result::Result<RecordBatch, ArrowError> {
    let keys: Vec<SortColumn> = columns
        .iter()
        .map(|&(column, descending, nulls_first)| SortColumn {
            values: batch.column(column).clone(),
            options: Some(SortOptions {
                descending,
                nulls_first,
            }),
        })
        .collect();
    let order = lexsort_to_indices(&keys, None)?;
    arrow_select::take::take_record_batch(batch, &order)
}
