//! From input rows to AppendRows requests, pure: reshaping what BigQuery has no type for,
//! aligning column names with the table's, finding the rows BigQuery would refuse (null
//! array elements, nulls where a column is REQUIRED), sizing rows, splitting them into
//! requests under the size limit and encoding those as Arrow IPC messages.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, FixedSizeBinaryArray, GenericListArray, LargeListArray, ListArray, MapArray,
    OffsetSizeTrait, RecordBatch, RecordBatchOptions, StringArray, StructArray, UInt32Array, UInt64Array,
};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_ipc::writer::{
    CompressionContext, DictionaryTracker, IpcDataGenerator, IpcWriteOptions, write_message,
};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use bytes::Bytes;
use outflow_core::schema::{
    DataType as CoreType, Field as CoreField, InputSchema, LIST_ELEMENT, UUID_EXTENSION, join_path,
};
use outflow_core::{Error, Result};

use crate::schema::{FieldType, TableField, TableSchema};

const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";

/// Room left in each request for what surrounds the rows: the write stream's name, the
/// offset, the proto framing and, on a connection's first request, the writer schema
/// (added separately, as its size is known).
pub const REQUEST_ENVELOPE_BYTES: usize = 2048;

/// Input rows with their positions among all rows the sink was given.
#[derive(Clone, Debug)]
pub struct Rows {
    /// The rows.
    pub batch: RecordBatch,
    /// `indices[i]` is the position of row `i` in the sink's input.
    pub indices: Vec<u64>,
}

impl Rows {
    /// Rows numbered from `first`.
    pub fn numbered(batch: RecordBatch, first: u64) -> Rows {
        let indices = (first..first + batch.num_rows() as u64).collect();
        Rows { batch, indices }
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.batch.num_rows()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.batch.num_rows() == 0
    }

    /// The rows at `keep` (positions in this set), in that order.
    pub fn take(&self, keep: &[usize]) -> Result<Rows> {
        if keep.len() == self.len() && keep.iter().enumerate().all(|(i, k)| i == *k) {
            return Ok(self.clone());
        }
        let idx = UInt32Array::from_iter_values(keep.iter().map(|&k| k as u32));
        Ok(Rows {
            batch: arrow_select::take::take_record_batch(&self.batch, &idx)?,
            indices: keep.iter().map(|&k| self.indices[k]).collect(),
        })
    }

    /// The rows in `range`.
    pub fn slice(&self, range: Range<usize>) -> Rows {
        Rows {
            batch: self.batch.slice(range.start, range.len()),
            indices: self.indices[range].to_vec(),
        }
    }

    /// The same rows in another batch of the same length (reshaped, conformed).
    pub fn with_batch(&self, batch: RecordBatch) -> Rows {
        debug_assert_eq!(batch.num_rows(), self.len());
        Rows {
            batch,
            indices: self.indices.clone(),
        }
    }
}

/// Reshapes columns BigQuery has no type for into ones it has, at every level: a map
/// becomes a list of `key`/`value` structs (a REPEATED RECORD), a UUID (16-byte fixed
/// binary marked `arrow.uuid`) becomes its canonical text, a dictionary its values.
pub fn shape_input(batch: &RecordBatch) -> Result<RecordBatch> {
    let schema = batch.schema();
    if !schema.fields().iter().any(|f| needs_shaping(f)) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let (f, c) = shape(field, column)?;
        fields.push(f);
        columns.push(c);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &options,
    )?)
}

fn is_uuid(field: &Field) -> bool {
    matches!(field.data_type(), DataType::FixedSizeBinary(16))
        && field.metadata().get(EXTENSION_NAME_KEY).map(String::as_str) == Some(UUID_EXTENSION)
}

fn needs_shaping(field: &Field) -> bool {
    is_uuid(field)
        || match field.data_type() {
            DataType::Map(..) | DataType::Dictionary(..) => true,
            DataType::Struct(children) => children.iter().any(|c| needs_shaping(c)),
            DataType::List(e) | DataType::LargeList(e) => needs_shaping(e),
            _ => false,
        }
}

fn shape(field: &FieldRef, column: &ArrayRef) -> Result<(FieldRef, ArrayRef)> {
    if !needs_shaping(field) {
        return Ok((field.clone(), column.clone()));
    }
    if is_uuid(field) {
        let bytes = column
            .as_any()
            .downcast_ref::<FixedSizeBinaryArray>()
            .expect("fixed size binary");
        let text: StringArray = bytes
            .iter()
            .map(|v| {
                v.map(|b| {
                    uuid::Uuid::from_slice(b)
                        .expect("16 bytes")
                        .hyphenated()
                        .to_string()
                })
            })
            .collect();
        let mut metadata = field.metadata().clone();
        metadata.remove(EXTENSION_NAME_KEY);
        let f = Field::new(field.name(), DataType::Utf8, field.is_nullable()).with_metadata(metadata);
        return Ok((Arc::new(f), Arc::new(text)));
    }
    match field.data_type() {
        DataType::Dictionary(_, value) => {
            let unpacked = arrow_cast::cast(column, value)?;
            let f = Arc::new(field.as_ref().clone().with_data_type(value.as_ref().clone()));
            shape(&f, &unpacked)
        }
        DataType::Struct(children) => {
            let s = column.as_any().downcast_ref::<StructArray>().expect("struct");
            let (fields, arrays) = shape_children(children, s.columns())?;
            let out = StructArray::try_new(fields.clone(), arrays, s.nulls().cloned())?;
            Ok((
                Arc::new(field.as_ref().clone().with_data_type(DataType::Struct(fields))),
                Arc::new(out),
            ))
        }
        DataType::List(element) => {
            let list = column.as_any().downcast_ref::<ListArray>().expect("list");
            shape_list(field, element, list)
        }
        DataType::LargeList(element) => {
            let list = column
                .as_any()
                .downcast_ref::<LargeListArray>()
                .expect("large list");
            shape_list(field, element, list)
        }
        DataType::Map(_, _) => {
            let map = column.as_any().downcast_ref::<MapArray>().expect("map");
            let entries = map.entries();
            let kv = entries.fields();
            let renamed = Fields::from(vec![
                kv[0].as_ref().clone().with_name("key").with_nullable(false),
                kv[1].as_ref().clone().with_name("value"),
            ]);
            let (kv_fields, kv_arrays) = shape_children(&renamed, entries.columns())?;
            let entries = StructArray::try_new(kv_fields.clone(), kv_arrays, None)?;
            let element = Arc::new(Field::new("item", DataType::Struct(kv_fields), false));
            let list = ListArray::try_new(
                element.clone(),
                map.offsets().clone(),
                Arc::new(entries),
                map.nulls().cloned(),
            )?;
            let f = field.as_ref().clone().with_data_type(DataType::List(element));
            Ok((Arc::new(f), Arc::new(list)))
        }
        _ => Ok((field.clone(), column.clone())),
    }
}

fn shape_children(fields: &Fields, arrays: &[ArrayRef]) -> Result<(Fields, Vec<ArrayRef>)> {
    let mut out_fields = Vec::with_capacity(fields.len());
    let mut out_arrays = Vec::with_capacity(fields.len());
    for (f, a) in fields.iter().zip(arrays) {
        let (f, a) = shape(f, a)?;
        out_fields.push(f);
        out_arrays.push(a);
    }
    Ok((Fields::from(out_fields), out_arrays))
}

fn shape_list<O: OffsetSizeTrait>(
    field: &FieldRef,
    element: &FieldRef,
    list: &GenericListArray<O>,
) -> Result<(FieldRef, ArrayRef)> {
    let (element, values) = shape(element, list.values())?;
    relist(field, list, element, values)
}

/// `list` with its elements replaced by `values` of field `element`, and its field
/// retyped to match: what every reshaping step does to a list once its elements are done.
fn relist<O: OffsetSizeTrait>(
    field: &FieldRef,
    list: &GenericListArray<O>,
    element: FieldRef,
    values: ArrayRef,
) -> Result<(FieldRef, ArrayRef)> {
    let out = GenericListArray::<O>::try_new(
        element.clone(),
        list.offsets().clone(),
        values,
        list.nulls().cloned(),
    )?;
    let data_type = if O::IS_LARGE {
        DataType::LargeList(element)
    } else {
        DataType::List(element)
    };
    Ok((
        Arc::new(field.as_ref().clone().with_data_type(data_type)),
        Arc::new(out),
    ))
}

/// Renames input columns to the table's spelling where they match without case, as
/// BigQuery compares names, at every RECORD level; with `drop_unknown`
/// (`ignore_unknown_values`), drops the columns the table lacks.
pub fn align_names(batch: &RecordBatch, table: &TableSchema, drop_unknown: bool) -> Result<RecordBatch> {
    let schema = batch.schema();
    let (fields, columns) = align_level(schema.fields(), batch.columns(), &table.fields, drop_unknown, "")?;
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())),
        columns,
        &options,
    )?)
}

fn align_level(
    fields: &Fields,
    arrays: &[ArrayRef],
    table: &[TableField],
    drop_unknown: bool,
    prefix: &str,
) -> Result<(Fields, Vec<ArrayRef>)> {
    let mut out_fields: Vec<FieldRef> = Vec::with_capacity(fields.len());
    let mut out_arrays = Vec::with_capacity(fields.len());
    for (field, array) in fields.iter().zip(arrays) {
        let path = join_path(prefix, field.name());
        let Some(column) = table.iter().find(|t| t.name.eq_ignore_ascii_case(field.name())) else {
            if !drop_unknown {
                out_fields.push(field.clone());
                out_arrays.push(array.clone());
            }
            continue;
        };
        if let Some(other) = out_fields
            .iter()
            .find(|f| f.name().eq_ignore_ascii_case(&column.name))
        {
            return Err(Error::invalid_input(format!(
                "columns {} and {path} are the same column for BigQuery, which compares names without case",
                join_path(prefix, other.name())
            ))
            .with_context("column", path));
        }
        let (field, array) = if column.field_type == FieldType::Record {
            align_record(field, array, &column.fields, drop_unknown, &path)?
        } else {
            (field.clone(), array.clone())
        };
        out_fields.push(Arc::new(field.as_ref().clone().with_name(&column.name)));
        out_arrays.push(array);
    }
    Ok((Fields::from(out_fields), out_arrays))
}

fn align_record(
    field: &FieldRef,
    array: &ArrayRef,
    table: &[TableField],
    drop_unknown: bool,
    path: &str,
) -> Result<(FieldRef, ArrayRef)> {
    match field.data_type() {
        DataType::Struct(children) => {
            let s = array.as_any().downcast_ref::<StructArray>().expect("struct");
            let (fields, arrays) = align_level(children, s.columns(), table, drop_unknown, path)?;
            if fields.is_empty() {
                // Every nested field was unknown and dropped: keep the original so the
                // column still reads as its parent's nulls-or-not.
                return Ok((field.clone(), array.clone()));
            }
            let out = StructArray::try_new(fields.clone(), arrays, s.nulls().cloned())?;
            Ok((
                Arc::new(field.as_ref().clone().with_data_type(DataType::Struct(fields))),
                Arc::new(out),
            ))
        }
        DataType::List(element) => {
            let list = array.as_any().downcast_ref::<ListArray>().expect("list");
            align_list(field, element, list, table, drop_unknown, path)
        }
        DataType::LargeList(element) => {
            let list = array
                .as_any()
                .downcast_ref::<LargeListArray>()
                .expect("large list");
            align_list(field, element, list, table, drop_unknown, path)
        }
        _ => Ok((field.clone(), array.clone())),
    }
}

fn align_list<O: OffsetSizeTrait>(
    field: &FieldRef,
    element: &FieldRef,
    list: &GenericListArray<O>,
    table: &[TableField],
    drop_unknown: bool,
    path: &str,
) -> Result<(FieldRef, ArrayRef)> {
    let (element, values) = align_record(element, list.values(), table, drop_unknown, path)?;
    relist(field, list, element, values)
}

/// Where a batch holds nulls: for each column path (lists' elements as `element`, as in the
/// planner's paths) that holds a null where every enclosing struct and list is present,
/// which rows hold one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NullMap {
    paths: BTreeMap<String, NullPath>,
}

#[derive(Clone, Debug, PartialEq)]
struct NullPath {
    /// Whether the path is a list's element (BigQuery arrays cannot hold a NULL).
    element: bool,
    rows: Vec<bool>,
}

impl NullMap {
    /// Maps the nulls of `batch`.
    pub fn of(batch: &RecordBatch) -> NullMap {
        let mut map = NullMap::default();
        let n = batch.num_rows();
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            map.walk(column, field.name(), false, None, None, n);
        }
        map
    }

    fn walk(
        &mut self,
        array: &ArrayRef,
        path: &str,
        element: bool,
        rows: Option<&[u32]>,
        live: Option<&[bool]>,
        n: usize,
    ) {
        let row = |slot: usize| rows.map_or(slot, |r| r[slot] as usize);
        let is_live = |slot: usize| live.is_none_or(|l| l[slot]);
        if array.null_count() > 0 {
            for slot in 0..array.len() {
                if array.is_null(slot) && is_live(slot) {
                    let entry = self.paths.entry(path.to_string()).or_insert_with(|| NullPath {
                        element,
                        rows: vec![false; n],
                    });
                    entry.rows[row(slot)] = true;
                }
            }
        }
        let child_live = |len: usize| -> Option<Vec<bool>> {
            if array.null_count() == 0 && live.is_none() {
                return None;
            }
            Some(
                (0..len)
                    .map(|slot| is_live(slot) && array.is_valid(slot))
                    .collect(),
            )
        };
        match array.data_type() {
            DataType::Struct(fields) => {
                let s = array.as_any().downcast_ref::<StructArray>().expect("struct");
                let live = child_live(s.len());
                for (f, child) in fields.iter().zip(s.columns()) {
                    self.walk(child, &join_path(path, f.name()), false, rows, live.as_deref(), n);
                }
            }
            DataType::List(_) => {
                let list = array.as_any().downcast_ref::<ListArray>().expect("list");
                self.walk_list(
                    list.offsets().iter().map(|o| *o as usize),
                    list.values(),
                    path,
                    array,
                    rows,
                    live,
                    n,
                );
            }
            DataType::LargeList(_) => {
                let list = array
                    .as_any()
                    .downcast_ref::<LargeListArray>()
                    .expect("large list");
                self.walk_list(
                    list.offsets().iter().map(|o| *o as usize),
                    list.values(),
                    path,
                    array,
                    rows,
                    live,
                    n,
                );
            }
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn walk_list(
        &mut self,
        offsets: impl Iterator<Item = usize>,
        values: &ArrayRef,
        path: &str,
        list: &ArrayRef,
        rows: Option<&[u32]>,
        live: Option<&[bool]>,
        n: usize,
    ) {
        let offsets: Vec<usize> = offsets.collect();
        let mut value_rows = vec![0u32; values.len()];
        let mut value_live = vec![false; values.len()];
        for slot in 0..list.len() {
            let row = rows.map_or(slot as u32, |r| r[slot]);
            let present = live.is_none_or(|l| l[slot]) && list.is_valid(slot);
            for v in offsets[slot]..offsets[slot + 1] {
                value_rows[v] = row;
                value_live[v] = present;
            }
        }
        self.walk(
            values,
            &join_path(path, LIST_ELEMENT),
            true,
            Some(&value_rows),
            Some(&value_live),
            n,
        );
    }

    /// Whether any row holds a null at `path`.
    pub fn has_nulls(&self, path: &str) -> bool {
        self.paths.contains_key(path)
    }

    /// The rows holding a null at `path`.
    pub fn rows_with_null(&self, path: &str) -> Option<&[bool]> {
        self.paths.get(path).map(|p| p.rows.as_slice())
    }

    /// For each row holding a null array element, the first such array's path.
    pub fn null_elements(&self) -> BTreeMap<usize, String> {
        let mut out = BTreeMap::new();
        for (path, p) in &self.paths {
            if !p.element {
                continue;
            }
            let array = path.strip_suffix(".element").unwrap_or(path);
            for (row, _) in p.rows.iter().enumerate().filter(|(_, null)| **null) {
                out.entry(row).or_insert_with(|| array.to_string());
            }
        }
        out
    }

    /// Marks fields under lists that the input declares optional but that hold no null in
    /// this batch as required. The planner takes declarations as they are under lists
    /// (statistics of files cannot tell levels apart); here the data itself was looked at.
    pub fn tighten(&self, input: &mut InputSchema) {
        fn walk(map: &NullMap, field: &mut CoreField, path: &str, under: bool) {
            if under && !field.required && !map.has_nulls(path) {
                field.required = true;
            }
            let container = field.data_type.is_container();
            match &mut field.data_type {
                CoreType::Struct { fields } => {
                    for f in fields {
                        let p = join_path(path, &f.name);
                        walk(map, f, &p, under);
                    }
                }
                CoreType::List { list } => {
                    walk(map, list, &join_path(path, LIST_ELEMENT), under || container)
                }
                CoreType::Map { .. } | CoreType::Primitive(_) => {}
            }
        }
        for field in &mut input.schema.fields {
            let path = field.name.clone();
            walk(self, field, &path, false);
        }
    }
}

/// Makes every list of `array` non-null, a null list becoming empty (BigQuery's reading of
/// a NULL array), and gives the result the field types of `target` (whose lists are
/// declared non-null).
pub fn finalize_lists(array: &ArrayRef, target: &DataType) -> Result<ArrayRef> {
    match (array.data_type(), target) {
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let s = array.as_any().downcast_ref::<StructArray>().expect("struct");
            let children = s
                .columns()
                .iter()
                .zip(fields.iter())
                .map(|(c, f)| finalize_lists(c, f.data_type()))
                .collect::<Result<Vec<_>>>()?;
            Ok(Arc::new(StructArray::try_new(
                fields.clone(),
                children,
                s.nulls().cloned(),
            )?))
        }
        (DataType::List(_), DataType::List(element)) => {
            let list = array.as_any().downcast_ref::<ListArray>().expect("list");
            let (offsets, values) = drop_null_lists(list)?;
            let values = finalize_lists(&values, element.data_type())?;
            Ok(Arc::new(ListArray::try_new(
                element.clone(),
                offsets,
                values,
                None,
            )?))
        }
        _ => Ok(array.clone()),
    }
}

/// The offsets and values of `list` with its null entries emptied.
fn drop_null_lists(list: &ListArray) -> Result<(OffsetBuffer<i32>, ArrayRef)> {
    let offsets = list.offsets();
    let Some(nulls) = list.nulls().filter(|n| n.null_count() > 0) else {
        return Ok((offsets.clone(), list.values().clone()));
    };
    let all_empty = nulls
        .iter()
        .enumerate()
        .all(|(i, valid)| valid || offsets[i] == offsets[i + 1]);
    if all_empty {
        return Ok((offsets.clone(), list.values().clone()));
    }
    let mut new_offsets = Vec::with_capacity(offsets.len());
    let mut keep = Vec::new();
    new_offsets.push(0i32);
    for (i, valid) in nulls.iter().enumerate() {
        if valid {
            keep.extend(offsets[i] as u64..offsets[i + 1] as u64);
        }
        new_offsets.push(keep.len() as i32);
    }
    let values = arrow_select::take::take(list.values(), &UInt64Array::from(keep), None)?;
    Ok((OffsetBuffer::new(ScalarBuffer::from(new_offsets)), values))
}

/// A batch in exactly the schema BigQuery is sent: `conformed` (in the conform target,
/// whose lists may be null) with its lists finalized.
pub fn finalize_batch(conformed: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    let columns = conformed
        .columns()
        .iter()
        .zip(target.fields())
        .map(|(c, f)| finalize_lists(c, f.data_type()))
        .collect::<Result<Vec<_>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(conformed.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        target.clone(),
        columns,
        &options,
    )?)
}

/// An estimate of each row's share of an encoded request, in bytes, from its values and
/// offsets (an upper bound up to the message's fixed framing).
pub fn row_sizes(batch: &RecordBatch) -> Vec<usize> {
    let mut sizes = vec![0usize; batch.num_rows()];
    for column in batch.columns() {
        add_slot_sizes(column, &mut sizes);
    }
    sizes
}

/// Adds each slot's size in `array` to `sizes` (one entry per slot).
fn add_slot_sizes(array: &ArrayRef, sizes: &mut [usize]) {
    // One byte of validity per value is an overestimate that keeps the arithmetic simple.
    let add_fixed = |sizes: &mut [usize], width: usize| sizes.iter_mut().for_each(|s| *s += width + 1);
    match array.data_type() {
        DataType::Null => {}
        DataType::Boolean => add_fixed(sizes, 1),
        DataType::Utf8 | DataType::Binary => {
            let data = array.to_data();
            let offsets = &data.buffers()[0].typed_data::<i32>()[data.offset()..];
            for (i, s) in sizes.iter_mut().enumerate() {
                *s += (offsets[i + 1] - offsets[i]) as usize + 5;
            }
        }
        DataType::LargeUtf8 | DataType::LargeBinary => {
            let data = array.to_data();
            let offsets = &data.buffers()[0].typed_data::<i64>()[data.offset()..];
            for (i, s) in sizes.iter_mut().enumerate() {
                *s += (offsets[i + 1] - offsets[i]) as usize + 9;
            }
        }
        DataType::Struct(_) => {
            let s = array.as_any().downcast_ref::<StructArray>().expect("struct");
            add_fixed(sizes, 0);
            for child in s.columns() {
                add_slot_sizes(child, sizes);
            }
        }
        DataType::List(_) => {
            let list = array.as_any().downcast_ref::<ListArray>().expect("list");
            let offsets: Vec<usize> = list.offsets().iter().map(|o| *o as usize).collect();
            add_list_sizes(&offsets, list.values(), 5, sizes);
        }
        DataType::LargeList(_) => {
            let list = array
                .as_any()
                .downcast_ref::<LargeListArray>()
                .expect("large list");
            let offsets: Vec<usize> = list.offsets().iter().map(|o| *o as usize).collect();
            add_list_sizes(&offsets, list.values(), 9, sizes);
        }
        other => match other.primitive_width() {
            Some(width) => add_fixed(sizes, width),
            // Views, dictionaries and the like are reshaped before sizing; count their
            // whole buffers per row as a safe upper bound.
            None => add_fixed(sizes, array.get_buffer_memory_size()),
        },
    }
}

fn add_list_sizes(offsets: &[usize], values: &ArrayRef, own: usize, sizes: &mut [usize]) {
    let mut inner = vec![0usize; values.len()];
    add_slot_sizes(values, &mut inner);
    for (i, s) in sizes.iter_mut().enumerate() {
        *s += own + inner[offsets[i]..offsets[i + 1]].iter().sum::<usize>();
    }
}

/// How rows are cut into requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Consecutive row ranges, each estimated under the budget.
    pub ranges: Vec<Range<usize>>,
    /// Rows estimated over the budget on their own, with their estimated size.
    pub oversize: Vec<(usize, usize)>,
}

/// Cuts rows of the given sizes into consecutive ranges of at most `budget` bytes each,
/// setting aside the rows that exceed it on their own.
pub fn split_rows(sizes: &[usize], budget: usize) -> Split {
    let mut split = Split::default();
    let mut start = 0;
    let mut total = 0;
    for (row, &size) in sizes.iter().enumerate() {
        if size > budget {
            if start < row {
                split.ranges.push(start..row);
            }
            split.oversize.push((row, size));
            start = row + 1;
            total = 0;
            continue;
        }
        if total + size > budget && start < row {
            split.ranges.push(start..row);
            start = row;
            total = 0;
        }
        total += size;
    }
    if start < sizes.len() {
        split.ranges.push(start..sizes.len());
    }
    split
}

/// An Arrow schema as one encapsulated IPC schema message, what `ArrowSchema` holds.
pub fn ipc_schema(schema: &Schema) -> Bytes {
    let options = IpcWriteOptions::default();
    let encoded = IpcDataGenerator::default().schema_to_bytes_with_dictionary_tracker(
        schema,
        &mut DictionaryTracker::new(false),
        &options,
    );
    let mut out = Vec::new();
    write_message(&mut out, encoded, &options).expect("writing to memory");
    Bytes::from(out)
}

/// A batch as one encapsulated IPC record batch message, what `ArrowRecordBatch` holds.
pub fn ipc_batch(batch: &RecordBatch) -> Result<Bytes> {
    let options = IpcWriteOptions::default();
    let (dictionaries, encoded) = IpcDataGenerator::default().encode(
        batch,
        &mut DictionaryTracker::new(false),
        &options,
        &mut CompressionContext::default(),
    )?;
    if !dictionaries.is_empty() {
        return Err(Error::internal(
            "dictionary columns must be unpacked before encoding",
        ));
    }
    let mut out = Vec::with_capacity(encoded.arrow_data.len() + encoded.ipc_message.len() + 16);
    write_message(&mut out, encoded, &options)?;
    Ok(Bytes::from(out))
}

/// Rows too large for any request: (position, encoded or estimated size in bytes).
pub type Oversize = Vec<(usize, usize)>;

/// One AppendRows request's rows, encoded.
#[derive(Clone, Debug)]
pub struct EncodedRequest {
    /// The IPC record batch message.
    pub bytes: Bytes,
    /// The rows it carries, with their input positions.
    pub rows: Rows,
}

/// The requests for `rows` (already in the schema BigQuery is sent), each at most `limit`
/// bytes with the envelope and `schema_bytes`, and the rows too large for any request
/// (position in `rows`, encoded or estimated size).
pub fn encode_requests(
    rows: &Rows,
    limit: usize,
    schema_bytes: usize,
) -> Result<(Vec<EncodedRequest>, Oversize)> {
    let budget = limit.saturating_sub(schema_bytes + REQUEST_ENVELOPE_BYTES);
    // Most batches fit one request: their buffers say so cheaply, and sizing each row is
    // then not needed.
    let buffers: usize = rows
        .batch
        .columns()
        .iter()
        .map(|c| c.get_buffer_memory_size())
        .sum();
    if buffers <= budget && !rows.is_empty() {
        let bytes = ipc_batch(&rows.batch)?;
        if bytes.len() <= budget {
            return Ok((
                vec![EncodedRequest {
                    bytes,
                    rows: rows.clone(),
                }],
                Vec::new(),
            ));
        }
    }
    let split = split_rows(&row_sizes(&rows.batch), budget);
    let mut requests = Vec::new();
    let mut oversize = split.oversize;
    let mut pending: Vec<Range<usize>> = split.ranges.into_iter().rev().collect();
    // Bounded: every round either emits a range or halves one.
    while let Some(range) = pending.pop() {
        let part = rows.slice(range.clone());
        let bytes = ipc_batch(&part.batch)?;
        if bytes.len() <= budget {
            requests.push(EncodedRequest { bytes, rows: part });
        } else if range.len() == 1 {
            oversize.push((range.start, bytes.len()));
        } else {
            let mid = range.start + range.len() / 2;
            pending.push(mid..range.end);
            pending.push(range.start..mid);
        }
    }
    oversize.sort_unstable();
    Ok((requests, oversize))
}

#[cfg(test)]
mod tests {
    use arrow_array::builder::{Int32Builder, ListBuilder, MapBuilder, StringBuilder};
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use arrow_buffer::NullBuffer;
    use arrow_ipc::reader::StreamReader;
    use outflow_core::schema::{PrimitiveType, Schema as CoreSchema};

    use super::*;

    fn ints(name: &str, values: Vec<Option<i32>>) -> (Field, ArrayRef) {
        (
            Field::new(name, DataType::Int32, true),
            Arc::new(Int32Array::from(values)),
        )
    }

    fn batch(columns: Vec<(Field, ArrayRef)>) -> RecordBatch {
        let (fields, arrays): (Vec<_>, Vec<_>) = columns.into_iter().unzip();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
    }

    fn tags(values: Vec<Option<Vec<Option<i32>>>>) -> (Field, ArrayRef) {
        let mut b = ListBuilder::new(Int32Builder::new());
        for v in values {
            match v {
                Some(items) => {
                    for i in items {
                        b.values().append_option(i);
                    }
                    b.append(true);
                }
                None => b.append(false),
            }
        }
        let a = b.finish();
        (Field::new("tags", a.data_type().clone(), true), Arc::new(a))
    }

    #[test]
    fn maps_become_repeated_records_and_uuids_text() {
        let mut m = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
        m.keys().append_value("a");
        m.values().append_value(1);
        m.append(true).unwrap();
        m.append(false).unwrap();
        let map = m.finish();
        let uuid = FixedSizeBinaryArray::try_from_iter([[7u8; 16], [0u8; 16]].into_iter()).unwrap();
        let uuid_field = Field::new("u", DataType::FixedSizeBinary(16), true).with_metadata(
            [(EXTENSION_NAME_KEY.to_string(), UUID_EXTENSION.to_string())]
                .into_iter()
                .collect(),
        );
        let input = batch(vec![
            (Field::new("m", map.data_type().clone(), true), Arc::new(map)),
            (uuid_field, Arc::new(uuid)),
        ]);
        let out = shape_input(&input).unwrap();
        let DataType::List(element) = out.schema().field(0).data_type().clone() else {
            panic!()
        };
        let DataType::Struct(kv) = element.data_type() else {
            panic!()
        };
        assert_eq!(kv[0].name(), "key");
        assert_eq!(kv[1].name(), "value");
        let list = out.column(0).as_any().downcast_ref::<ListArray>().unwrap();
        assert_eq!((list.value_length(0), list.is_null(1)), (1, true));
        let text = out.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(text.value(0), "07070707-0707-0707-0707-070707070707");
        // Nothing to reshape: the same batch.
        let plain = batch(vec![ints("a", vec![Some(1)])]);
        assert_eq!(shape_input(&plain).unwrap(), plain);
    }

    #[test]
    fn names_align_with_the_table_without_case() {
        let table = TableSchema::new(vec![
            TableField::new("id", FieldType::Int64),
            TableField::record("rec", vec![TableField::new("Inner", FieldType::Int64)]),
        ]);
        let inner = StructArray::from(vec![
            (
                Arc::new(Field::new("INNER", DataType::Int32, true)),
                Arc::new(Int32Array::from(vec![1])) as ArrayRef,
            ),
            (
                Arc::new(Field::new("zzz", DataType::Int32, true)),
                Arc::new(Int32Array::from(vec![2])) as ArrayRef,
            ),
        ]);
        let input = batch(vec![
            ints("ID", vec![Some(1)]),
            (
                Field::new("REC", inner.data_type().clone(), true),
                Arc::new(inner),
            ),
            ints("extra", vec![Some(3)]),
        ]);
        let kept = align_names(&input, &table, false).unwrap();
        let names: Vec<_> = kept.schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["id", "rec", "extra"]);
        let DataType::Struct(children) = kept.schema().field(1).data_type().clone() else {
            panic!()
        };
        assert_eq!(children[0].name(), "Inner");
        assert_eq!(children[1].name(), "zzz");
        let dropped = align_names(&input, &table, true).unwrap();
        assert_eq!(dropped.num_columns(), 2);
        let DataType::Struct(children) = dropped.schema().field(1).data_type().clone() else {
            panic!()
        };
        assert_eq!(children.len(), 1);
        let twice = batch(vec![ints("id", vec![Some(1)]), ints("ID", vec![Some(2)])]);
        let err = align_names(&twice, &table, false).unwrap_err();
        assert!(err.to_string().contains("same column"), "{err}");
    }

    #[test]
    fn null_map_follows_structs_and_lists_to_rows() {
        let input = batch(vec![
            ints("a", vec![Some(1), None, Some(3)]),
            tags(vec![Some(vec![Some(1), None]), None, Some(vec![Some(2)])]),
        ]);
        let map = NullMap::of(&input);
        assert_eq!(map.rows_with_null("a").unwrap(), [false, true, false]);
        assert_eq!(map.rows_with_null("tags").unwrap(), [false, true, false]);
        assert_eq!(
            map.null_elements().into_iter().collect::<Vec<_>>(),
            [(0, "tags".to_string())]
        );
        assert!(!map.has_nulls("tags.element.x"));

        let mut schema = InputSchema::from_batch(&input).unwrap();
        schema.schema.fields.push(CoreField::optional(
            "clean",
            outflow_core::schema::DataType::list(CoreField::optional("element", PrimitiveType::Int)),
        ));
        map.tighten(&mut schema);
        let s: &CoreSchema = &schema.schema;
        assert!(
            !s.field_at("tags.element").unwrap().required,
            "tags holds a null element"
        );
        assert!(
            s.field_at("clean.element").unwrap().required,
            "no null: declared required"
        );
        assert!(
            !s.field("a").unwrap().required,
            "outside lists the statistics speak"
        );
    }

    #[test]
    fn null_lists_become_empty_and_lists_non_null() {
        let (_, array) = tags(vec![Some(vec![Some(1)]), None, Some(vec![Some(2), Some(3)])]);
        let target = DataType::List(Arc::new(Field::new("item", DataType::Int32, false)));
        let out = finalize_lists(&array, &target).unwrap();
        let list = out.as_any().downcast_ref::<ListArray>().unwrap();
        assert_eq!(list.null_count(), 0);
        assert_eq!(list.value_length(1), 0);
        assert_eq!(
            list.value(2)
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap()
                .values(),
            &[2, 3]
        );
        assert_eq!(out.data_type(), &target);
        // A null entry that still spans values (allowed by Arrow) is emptied too.
        let field = Arc::new(Field::new("item", DataType::Int32, true));
        let odd = ListArray::new(
            field,
            OffsetBuffer::new(ScalarBuffer::from(vec![0, 2, 3])),
            Arc::new(Int32Array::from(vec![1, 2, 3])),
            Some(NullBuffer::from(vec![false, true])),
        );
        let out = finalize_lists(&(Arc::new(odd) as ArrayRef), &target).unwrap();
        let list = out.as_any().downcast_ref::<ListArray>().unwrap();
        assert_eq!(list.value_length(0), 0);
        assert_eq!(
            list.value(1)
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap()
                .values(),
            &[3]
        );
    }

    #[test]
    fn splitting_respects_the_budget_and_sets_oversize_rows_aside() {
        let split = split_rows(&[10, 10, 10, 50, 10, 10], 25);
        assert_eq!(split.ranges, vec![0..2, 2..3, 4..6]);
        assert_eq!(split.oversize, vec![(3, 50)]);
        assert_eq!(split_rows(&[], 10), Split::default());
        assert_eq!(split_rows(&[5; 4], 100).ranges, vec![0..4]);
    }

    #[test]
    fn row_sizes_grow_with_values() {
        let strings = StringArray::from(vec!["", "abcdefghij"]);
        let input = batch(vec![
            (
                Field::new("s", DataType::Utf8, true),
                Arc::new(strings) as ArrayRef,
            ),
            tags(vec![Some(vec![Some(1); 100]), Some(vec![])]),
        ]);
        let sizes = row_sizes(&input);
        assert_eq!(sizes[1], 5 + 10 + 5);
        assert_eq!(sizes[0], 5 + 5 + 100 * 5);
        // Slices size only their own rows.
        assert_eq!(row_sizes(&input.slice(1, 1)), vec![sizes[1]]);
    }

    #[test]
    fn requests_stay_under_the_limit_and_decode_back() {
        let n = 10_000;
        let input = batch(vec![
            (
                Field::new("id", DataType::Int64, false),
                Arc::new(Int64Array::from_iter_values(0..n as i64)) as ArrayRef,
            ),
            (
                Field::new("s", DataType::Utf8, true),
                Arc::new(StringArray::from_iter_values((0..n).map(|i| "x".repeat(i % 50)))),
            ),
        ]);
        let rows = Rows::numbered(input.clone(), 100);
        let schema_bytes = ipc_schema(&input.schema()).len();
        let limit = 64 * 1024;
        let (requests, oversize) = encode_requests(&rows, limit, schema_bytes).unwrap();
        assert!(oversize.is_empty());
        assert!(requests.len() > 3, "{} requests", requests.len());
        let mut next = 100;
        for r in &requests {
            assert!(r.bytes.len() + schema_bytes + REQUEST_ENVELOPE_BYTES <= limit);
            assert_eq!(r.rows.indices[0], next);
            next += r.rows.len() as u64;
            // The schema message followed by the batch message is an IPC stream.
            let mut stream = ipc_schema(&input.schema()).to_vec();
            stream.extend_from_slice(&r.bytes);
            let decoded: Vec<RecordBatch> = StreamReader::try_new(std::io::Cursor::new(stream), None)
                .unwrap()
                .map(|b| b.unwrap())
                .collect();
            assert_eq!(decoded[0], r.rows.batch);
        }
        assert_eq!(next, 100 + n as u64);
        // A row bigger than the limit on its own is set aside, the rest still goes.
        let big = batch(vec![(
            Field::new("s", DataType::Utf8, true),
            Arc::new(StringArray::from(vec![
                "a".to_string(),
                "b".repeat(100_000),
                "c".to_string(),
            ])) as ArrayRef,
        )]);
        let (requests, oversize) = encode_requests(&Rows::numbered(big, 0), limit, 200).unwrap();
        assert_eq!(oversize.iter().map(|(r, _)| *r).collect::<Vec<_>>(), [1]);
        assert_eq!(
            requests
                .iter()
                .map(|r| r.rows.indices.clone())
                .collect::<Vec<_>>(),
            [vec![0], vec![2]]
        );
    }

    #[test]
    fn rows_keep_their_input_positions() {
        let rows = Rows::numbered(batch(vec![ints("a", vec![Some(1), Some(2), Some(3)])]), 10);
        let kept = rows.take(&[0, 2]).unwrap();
        assert_eq!(kept.indices, [10, 12]);
        assert_eq!(rows.slice(1..3).indices, [11, 12]);
    }
}
