//! Equality deletes applied by Outflow while compacting: each delete file's keys in a hash
//! set, and each row kept unless its key is in one.
//!
//! iceberg-rust's reader applies an equality delete file as one predicate, `key != v1 AND
//! key != v2 AND ...` over every key the file deletes, evaluated on every row: the cost is
//! rows times deleted keys (a table of 1M changes took 131 s to compact). A set lookup per
//! row is linear. Which delete files apply to which data file (by sequence number) is still
//! the scan planner's decision: this only applies the ones it named.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::DataType;
use iceberg::io::FileIO;
use iceberg::scan::FileScanTaskDeleteFile;
use iceberg::spec::DataContentType;
use outflow_core::{Error, Result};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The keys one equality delete file deletes.
pub(super) struct DeletedKeys {
    /// The key's field ids, in the order the rows encode them.
    field_ids: Vec<i32>,
    converter: RowConverter,
    keys: HashSet<Box<[u8]>>,
}

/// The equality delete files that apply to one data file.
#[derive(Clone, Default)]
pub(super) struct EqualityDeletes {
    files: Vec<Arc<DeletedKeys>>,
}

/// Equality delete files read once, however many data files they apply to.
#[derive(Default)]
pub(super) struct DeleteFileCache {
    read: HashMap<String, Arc<DeletedKeys>>,
}

impl DeleteFileCache {
    /// Takes the equality delete files out of `deletes` (leaving the position deletes for
    /// the reader) and reads their keys, typed as `columns` (field id and type of each
    /// column the data is read in) says.
    pub(super) async fn take_equality(
        &mut self,
        file_io: &FileIO,
        deletes: &mut Vec<FileScanTaskDeleteFile>,
        columns: &[(i32, DataType)],
    ) -> Result<EqualityDeletes> {
        let mut out = EqualityDeletes::default();
        let (equality, others): (Vec<_>, Vec<_>) = deletes
            .drain(..)
            .partition(|d| d.file_type == DataContentType::EqualityDeletes);
        *deletes = others;
        for delete in equality {
            if let Some(read) = self.read.get(&delete.file_path) {
                out.files.push(read.clone());
                continue;
            }
            let read = Arc::new(read_keys(file_io, &delete, columns).await?);
            self.read.insert(delete.file_path.clone(), read.clone());
            out.files.push(read);
        }
        Ok(out)
    }
}

impl EqualityDeletes {
    /// Whether no equality delete file applies.
    pub(super) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// `batch` (whose columns are `columns`, in order) without the rows a file deletes.
    pub(super) fn keep(&self, batch: RecordBatch, columns: &[(i32, DataType)]) -> Result<RecordBatch> {
        if self.files.is_empty() || batch.num_rows() == 0 {
            return Ok(batch);
        }
        let mut kept = vec![true; batch.num_rows()];
        // The batch's keys, encoded once per key: the files of one table mostly share it,
        // and equal types encode alike whichever file's converter encodes them.
        let mut encoded: Option<(&[i32], Rows)> = None;
        for file in &self.files {
            let rows = match &mut encoded {
                Some((ids, rows)) if *ids == file.field_ids.as_slice() => &*rows,
                slot => &slot.insert((&file.field_ids, file.encode(&batch, columns)?)).1,
            };
            for (row, keep) in rows.iter().zip(kept.iter_mut()) {
                if *keep && file.keys.contains(row.as_ref()) {
                    *keep = false;
                }
            }
        }
        arrow_select::filter::filter_record_batch(&batch, &BooleanArray::from(kept))
            .map_err(|e| Error::internal(format!("dropping deleted rows: {e}")))
    }
}

impl DeletedKeys {
    /// The keys of `batch`'s rows (whose columns are `columns`, in order), encoded as this
    /// file's keys are.
    fn encode(&self, batch: &RecordBatch, columns: &[(i32, DataType)]) -> Result<Rows> {
        let key: Vec<ArrayRef> = self
            .field_ids
            .iter()
            .map(|id| {
                columns
                    .iter()
                    .position(|(c, _)| c == id)
                    .map(|i| batch.column(i).clone())
                    .ok_or_else(|| Error::internal(format!("equality delete field {id} is not read")))
            })
            .collect::<Result<_>>()?;
        self.converter
            .convert_columns(&key)
            .map_err(|e| Error::internal(format!("encoding keys: {e}")))
    }
}

/// The keys of equality delete file `delete`, each column cast to the type the data is read
/// in (a key column promoted since the file was written, int to long, still matches).
async fn read_keys(
    file_io: &FileIO,
    delete: &FileScanTaskDeleteFile,
    columns: &[(i32, DataType)],
) -> Result<DeletedKeys> {
    let path = &delete.file_path;
    let failed = |why: String| Error::internal(format!("reading equality delete file {path}: {why}"));
    let field_ids = delete
        .equality_ids
        .clone()
        .ok_or_else(|| failed("it names no equality fields".into()))?;
    let types: Vec<DataType> = field_ids
        .iter()
        .map(|id| {
            columns
                .iter()
                .find(|(c, _)| c == id)
                .map(|(_, t)| t.clone())
                .ok_or_else(|| failed(format!("field {id} is not a column of the table")))
        })
        .collect::<Result<_>>()?;
    let bytes = file_io
        .new_input(path)
        .map_err(|e| failed(e.to_string()))?
        .read()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| failed(e.to_string()))?;
    let converter = RowConverter::new(types.iter().cloned().map(SortField::new).collect())
        .map_err(|e| failed(e.to_string()))?;
    let mut keys = HashSet::new();
    for batch in reader {
        let batch = batch.map_err(|e| failed(e.to_string()))?;
        let schema = batch.schema();
        let key: Vec<ArrayRef> = field_ids
            .iter()
            .zip(&types)
            .map(|(id, data_type)| {
                let index = schema
                    .fields()
                    .iter()
                    .position(|f| {
                        f.metadata()
                            .get(PARQUET_FIELD_ID_META_KEY)
                            .is_some_and(|v| v.parse::<i32>().ok() == Some(*id))
                    })
                    .ok_or_else(|| failed(format!("it has no column of field {id}")))?;
                arrow_cast::cast(batch.column(index), data_type).map_err(|e| failed(e.to_string()))
            })
            .collect::<Result<_>>()?;
        let rows = converter
            .convert_columns(&key)
            .map_err(|e| failed(e.to_string()))?;
        keys.extend(rows.iter().map(|row| Box::<[u8]>::from(row.as_ref())));
    }
    Ok(DeletedKeys {
        field_ids,
        converter,
        keys,
    })
}
