//! Arrow rows to Bigtable mutations: which field makes the row key, which fields go to
//! which family and qualifier, the cell timestamps, and how values are encoded.
//!
//! Pure: no I/O. A [`RowEncoder`] is checked once per input schema and table (fields
//! exist, families exist, aggregate families get integers), then turns each row into one
//! MutateRows entry, or into a reason the row cannot be written.
//!
//! Values (for `SetCell` into raw families) are encoded as Bigtable users expect:
//! - signed and unsigned integers: big-endian two's complement, in the column's own width
//!   (Int64 is 8 bytes, Int32 4, Int8 1);
//! - Float32 and Float64: IEEE 754 bits, big-endian (4 and 8 bytes);
//! - Boolean: one byte, 1 or 0;
//! - strings: their UTF-8 bytes; binary: the bytes as they are;
//! - dates, times, timestamps, durations, decimals and dictionaries: their text, UTF-8
//!   (`2024-05-01`, `2024-05-01T12:00:00.123456`, `12.50`);
//! - structs, lists and maps: their JSON text.
//!
//! A null value writes nothing (it does not delete the cell). Aggregate families take
//! `AddToCell` with the value as an Int64 input.

use std::collections::HashMap;
use std::fmt;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow_buffer::NullBuffer;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Schema, TimeUnit};
use gcloud_sdk::google::bigtable::v2::mutate_rows_request::Entry;
use gcloud_sdk::google::bigtable::v2::mutation::{
    AddToCell, DeleteFromColumn, DeleteFromFamily, DeleteFromRow, Mutation as Kind, SetCell,
};
use gcloud_sdk::google::bigtable::v2::{Mutation, TimestampRange, Value, value};
use gcloud_sdk::prost::Message;
use outflow_core::{Error, ErrorKind, Result};
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::batch::limits;
use crate::options::{ValueType, via_json};

/// How a row key is made: one field, or several joined by a separator.
///
/// Strings and binary values are used as they are; other types as their text (`42`,
/// `2024-05-01`). A null key field rejects the row. Serde form: `id`, `[region, id]`, or
/// `{fields: [region, id], separator: "#"}` (`#` is the default separator).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RowKey {
    fields: Vec<String>,
    separator: String,
}

const DEFAULT_SEPARATOR: &str = "#";

impl RowKey {
    /// The key is this field's value.
    pub fn field(name: impl Into<String>) -> Self {
        RowKey {
            fields: vec![name.into()],
            separator: DEFAULT_SEPARATOR.into(),
        }
    }

    /// The key is these fields' values joined by `separator`.
    pub fn fields<I, S>(names: I, separator: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RowKey {
            fields: names.into_iter().map(Into::into).collect(),
            separator: separator.into(),
        }
    }

    /// The key fields, in order.
    pub fn field_names(&self) -> &[String] {
        &self.fields
    }

    /// The separator between key fields.
    pub fn separator(&self) -> &str {
        &self.separator
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.fields.is_empty() {
            return Err(Error::invalid_config("row_key", "name at least one field"));
        }
        if let Some(i) = self.fields.iter().position(|f| f.trim().is_empty()) {
            return Err(Error::invalid_config(
                &format!("row_key.fields[{i}]"),
                "must not be blank",
            ));
        }
        Ok(())
    }
}

impl Serialize for RowKey {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        if self.fields.len() == 1 && self.separator == DEFAULT_SEPARATOR {
            return s.serialize_str(&self.fields[0]);
        }
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("fields", &self.fields)?;
        map.serialize_entry("separator", &self.separator)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for RowKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = RowKey;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name, a list of field names, or {fields: [...], separator: \"#\"}")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<RowKey, E> {
                Ok(RowKey::field(v))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<RowKey, A::Error> {
                let mut fields = Vec::new();
                while let Some(f) = seq.next_element::<String>()? {
                    fields.push(f);
                }
                Ok(RowKey::fields(fields, DEFAULT_SEPARATOR))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<RowKey, A::Error> {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Form {
                    fields: Vec<String>,
                    #[serde(default = "default_separator")]
                    separator: String,
                }
                fn default_separator() -> String {
                    DEFAULT_SEPARATOR.into()
                }
                let form = Form::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RowKey::fields(form.fields, form.separator))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

/// One field written to one column.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Column {
    field: String,
    family: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    qualifier: Option<String>,
}

impl Column {
    /// Field `field` to family `family`, with the field's name as the qualifier.
    pub fn new(field: impl Into<String>, family: impl Into<String>) -> Self {
        Column {
            field: field.into(),
            family: family.into(),
            qualifier: None,
        }
    }

    /// The same column with another qualifier.
    pub fn with_qualifier(mut self, qualifier: impl Into<String>) -> Self {
        self.qualifier = Some(qualifier.into());
        self
    }

    /// The top-level field.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The family.
    pub fn family(&self) -> &str {
        &self.family
    }

    /// The qualifier: the one set, or the field's name.
    pub fn qualifier(&self) -> &str {
        self.qualifier.as_deref().unwrap_or(&self.field)
    }
}

/// Which columns a row's fields go to. The key, timestamp and delete-marker fields are
/// never written as cells unless listed explicitly.
///
/// Serde form: `{family: cf}`, `{explicit: [{field, family, qualifier?}]}` or
/// `struct_families`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ColumnMapping {
    /// Every other top-level field to this family, qualified by its name.
    Family(String),
    /// The listed fields only, each to its family and qualifier.
    Explicit(Vec<Column>),
    /// One family per top-level struct field (named after the field), each child of the
    /// struct a qualifier. Every other field must be the key, timestamp or marker.
    StructFamilies,
}

impl ColumnMapping {
    /// Every other field to `family`.
    pub fn family(family: impl Into<String>) -> Self {
        ColumnMapping::Family(family.into())
    }

    /// The listed columns only.
    pub fn explicit(columns: impl IntoIterator<Item = Column>) -> Self {
        ColumnMapping::Explicit(columns.into_iter().collect())
    }

    pub(crate) fn validate(&self) -> Result<()> {
        match self {
            ColumnMapping::Family(f) if f.trim().is_empty() => {
                Err(Error::invalid_config("columns.family", "must not be blank"))
            }
            ColumnMapping::Explicit(columns) if columns.is_empty() => Err(Error::invalid_config(
                "columns.explicit",
                "list at least one column",
            )),
            ColumnMapping::Explicit(columns) => {
                for (i, c) in columns.iter().enumerate() {
                    for (what, value) in [("field", Some(&c.field)), ("family", Some(&c.family))]
                        .into_iter()
                        .chain([("qualifier", c.qualifier.as_ref())])
                    {
                        if value.is_some_and(|v| v.trim().is_empty()) {
                            return Err(Error::invalid_config(
                                &format!("columns.explicit[{i}].{what}"),
                                "must not be blank",
                            ));
                        }
                    }
                    if c.qualifier().len() > limits::MAX_QUALIFIER_BYTES {
                        return Err(Error::invalid_config(
                            &format!("columns.explicit[{i}].qualifier"),
                            format!("is longer than Bigtable's {} bytes", limits::MAX_QUALIFIER_BYTES),
                        ));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The timestamp of the cells a row writes.
///
/// Serde form: `write_time` (the default), `server_time` or `{field: NAME}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum CellTimestamp {
    /// The sink's clock when the batch is written, in milliseconds, sent explicitly: a
    /// retried entry writes the same cells again rather than new versions.
    #[default]
    WriteTime,
    /// The server's clock (`-1`). A retried entry makes a new version, so these entries
    /// are never retried: a failure is reported instead.
    ServerTime,
    /// A field's value: a Timestamp (any unit) or Int64 microseconds since the epoch.
    Field(String),
}

// Both enums are written as a name or a one-key map in every format (YAML's default for
// enums would be a `!tag`), so serde is implemented by hand around a derived mirror.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum ColumnMappingForm {
    Family(String),
    Explicit(Vec<Column>),
    StructFamilies,
}

impl Serialize for ColumnMapping {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            ColumnMapping::StructFamilies => s.serialize_str("struct_families"),
            ColumnMapping::Family(family) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("family", family)?;
                map.end()
            }
            ColumnMapping::Explicit(columns) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("explicit", columns)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for ColumnMapping {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Ok(match via_json::<D, ColumnMappingForm>(d)? {
            ColumnMappingForm::Family(f) => ColumnMapping::Family(f),
            ColumnMappingForm::Explicit(c) => ColumnMapping::Explicit(c),
            ColumnMappingForm::StructFamilies => ColumnMapping::StructFamilies,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum CellTimestampForm {
    WriteTime,
    ServerTime,
    Field(String),
}

impl Serialize for CellTimestamp {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            CellTimestamp::WriteTime => s.serialize_str("write_time"),
            CellTimestamp::ServerTime => s.serialize_str("server_time"),
            CellTimestamp::Field(field) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("field", field)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for CellTimestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Ok(match via_json::<D, CellTimestampForm>(d)? {
            CellTimestampForm::WriteTime => CellTimestamp::WriteTime,
            CellTimestampForm::ServerTime => CellTimestamp::ServerTime,
            CellTimestampForm::Field(f) => CellTimestamp::Field(f),
        })
    }
}

/// What a row's delete-marker field says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowAction {
    Write,
    DeleteRow,
    DeleteFamilies,
    DeleteCells,
}

impl RowAction {
    fn parse(text: &str) -> Option<RowAction> {
        let folded: String = text
            .chars()
            .filter(|c| !matches!(c, '_' | '-' | ' '))
            .flat_map(char::to_lowercase)
            .collect();
        Some(match folded.as_str() {
            "" | "write" | "set" | "upsert" => RowAction::Write,
            "row" | "deleterow" => RowAction::DeleteRow,
            "family" | "families" | "deletefamily" | "deletefamilies" => RowAction::DeleteFamilies,
            "cell" | "cells" | "column" | "columns" | "deletecells" | "deletecolumns" => {
                RowAction::DeleteCells
            }
            _ => return None,
        })
    }
}

/// One field's path to a cell: its column (and struct child), family and qualifier.
#[derive(Clone, Debug, PartialEq)]
struct CellPlan {
    name: String,
    column: usize,
    child: Option<usize>,
    family: String,
    qualifier: Vec<u8>,
    aggregate: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum TimestampPlan {
    WriteTime,
    ServerTime,
    Field { name: String, column: usize },
}

/// Everything a sink needs to know to turn rows into mutations.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RowMapping {
    pub(crate) row_key: RowKey,
    pub(crate) columns: ColumnMapping,
    pub(crate) timestamp: CellTimestamp,
    pub(crate) delete_marker: Option<String>,
}

/// A row turned into an entry, with what batching and retrying need to know.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EncodedRow {
    pub(crate) entry: Entry,
    /// Whether sending the entry twice leaves the same cells as sending it once.
    pub(crate) idempotent: bool,
    pub(crate) mutations: usize,
    /// The entry's encoded size.
    pub(crate) bytes: usize,
}

/// What became of one row.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RowResult {
    Encoded(EncodedRow),
    /// Nothing to write: every mapped value is null.
    Empty,
    /// The row cannot be written; the reason names the field.
    Rejected(String),
}

/// Turns rows of one schema into entries for one table.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RowEncoder {
    key: Vec<(String, usize)>,
    separator: Vec<u8>,
    timestamp: TimestampPlan,
    marker: Option<(String, usize)>,
    cells: Vec<CellPlan>,
}

impl RowEncoder {
    /// Checks `schema` against the mapping and the table's families (name to value type)
    /// and plans the cells. Fails, naming the field, when a field is missing or of a type
    /// its role cannot take, or a family is missing from the table.
    pub(crate) fn new(
        schema: &Schema,
        mapping: &RowMapping,
        families: &HashMap<String, std::result::Result<ValueType, String>>,
        table: &str,
    ) -> Result<RowEncoder> {
        RowEncoder::for_fields(schema, mapping)?.with_families(schema, families, table)
    }

    /// The half of [`RowEncoder::new`] that needs no table: every field the mapping names
    /// exists in `schema` with a type its role takes (an error names the option and the
    /// column), and every cell's qualifier and type can be written.
    pub(crate) fn for_fields(schema: &Schema, mapping: &RowMapping) -> Result<RowEncoder> {
        let find = |key: &str, role: &str, name: &str| -> Result<usize> {
            schema.index_of(name).map_err(|_| {
                Error::invalid_config(key, format!("{role} field {name:?} is not in the rows' schema"))
                    .with_context("column", name)
            })
        };
        let mut key = Vec::new();
        for name in &mapping.row_key.fields {
            let index = find("row_key", "row key", name)?;
            let data_type = schema.field(index).data_type();
            if data_type.is_nested() {
                return Err(Error::invalid_config(
                    "row_key",
                    format!("row key field {name:?} is {data_type}; a key field must be a scalar"),
                )
                .with_context("column", name.clone()));
            }
            check_encodable(name, data_type)?;
            key.push((name.clone(), index));
        }
        let timestamp = match &mapping.timestamp {
            CellTimestamp::WriteTime => TimestampPlan::WriteTime,
            CellTimestamp::ServerTime => TimestampPlan::ServerTime,
            CellTimestamp::Field(name) => {
                let column = find("timestamp.field", "timestamp", name)?;
                let data_type = schema.field(column).data_type();
                if !matches!(data_type, DataType::Timestamp(..) | DataType::Int64) {
                    return Err(Error::invalid_config(
                        "timestamp.field",
                        format!(
                            "timestamp field {name:?} is {data_type}; it must be a Timestamp or Int64 microseconds"
                        ),
                    )
                    .with_context("column", name.clone()));
                }
                TimestampPlan::Field {
                    name: name.clone(),
                    column,
                }
            }
        };
        let marker = match &mapping.delete_marker {
            None => None,
            Some(name) => {
                let column = find("delete_marker", "delete marker", name)?;
                let data_type = schema.field(column).data_type();
                if !matches!(
                    data_type,
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Boolean
                ) {
                    return Err(Error::invalid_config(
                        "delete_marker",
                        format!(
                            "delete marker field {name:?} is {data_type}; it must be a string or a boolean"
                        ),
                    )
                    .with_context("column", name.clone()));
                }
                Some((name.clone(), column))
            }
        };
        let reserved = |name: &str| {
            mapping.row_key.fields.iter().any(|k| k == name)
                || matches!(&mapping.timestamp, CellTimestamp::Field(t) if t == name)
                || mapping.delete_marker.as_deref() == Some(name)
        };
        let mut cells = Vec::new();
        match &mapping.columns {
            ColumnMapping::Family(family) => {
                for (column, field) in schema.fields().iter().enumerate() {
                    if !reserved(field.name()) {
                        cells.push(CellPlan {
                            name: field.name().clone(),
                            column,
                            child: None,
                            family: family.clone(),
                            qualifier: field.name().as_bytes().to_vec(),
                            aggregate: false,
                        });
                    }
                }
            }
            ColumnMapping::Explicit(columns) => {
                for (i, c) in columns.iter().enumerate() {
                    cells.push(CellPlan {
                        name: c.field.clone(),
                        column: find(&format!("columns.explicit[{i}].field"), "column", &c.field)?,
                        child: None,
                        family: c.family.clone(),
                        qualifier: c.qualifier().as_bytes().to_vec(),
                        aggregate: false,
                    });
                }
            }
            ColumnMapping::StructFamilies => {
                for (column, field) in schema.fields().iter().enumerate() {
                    if reserved(field.name()) {
                        continue;
                    }
                    let DataType::Struct(children) = field.data_type() else {
                        return Err(Error::invalid_config(
                            "columns",
                            format!(
                                "field {:?} is {}; with struct_families every field other than the key, \
                                 timestamp and delete marker must be a struct (its name is the family)",
                                field.name(),
                                field.data_type()
                            ),
                        )
                        .with_context("column", field.name().clone()));
                    };
                    for (child, sub) in children.iter().enumerate() {
                        cells.push(CellPlan {
                            name: format!("{}.{}", field.name(), sub.name()),
                            column,
                            child: Some(child),
                            family: field.name().clone(),
                            qualifier: sub.name().as_bytes().to_vec(),
                            aggregate: false,
                        });
                    }
                }
            }
        }
        for cell in &cells {
            if cell.qualifier.len() > limits::MAX_QUALIFIER_BYTES {
                return Err(Error::invalid_input(format!(
                    "the qualifier of field {:?} is {} bytes; Bigtable allows {}",
                    cell.name,
                    cell.qualifier.len(),
                    limits::MAX_QUALIFIER_BYTES
                ))
                .with_context("column", cell.name.clone()));
            }
            check_encodable(&cell.name, field_type(schema, cell))?;
        }
        Ok(RowEncoder {
            key,
            separator: mapping.row_key.separator.as_bytes().to_vec(),
            timestamp,
            marker,
            cells,
        })
    }

    /// The half of [`RowEncoder::new`] that needs the table: every cell's family exists
    /// in it, and aggregate families get integer fields.
    fn with_families(
        mut self,
        schema: &Schema,
        families: &HashMap<String, std::result::Result<ValueType, String>>,
        table: &str,
    ) -> Result<RowEncoder> {
        for cell in &mut self.cells {
            let value_type = match families.get(&cell.family) {
                Some(Ok(value_type)) => *value_type,
                Some(Err(other)) => {
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        format!(
                            "field {:?} goes to column family {:?} of table {table}, whose value type \
                             Outflow cannot write: {other}",
                            cell.name, cell.family
                        ),
                    )
                    .with_context("column", cell.name.clone())
                    .with_context("family", cell.family.clone()));
                }
                None => {
                    return Err(Error::invalid_input(format!(
                        "field {:?} goes to column family {:?}, which table {table} does not have",
                        cell.name, cell.family
                    ))
                    .with_context("column", cell.name.clone())
                    .with_context("family", cell.family.clone()));
                }
            };
            cell.aggregate = value_type.is_aggregate();
            let data_type = field_type(schema, cell);
            if cell.aggregate && !is_integer(data_type) {
                return Err(Error::invalid_input(format!(
                    "field {:?} is {data_type}, but column family {:?} is an aggregate ({value_type}) over \
                     Int64: only integer fields can go into an aggregate family",
                    cell.name, cell.family
                ))
                .with_context("column", cell.name.clone())
                .with_context("family", cell.family.clone()));
            }
        }
        Ok(self)
    }

    /// Whether cells are at the write time (given to [`RowEncoder::encode`]).
    pub(crate) fn uses_write_time(&self) -> bool {
        self.timestamp == TimestampPlan::WriteTime
    }

    /// The first aggregate (AddToCell) family a field goes to, and the field, if any.
    pub(crate) fn aggregate_cell(&self) -> Option<(&str, &str)> {
        self.cells
            .iter()
            .find(|c| c.aggregate)
            .map(|c| (c.family.as_str(), c.name.as_str()))
    }

    /// Whether encoding the same rows again (at the same write time) gives the same cells:
    /// not with server-time cells or aggregate (AddToCell) families.
    pub(crate) fn replays_exactly(&self) -> bool {
        self.timestamp != TimestampPlan::ServerTime && !self.cells.iter().any(|c| c.aggregate)
    }

    /// Encodes the rows `rows` of `batch`. `now_micros` is the write time (used by
    /// [`CellTimestamp::WriteTime`]); the same value re-encodes the same entries.
    pub(crate) fn encode(
        &self,
        batch: &RecordBatch,
        rows: impl IntoIterator<Item = usize>,
        now_micros: i64,
    ) -> Result<Vec<RowResult>> {
        let key: Vec<Values<'_>> = self
            .key
            .iter()
            .map(|(_, c)| Values::of(batch.column(*c), None))
            .collect::<Result<_>>()?;
        let cells: Vec<Values<'_>> = self
            .cells
            .iter()
            .map(|p| cell_values(batch, p))
            .collect::<Result<_>>()?;
        let marker = self.marker.as_ref().map(|(_, c)| batch.column(*c));
        let timestamps = match &self.timestamp {
            TimestampPlan::Field { column, .. } => Some(batch.column(*column)),
            _ => None,
        };
        Ok(rows
            .into_iter()
            .map(
                |row| match self.encode_row(row, &key, &cells, marker, timestamps, now_micros) {
                    Ok(Some(encoded)) => RowResult::Encoded(encoded),
                    Ok(None) => RowResult::Empty,
                    Err(reason) => RowResult::Rejected(reason),
                },
            )
            .collect())
    }

    fn encode_row(
        &self,
        row: usize,
        key_values: &[Values<'_>],
        cell_values: &[Values<'_>],
        marker: Option<&ArrayRef>,
        timestamps: Option<&ArrayRef>,
        now_micros: i64,
    ) -> std::result::Result<Option<EncodedRow>, String> {
        let mut key = Vec::new();
        for (i, ((name, _), values)) in self.key.iter().zip(key_values).enumerate() {
            if values.is_null(row) {
                return Err(format!("row key field {name:?} is null"));
            }
            if i > 0 {
                key.extend_from_slice(&self.separator);
            }
            values.append_key(row, &mut key);
        }
        if key.is_empty() {
            return Err("the row key is empty; Bigtable needs a non-empty key".into());
        }
        if key.len() > limits::MAX_ROW_KEY_BYTES {
            return Err(format!(
                "the row key is {} bytes; Bigtable allows at most {}",
                key.len(),
                limits::MAX_ROW_KEY_BYTES
            ));
        }
        let action = match (marker, &self.marker) {
            (Some(array), Some((name, _))) => marker_action(array, row, name)?,
            _ => RowAction::Write,
        };
        let (set_ts, add_ts, field_ts) = match (&self.timestamp, timestamps) {
            (TimestampPlan::WriteTime, _) => (now_micros, 0, None),
            (TimestampPlan::ServerTime, _) => (-1, 0, None),
            (TimestampPlan::Field { name, .. }, Some(array)) => {
                let ts = timestamp_micros(array, row, name)?;
                (ts, ts, Some(ts))
            }
            (TimestampPlan::Field { .. }, None) => {
                unreachable!("the timestamp column is resolved with the plan")
            }
        };
        // At most a mutation a cell: sized once, since growing the vector moved every
        // mutation built so far (a tenth of the writer's CPU on rows of five cells).
        let mut mutations = Vec::with_capacity(self.cells.len().max(1));
        let mut idempotent = true;
        match action {
            RowAction::DeleteRow => mutations.push(mutation(Kind::DeleteFromRow(DeleteFromRow {}))),
            RowAction::DeleteFamilies => {
                let mut seen: Vec<&str> = Vec::new();
                for (plan, values) in self.cells.iter().zip(cell_values) {
                    if !values.is_null(row) && !seen.contains(&plan.family.as_str()) {
                        seen.push(&plan.family);
                        mutations.push(mutation(Kind::DeleteFromFamily(DeleteFromFamily {
                            family_name: plan.family.clone(),
                        })));
                    }
                }
            }
            RowAction::DeleteCells => {
                for (plan, values) in self.cells.iter().zip(cell_values) {
                    if !values.is_null(row) {
                        mutations.push(mutation(Kind::DeleteFromColumn(DeleteFromColumn {
                            family_name: plan.family.clone(),
                            column_qualifier: plan.qualifier.clone(),
                            // With timestamps from a field, the row names one version;
                            // otherwise every version of the column goes.
                            time_range: field_ts.map(|ts| TimestampRange {
                                start_timestamp_micros: ts,
                                end_timestamp_micros: ts + 1000,
                            }),
                        })));
                    }
                }
            }
            RowAction::Write => {
                for (plan, values) in self.cells.iter().zip(cell_values) {
                    if values.is_null(row) {
                        continue;
                    }
                    if plan.aggregate {
                        let input = values.int(row).ok_or_else(|| {
                            format!("field {:?}: the value does not fit in an Int64", plan.name)
                        })?;
                        idempotent = false;
                        mutations.push(mutation(Kind::AddToCell(AddToCell {
                            family_name: plan.family.clone(),
                            column_qualifier: Some(raw_value(value::Kind::RawValue(plan.qualifier.clone()))),
                            timestamp: Some(raw_value(value::Kind::RawTimestampMicros(add_ts))),
                            input: Some(raw_value(value::Kind::IntValue(input))),
                        })));
                    } else {
                        let value = values.bytes(row);
                        if value.len() > limits::MAX_CELL_BYTES {
                            return Err(format!(
                                "field {:?}: the value is {} bytes; a Bigtable cell holds at most {}",
                                plan.name,
                                value.len(),
                                limits::MAX_CELL_BYTES
                            ));
                        }
                        idempotent &= set_ts != -1;
                        mutations.push(mutation(Kind::SetCell(SetCell {
                            family_name: plan.family.clone(),
                            column_qualifier: plan.qualifier.clone(),
                            timestamp_micros: set_ts,
                            value,
                        })));
                    }
                }
            }
        }
        if mutations.is_empty() {
            return Ok(None);
        }
        if mutations.len() > limits::MAX_MUTATIONS_PER_REQUEST {
            return Err(format!(
                "the row has {} mutations; one MutateRows request takes at most {}",
                mutations.len(),
                limits::MAX_MUTATIONS_PER_REQUEST
            ));
        }
        let entry = Entry {
            row_key: key,
            mutations,
            idempotency: None,
        };
        let bytes = entry.encoded_len();
        if bytes > limits::MAX_ENTRY_BYTES {
            return Err(format!(
                "the row is {bytes} bytes; one MutateRows request takes at most {}",
                limits::MAX_ENTRY_BYTES
            ));
        }
        Ok(Some(EncodedRow {
            mutations: entry.mutations.len(),
            entry,
            idempotent,
            bytes,
        }))
    }
}

fn mutation(kind: Kind) -> Mutation {
    Mutation {
        mutation: Some(kind),
        ..Default::default()
    }
}

fn raw_value(kind: value::Kind) -> Value {
    Value {
        r#type: None,
        kind: Some(kind),
    }
}

fn field_type<'a>(schema: &'a Schema, plan: &CellPlan) -> &'a DataType {
    let top = schema.field(plan.column).data_type();
    match (top, plan.child) {
        (DataType::Struct(children), Some(child)) => children[child].data_type(),
        _ => top,
    }
}

/// Checks, once per schema, that values of `data_type` can be encoded, so that encoding
/// rows cannot fail for their type.
fn check_encodable(name: &str, data_type: &DataType) -> Result<()> {
    if data_type.is_nested() {
        return Ok(());
    }
    let empty = arrow_array::new_empty_array(data_type);
    ArrayFormatter::try_new(empty.as_ref(), &FormatOptions::default()).map_err(|e| {
        Error::new(
            ErrorKind::Unsupported,
            format!("field {name:?} is {data_type}, which the Bigtable sink cannot encode"),
        )
        .with_context("column", name)
        .with_source(e)
    })?;
    Ok(())
}

fn is_integer(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
    )
}

fn cell_values<'a>(batch: &'a RecordBatch, plan: &CellPlan) -> Result<Values<'a>> {
    let column = batch.column(plan.column);
    match plan.child {
        None => Values::of(column, None),
        Some(child) => {
            let parent: &StructArray = column.as_struct();
            Values::of(parent.column(child), parent.nulls())
        }
    }
}

fn marker_action(array: &ArrayRef, row: usize, name: &str) -> std::result::Result<RowAction, String> {
    if array.is_null(row) {
        return Ok(RowAction::Write);
    }
    let text = match array.data_type() {
        DataType::Boolean => {
            return Ok(if array.as_boolean().value(row) {
                RowAction::DeleteRow
            } else {
                RowAction::Write
            });
        }
        DataType::Utf8 => array.as_string::<i32>().value(row),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row),
        DataType::Utf8View => array.as_string_view().value(row),
        other => unreachable!("the marker's type {other} is checked with the plan"),
    };
    RowAction::parse(text).ok_or_else(|| {
        format!("delete marker field {name:?} is {text:?}; expected null, \"row\", \"families\" or \"cells\"")
    })
}

/// A timestamp field's value in microseconds, floored to milliseconds: Bigtable tables
/// keep millisecond granularity and reject other timestamps.
fn timestamp_micros(array: &ArrayRef, row: usize, name: &str) -> std::result::Result<i64, String> {
    if array.is_null(row) {
        return Err(format!("timestamp field {name:?} is null"));
    }
    let micros = match array.data_type() {
        DataType::Int64 => Some(array.as_primitive::<Int64Type>().value(row)),
        DataType::Timestamp(TimeUnit::Second, _) => array
            .as_primitive::<TimestampSecondType>()
            .value(row)
            .checked_mul(1_000_000),
        DataType::Timestamp(TimeUnit::Millisecond, _) => array
            .as_primitive::<TimestampMillisecondType>()
            .value(row)
            .checked_mul(1000),
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            Some(array.as_primitive::<TimestampMicrosecondType>().value(row))
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => Some(
            array
                .as_primitive::<TimestampNanosecondType>()
                .value(row)
                .div_euclid(1000),
        ),
        other => unreachable!("the timestamp's type {other} is checked with the plan"),
    };
    match micros {
        Some(m) if m >= 0 => Ok(m - m % 1000),
        _ => Err(format!(
            "timestamp field {name:?} is before 1970 or out of range; Bigtable cell timestamps start at 0"
        )),
    }
}

/// One column's values, resolved once per batch; a struct parent's nulls count as the
/// child's.
struct Values<'a> {
    array: &'a dyn Array,
    parent: Option<&'a NullBuffer>,
    kind: ValueKind<'a>,
}

enum ValueKind<'a> {
    Bool(&'a arrow_array::BooleanArray),
    I8(&'a arrow_array::Int8Array),
    I16(&'a arrow_array::Int16Array),
    I32(&'a arrow_array::Int32Array),
    I64(&'a arrow_array::Int64Array),
    U8(&'a arrow_array::UInt8Array),
    U16(&'a arrow_array::UInt16Array),
    U32(&'a arrow_array::UInt32Array),
    U64(&'a arrow_array::UInt64Array),
    F32(&'a arrow_array::Float32Array),
    F64(&'a arrow_array::Float64Array),
    Utf8(&'a arrow_array::StringArray),
    LargeUtf8(&'a arrow_array::LargeStringArray),
    Utf8View(&'a arrow_array::StringViewArray),
    Binary(&'a arrow_array::BinaryArray),
    LargeBinary(&'a arrow_array::LargeBinaryArray),
    BinaryView(&'a arrow_array::BinaryViewArray),
    FixedBinary(&'a arrow_array::FixedSizeBinaryArray),
    /// Structs, lists and maps: each row's JSON text, made once per batch.
    Json(Vec<Option<Vec<u8>>>),
    /// Everything else: its text.
    Text(ArrayFormatter<'a>),
}

impl<'a> Values<'a> {
    fn of(array: &'a ArrayRef, parent: Option<&'a NullBuffer>) -> Result<Values<'a>> {
        let kind = match array.data_type() {
            DataType::Boolean => ValueKind::Bool(array.as_boolean()),
            DataType::Int8 => ValueKind::I8(array.as_primitive::<Int8Type>()),
            DataType::Int16 => ValueKind::I16(array.as_primitive::<Int16Type>()),
            DataType::Int32 => ValueKind::I32(array.as_primitive::<Int32Type>()),
            DataType::Int64 => ValueKind::I64(array.as_primitive::<Int64Type>()),
            DataType::UInt8 => ValueKind::U8(array.as_primitive::<UInt8Type>()),
            DataType::UInt16 => ValueKind::U16(array.as_primitive::<UInt16Type>()),
            DataType::UInt32 => ValueKind::U32(array.as_primitive::<UInt32Type>()),
            DataType::UInt64 => ValueKind::U64(array.as_primitive::<UInt64Type>()),
            DataType::Float32 => ValueKind::F32(array.as_primitive::<Float32Type>()),
            DataType::Float64 => ValueKind::F64(array.as_primitive::<Float64Type>()),
            DataType::Utf8 => ValueKind::Utf8(array.as_string::<i32>()),
            DataType::LargeUtf8 => ValueKind::LargeUtf8(array.as_string::<i64>()),
            DataType::Utf8View => ValueKind::Utf8View(array.as_string_view()),
            DataType::Binary => ValueKind::Binary(array.as_binary::<i32>()),
            DataType::LargeBinary => ValueKind::LargeBinary(array.as_binary::<i64>()),
            DataType::BinaryView => ValueKind::BinaryView(array.as_binary_view()),
            DataType::FixedSizeBinary(_) => ValueKind::FixedBinary(array.as_fixed_size_binary()),
            t if t.is_nested() => ValueKind::Json(json_values(array)?),
            _ => ValueKind::Text(ArrayFormatter::try_new(
                array.as_ref(),
                &FormatOptions::default(),
            )?),
        };
        Ok(Values {
            array: array.as_ref(),
            parent,
            kind,
        })
    }

    fn is_null(&self, row: usize) -> bool {
        self.array.is_null(row) || self.parent.is_some_and(|p| p.is_null(row))
    }

    /// The value as a cell's bytes (see the module docs).
    fn bytes(&self, row: usize) -> Vec<u8> {
        match &self.kind {
            ValueKind::Bool(a) => vec![u8::from(a.value(row))],
            ValueKind::I8(a) => a.value(row).to_be_bytes().to_vec(),
            ValueKind::I16(a) => a.value(row).to_be_bytes().to_vec(),
            ValueKind::I32(a) => a.value(row).to_be_bytes().to_vec(),
            ValueKind::I64(a) => a.value(row).to_be_bytes().to_vec(),
            ValueKind::U8(a) => a.value(row).to_be_bytes().to_vec(),
            ValueKind::U16(a) => a.value(row).to_be_bytes().to_vec(),
            ValueKind::U32(a) => a.value(row).to_be_bytes().to_vec(),
            ValueKind::U64(a) => a.value(row).to_be_bytes().to_vec(),
            ValueKind::F32(a) => a.value(row).to_be_bytes().to_vec(),
            ValueKind::F64(a) => a.value(row).to_be_bytes().to_vec(),
            ValueKind::Utf8(a) => a.value(row).as_bytes().to_vec(),
            ValueKind::LargeUtf8(a) => a.value(row).as_bytes().to_vec(),
            ValueKind::Utf8View(a) => a.value(row).as_bytes().to_vec(),
            ValueKind::Binary(a) => a.value(row).to_vec(),
            ValueKind::LargeBinary(a) => a.value(row).to_vec(),
            ValueKind::BinaryView(a) => a.value(row).to_vec(),
            ValueKind::FixedBinary(a) => a.value(row).to_vec(),
            ValueKind::Json(rows) => rows[row].clone().unwrap_or_default(),
            ValueKind::Text(f) => f.value(row).to_string().into_bytes(),
        }
    }

    /// Appends the value to a row key: strings and bytes as they are, the rest as text.
    fn append_key(&self, row: usize, key: &mut Vec<u8>) {
        use std::io::Write as _;
        // Writing to a Vec cannot fail.
        let _ = match &self.kind {
            ValueKind::I8(a) => write!(key, "{}", a.value(row)),
            ValueKind::I16(a) => write!(key, "{}", a.value(row)),
            ValueKind::I32(a) => write!(key, "{}", a.value(row)),
            ValueKind::I64(a) => write!(key, "{}", a.value(row)),
            ValueKind::U8(a) => write!(key, "{}", a.value(row)),
            ValueKind::U16(a) => write!(key, "{}", a.value(row)),
            ValueKind::U32(a) => write!(key, "{}", a.value(row)),
            ValueKind::U64(a) => write!(key, "{}", a.value(row)),
            ValueKind::F32(a) => write!(key, "{}", a.value(row)),
            ValueKind::F64(a) => write!(key, "{}", a.value(row)),
            ValueKind::Bool(a) => write!(key, "{}", a.value(row)),
            ValueKind::Text(f) => write!(key, "{}", f.value(row)),
            _ => {
                key.extend_from_slice(&self.bytes(row));
                Ok(())
            }
        };
    }

    /// The value as an aggregate's Int64 input; `None` when it does not fit.
    fn int(&self, row: usize) -> Option<i64> {
        match &self.kind {
            ValueKind::I8(a) => Some(a.value(row).into()),
            ValueKind::I16(a) => Some(a.value(row).into()),
            ValueKind::I32(a) => Some(a.value(row).into()),
            ValueKind::I64(a) => Some(a.value(row)),
            ValueKind::U8(a) => Some(a.value(row).into()),
            ValueKind::U16(a) => Some(a.value(row).into()),
            ValueKind::U32(a) => Some(a.value(row).into()),
            ValueKind::U64(a) => i64::try_from(a.value(row)).ok(),
            _ => None,
        }
    }
}

/// Each row's JSON text of a nested column (`None` for nulls).
fn json_values(array: &ArrayRef) -> Result<Vec<Option<Vec<u8>>>> {
    let schema = std::sync::Arc::new(Schema::new(vec![arrow_schema::Field::new(
        "v",
        array.data_type().clone(),
        true,
    )]));
    let batch = RecordBatch::try_new(schema, vec![array.clone()])?;
    let mut writer = arrow_json::LineDelimitedWriter::new(Vec::new());
    writer.write(&batch)?;
    writer.finish()?;
    let text = writer.into_inner();
    let mut out = Vec::with_capacity(array.len());
    // Each line is `{"v":VALUE}`, or `{}` for a null: the value's text is cut out as
    // Arrow wrote it, keeping its field order.
    for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        out.push(
            line.strip_prefix(br#"{"v":"#)
                .and_then(|rest| rest.strip_suffix(b"}"))
                .map(<[u8]>::to_vec),
        );
    }
    if out.len() != array.len() {
        return Err(Error::internal("Arrow's JSON writer skipped rows"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::{
        BinaryArray, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray, Float32Array,
        Float64Array, Int8Array, Int16Array, Int32Array, Int64Array, LargeStringArray, StringArray,
        StringViewArray, TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
        UInt8Array, UInt64Array,
    };
    use arrow_schema::{Field, Fields};

    use super::*;

    type Families = HashMap<String, std::result::Result<ValueType, String>>;

    fn families(list: &[(&str, ValueType)]) -> Families {
        list.iter().map(|(n, t)| (n.to_string(), Ok(*t))).collect()
    }

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns.into_iter().map(|(_, a)| a).collect(),
        )
        .unwrap()
    }

    fn mapping(key: RowKey, columns: ColumnMapping) -> RowMapping {
        RowMapping {
            row_key: key,
            columns,
            timestamp: CellTimestamp::WriteTime,
            delete_marker: None,
        }
    }

    fn encoder(batch: &RecordBatch, mapping: &RowMapping, fams: &Families) -> Result<RowEncoder> {
        RowEncoder::new(batch.schema().as_ref(), mapping, fams, "t")
    }

    fn encode_all(batch: &RecordBatch, mapping: &RowMapping, fams: &Families, now: i64) -> Vec<RowResult> {
        encoder(batch, mapping, fams)
            .unwrap()
            .encode(batch, 0..batch.num_rows(), now)
            .unwrap()
    }

    fn encoded(result: &RowResult) -> &EncodedRow {
        match result {
            RowResult::Encoded(e) => e,
            other => panic!("expected an entry, got {other:?}"),
        }
    }

    fn rejected(result: &RowResult) -> &str {
        match result {
            RowResult::Rejected(why) => why,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    /// (family, qualifier, timestamp, value) of each SetCell.
    fn set_cells(row: &EncodedRow) -> Vec<(String, String, i64, Vec<u8>)> {
        row.entry
            .mutations
            .iter()
            .map(|m| match &m.mutation {
                Some(Kind::SetCell(c)) => (
                    c.family_name.clone(),
                    String::from_utf8(c.column_qualifier.clone()).unwrap(),
                    c.timestamp_micros,
                    c.value.clone(),
                ),
                other => panic!("expected SetCell, got {other:?}"),
            })
            .collect()
    }

    fn value_of(row: &EncodedRow, qualifier: &str) -> Vec<u8> {
        set_cells(row)
            .into_iter()
            .find(|(_, q, _, _)| q == qualifier)
            .unwrap_or_else(|| panic!("no cell {qualifier}"))
            .3
    }

    #[test]
    fn every_value_kind_is_encoded_as_documented() {
        let mut list = ListBuilder::new(StringBuilder::new());
        list.values().append_value("a");
        list.values().append_value("b");
        list.append(true);
        let user = StructArray::new(
            Fields::from(vec![
                Field::new("name", DataType::Utf8, true),
                Field::new("n", DataType::Int32, true),
            ]),
            vec![
                Arc::new(StringArray::from(vec!["ann"])) as ArrayRef,
                Arc::new(Int32Array::from(vec![7])),
            ],
            None,
        );
        let b = batch(vec![
            ("id", Arc::new(StringArray::from(vec!["k1"]))),
            ("bool", Arc::new(BooleanArray::from(vec![true]))),
            ("i8", Arc::new(Int8Array::from(vec![-2]))),
            ("i16", Arc::new(Int16Array::from(vec![258]))),
            ("i32", Arc::new(Int32Array::from(vec![-1]))),
            ("i64", Arc::new(Int64Array::from(vec![1]))),
            ("u8", Arc::new(UInt8Array::from(vec![255]))),
            ("u64", Arc::new(UInt64Array::from(vec![u64::MAX]))),
            ("f32", Arc::new(Float32Array::from(vec![1.5]))),
            ("f64", Arc::new(Float64Array::from(vec![-0.25]))),
            ("utf8", Arc::new(StringArray::from(vec!["héllo"]))),
            ("large", Arc::new(LargeStringArray::from(vec!["big"]))),
            ("view", Arc::new(StringViewArray::from(vec!["viewed"]))),
            ("bin", Arc::new(BinaryArray::from(vec![&[0u8, 255][..]]))),
            (
                "fixed",
                Arc::new(FixedSizeBinaryArray::try_from_iter(vec![vec![1u8, 2, 3]].into_iter()).unwrap()),
            ),
            ("date", Arc::new(Date32Array::from(vec![19_844]))),
            (
                "ts",
                Arc::new(TimestampMicrosecondArray::from(vec![1_714_564_800_123_456])),
            ),
            (
                "dec",
                Arc::new(
                    Decimal128Array::from(vec![1250])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
            ),
            ("list", Arc::new(list.finish())),
            ("user", Arc::new(user)),
        ]);
        let rows = encode_all(
            &b,
            &mapping(RowKey::field("id"), ColumnMapping::family("cf")),
            &families(&[("cf", ValueType::Raw)]),
            5_000,
        );
        let row = encoded(&rows[0]);
        assert_eq!(row.entry.row_key, b"k1");
        assert!(row.idempotent);
        assert_eq!(row.mutations, 19, "every field but the key");
        assert_eq!(row.bytes, row.entry.encoded_len());
        assert!(
            set_cells(row)
                .iter()
                .all(|(f, _, ts, _)| f == "cf" && *ts == 5_000)
        );
        assert_eq!(value_of(row, "bool"), [1]);
        assert_eq!(value_of(row, "i8"), [0xfe]);
        assert_eq!(value_of(row, "i16"), [1, 2]);
        assert_eq!(value_of(row, "i32"), [0xff; 4]);
        assert_eq!(value_of(row, "i64"), [0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(value_of(row, "u8"), [255]);
        assert_eq!(value_of(row, "u64"), [0xff; 8]);
        assert_eq!(value_of(row, "f32"), 1.5f32.to_be_bytes());
        assert_eq!(value_of(row, "f64"), (-0.25f64).to_be_bytes());
        assert_eq!(value_of(row, "utf8"), "héllo".as_bytes());
        assert_eq!(value_of(row, "large"), b"big");
        assert_eq!(value_of(row, "view"), b"viewed");
        assert_eq!(value_of(row, "bin"), [0, 255]);
        assert_eq!(value_of(row, "fixed"), [1, 2, 3]);
        assert_eq!(value_of(row, "date"), b"2024-05-01");
        assert_eq!(value_of(row, "ts"), b"2024-05-01T12:00:00.123456");
        assert_eq!(value_of(row, "dec"), b"12.50");
        assert_eq!(value_of(row, "list"), br#"["a","b"]"#);
        assert_eq!(value_of(row, "user"), br#"{"name":"ann","n":7}"#);
    }

    #[test]
    fn nulls_write_nothing_and_an_all_null_row_is_empty() {
        let b = batch(vec![
            ("id", Arc::new(StringArray::from(vec!["a", "b"]))),
            ("x", Arc::new(Int64Array::from(vec![Some(1), None]))),
            ("y", Arc::new(StringArray::from(vec![None::<&str>, None]))),
        ]);
        let rows = encode_all(
            &b,
            &mapping(RowKey::field("id"), ColumnMapping::family("cf")),
            &families(&[("cf", ValueType::Raw)]),
            0,
        );
        assert_eq!(set_cells(encoded(&rows[0])).len(), 1);
        assert_eq!(rows[1], RowResult::Empty);
    }

    #[test]
    fn row_keys_join_fields_and_reject_null_empty_and_oversize_keys() {
        let huge = "x".repeat(5 << 20);
        let b = batch(vec![
            (
                "region",
                Arc::new(StringArray::from(vec![
                    Some("eu"),
                    None,
                    Some(""),
                    Some(huge.as_str()),
                    Some("us"),
                ])),
            ),
            ("id", Arc::new(Int64Array::from(vec![7, 8, 9, 10, 11]))),
            ("v", Arc::new(StringArray::from(vec!["v"; 5]))),
        ]);
        let fams = families(&[("cf", ValueType::Raw)]);
        let joined = mapping(RowKey::fields(["region", "id"], "#"), ColumnMapping::family("cf"));
        let rows = encode_all(&b, &joined, &fams, 0);
        assert_eq!(encoded(&rows[0]).entry.row_key, b"eu#7");
        assert_eq!(rejected(&rows[1]), "row key field \"region\" is null");
        assert_eq!(encoded(&rows[2]).entry.row_key, b"#9");
        assert!(rejected(&rows[3]).contains("the row key is 5242883 bytes; Bigtable allows at most 4096"));
        // Key fields are not written as cells.
        assert_eq!(set_cells(encoded(&rows[4])).len(), 1);

        let single = mapping(RowKey::field("region"), ColumnMapping::family("cf"));
        let rows = encode_all(&b, &single, &fams, 0);
        assert!(rejected(&rows[2]).contains("row key is empty"));
        assert!(rejected(&rows[3]).contains("at most 4096"));
    }

    #[test]
    fn timestamps_from_write_time_server_time_and_fields() {
        let b = batch(vec![
            ("id", Arc::new(StringArray::from(vec!["a", "b", "c"]))),
            (
                "ms",
                Arc::new(TimestampMillisecondArray::from(vec![Some(1_500), None, Some(-5)])),
            ),
            (
                "us",
                Arc::new(TimestampMicrosecondArray::from(vec![1_234_567, 2_000_999, 3])),
            ),
            (
                "ns",
                Arc::new(TimestampNanosecondArray::from(vec![9_999_999_999, 1, 2])),
            ),
            ("int", Arc::new(Int64Array::from(vec![7_000_123, 8_000, 9_000]))),
            ("v", Arc::new(StringArray::from(vec!["x", "y", "z"]))),
        ]);
        let fams = families(&[("cf", ValueType::Raw)]);
        let explicit = ColumnMapping::explicit([Column::new("v", "cf")]);
        let ts_of = |timestamp: CellTimestamp| {
            let m = RowMapping {
                timestamp,
                ..mapping(RowKey::field("id"), explicit.clone())
            };
            encode_all(&b, &m, &fams, 42_000)
        };
        let write_time = ts_of(CellTimestamp::WriteTime);
        assert_eq!(set_cells(encoded(&write_time[0]))[0].2, 42_000);
        assert!(encoded(&write_time[0]).idempotent);

        let server = ts_of(CellTimestamp::ServerTime);
        assert_eq!(set_cells(encoded(&server[0]))[0].2, -1);
        assert!(
            !encoded(&server[0]).idempotent,
            "server time makes a new version per send"
        );

        let ms = ts_of(CellTimestamp::Field("ms".into()));
        assert_eq!(set_cells(encoded(&ms[0]))[0].2, 1_500_000);
        assert_eq!(rejected(&ms[1]), "timestamp field \"ms\" is null");
        assert!(rejected(&ms[2]).contains("before 1970"));
        // Floored to milliseconds, Bigtable's granularity.
        let us = ts_of(CellTimestamp::Field("us".into()));
        assert_eq!(set_cells(encoded(&us[0]))[0].2, 1_234_000);
        assert_eq!(set_cells(encoded(&us[1]))[0].2, 2_000_000);
        let ns = ts_of(CellTimestamp::Field("ns".into()));
        assert_eq!(set_cells(encoded(&ns[0]))[0].2, 9_999_000);
        let int = ts_of(CellTimestamp::Field("int".into()));
        assert_eq!(set_cells(encoded(&int[0]))[0].2, 7_000_000);

        let err = encoder(
            &b,
            &RowMapping {
                timestamp: CellTimestamp::Field("v".into()),
                ..mapping(RowKey::field("id"), explicit.clone())
            },
            &fams,
        )
        .unwrap_err();
        assert!(err.to_string().contains("timestamp field \"v\" is Utf8"), "{err}");
    }

    #[test]
    fn aggregate_families_get_add_to_cell_with_int64_inputs() {
        let b = batch(vec![
            ("id", Arc::new(StringArray::from(vec!["a", "b"]))),
            ("clicks", Arc::new(Int32Array::from(vec![5, -3]))),
            ("big", Arc::new(UInt64Array::from(vec![Some(1), Some(u64::MAX)]))),
            ("name", Arc::new(StringArray::from(vec!["x", "y"]))),
        ]);
        let fams = families(&[("cf", ValueType::Raw), ("sums", ValueType::Sum)]);
        let m = mapping(
            RowKey::field("id"),
            ColumnMapping::explicit([
                Column::new("clicks", "sums").with_qualifier("n"),
                Column::new("big", "sums"),
                Column::new("name", "cf"),
            ]),
        );
        let rows = encode_all(&b, &m, &fams, 77_000);
        let row = encoded(&rows[0]);
        assert!(!row.idempotent, "AddToCell counts twice when sent twice");
        match &row.entry.mutations[0].mutation {
            Some(Kind::AddToCell(add)) => {
                assert_eq!(add.family_name, "sums");
                assert_eq!(
                    add.column_qualifier.as_ref().unwrap().kind,
                    Some(value::Kind::RawValue(b"n".to_vec()))
                );
                // One aggregate cell per column, not one per write time.
                assert_eq!(
                    add.timestamp.as_ref().unwrap().kind,
                    Some(value::Kind::RawTimestampMicros(0))
                );
                assert_eq!(add.input.as_ref().unwrap().kind, Some(value::Kind::IntValue(5)));
            }
            other => panic!("expected AddToCell, got {other:?}"),
        }
        assert!(matches!(row.entry.mutations[2].mutation, Some(Kind::SetCell(_))));
        assert!(rejected(&rows[1]).contains("field \"big\": the value does not fit in an Int64"));

        let err = encoder(
            &b,
            &mapping(
                RowKey::field("id"),
                ColumnMapping::explicit([Column::new("name", "sums")]),
            ),
            &fams,
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(err.context_value("family"), Some("sums"));
        assert!(
            err.to_string()
                .contains("field \"name\" is Utf8, but column family \"sums\" is an aggregate (sum)"),
            "{err}"
        );
    }

    #[test]
    fn deletes_follow_the_marker() {
        let b = batch(vec![
            ("id", Arc::new(StringArray::from(vec!["a", "b", "c", "d", "e"]))),
            (
                "op",
                Arc::new(StringArray::from(vec![
                    None,
                    Some("row"),
                    Some("families"),
                    Some("cells"),
                    Some("drop"),
                ])),
            ),
            (
                "ts",
                Arc::new(Int64Array::from(vec![1_000, 2_000, 3_000, 4_000, 5_000])),
            ),
            (
                "x",
                Arc::new(StringArray::from(vec![
                    Some("1"),
                    Some("2"),
                    Some("3"),
                    Some("4"),
                    Some("5"),
                ])),
            ),
            (
                "y",
                Arc::new(StringArray::from(vec![Some("1"), None, None, None, None])),
            ),
        ]);
        let fams = families(&[("f", ValueType::Raw), ("g", ValueType::Raw)]);
        let columns = ColumnMapping::explicit([Column::new("x", "f"), Column::new("y", "g")]);
        let m = RowMapping {
            delete_marker: Some("op".into()),
            timestamp: CellTimestamp::Field("ts".into()),
            ..mapping(RowKey::field("id"), columns.clone())
        };
        let rows = encode_all(&b, &m, &fams, 0);
        assert_eq!(set_cells(encoded(&rows[0])).len(), 2);
        assert_eq!(
            encoded(&rows[1]).entry.mutations,
            vec![mutation(Kind::DeleteFromRow(DeleteFromRow {}))]
        );
        assert_eq!(
            encoded(&rows[2]).entry.mutations,
            vec![mutation(Kind::DeleteFromFamily(DeleteFromFamily {
                family_name: "f".into()
            }))]
        );
        assert_eq!(
            encoded(&rows[3]).entry.mutations,
            vec![mutation(Kind::DeleteFromColumn(DeleteFromColumn {
                family_name: "f".into(),
                column_qualifier: b"x".to_vec(),
                time_range: Some(TimestampRange {
                    start_timestamp_micros: 4_000,
                    end_timestamp_micros: 5_000
                }),
            }))]
        );
        assert!(encoded(&rows[3]).idempotent);
        assert!(rejected(&rows[4]).contains("delete marker field \"op\" is \"drop\""));

        // Without timestamps from a field, a cell delete takes every version.
        let m = RowMapping {
            delete_marker: Some("op".into()),
            ..mapping(RowKey::field("id"), columns)
        };
        let rows = encode_all(&b, &m, &fams, 0);
        match &encoded(&rows[3]).entry.mutations[0].mutation {
            Some(Kind::DeleteFromColumn(d)) => assert_eq!(d.time_range, None),
            other => panic!("{other:?}"),
        }

        let flags = batch(vec![
            ("id", Arc::new(StringArray::from(vec!["a", "b"]))),
            ("deleted", Arc::new(BooleanArray::from(vec![true, false]))),
            ("x", Arc::new(StringArray::from(vec!["1", "2"]))),
        ]);
        let m = RowMapping {
            delete_marker: Some("deleted".into()),
            ..mapping(RowKey::field("id"), ColumnMapping::family("f"))
        };
        let rows = encode_all(&flags, &m, &fams, 0);
        assert!(matches!(
            encoded(&rows[0]).entry.mutations[0].mutation,
            Some(Kind::DeleteFromRow(_))
        ));
        assert_eq!(set_cells(encoded(&rows[1])).len(), 1, "the marker is not a cell");
    }

    #[test]
    fn struct_families_map_each_struct_to_a_family() {
        let profile = StructArray::new(
            Fields::from(vec![
                Field::new("name", DataType::Utf8, true),
                Field::new("age", DataType::Int32, true),
            ]),
            vec![
                Arc::new(StringArray::from(vec![Some("ann"), Some("bob")])) as ArrayRef,
                Arc::new(Int32Array::from(vec![Some(30), None])),
            ],
            Some(vec![true, false].into()),
        );
        let b = batch(vec![
            ("id", Arc::new(StringArray::from(vec!["a", "b"]))),
            ("profile", Arc::new(profile)),
        ]);
        let fams = families(&[("profile", ValueType::Raw)]);
        let m = mapping(RowKey::field("id"), ColumnMapping::StructFamilies);
        let rows = encode_all(&b, &m, &fams, 0);
        let cells = set_cells(encoded(&rows[0]));
        assert_eq!(
            cells
                .iter()
                .map(|(f, q, _, v)| (f.as_str(), q.as_str(), v.clone()))
                .collect::<Vec<_>>(),
            vec![
                ("profile", "name", b"ann".to_vec()),
                ("profile", "age", 30i32.to_be_bytes().to_vec())
            ]
        );
        // A null struct makes its children null, whatever they hold.
        assert_eq!(rows[1], RowResult::Empty);

        let flat = batch(vec![
            ("id", Arc::new(StringArray::from(vec!["a"]))),
            ("loose", Arc::new(Int32Array::from(vec![1]))),
        ]);
        let err = encoder(&flat, &m, &fams).unwrap_err();
        assert!(
            err.to_string()
                .contains("field \"loose\" is Int32; with struct_families"),
            "{err}"
        );
    }

    #[test]
    fn schema_problems_name_the_field() {
        let b = batch(vec![
            ("id", Arc::new(StringArray::from(vec!["a"]))),
            ("v", Arc::new(StringArray::from(vec!["x"]))),
        ]);
        let fams = families(&[("cf", ValueType::Raw)]);
        let err = encoder(
            &b,
            &mapping(RowKey::field("nope"), ColumnMapping::family("cf")),
            &fams,
        )
        .unwrap_err();
        assert_eq!(err.context_value("column"), Some("nope"));
        assert!(
            err.to_string()
                .contains("row key field \"nope\" is not in the rows' schema"),
            "{err}"
        );

        let err = encoder(
            &b,
            &mapping(RowKey::field("id"), ColumnMapping::family("other")),
            &fams,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("field \"v\" goes to column family \"other\", which table t does not have"),
            "{err}"
        );
        let unknown: Families = [("cf".to_string(), Err("a string type".to_string()))].into();
        let err = encoder(
            &b,
            &mapping(RowKey::field("id"), ColumnMapping::family("cf")),
            &unknown,
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);

        let err = encoder(
            &b,
            &RowMapping {
                delete_marker: Some("missing".into()),
                ..mapping(RowKey::field("id"), ColumnMapping::family("cf"))
            },
            &fams,
        )
        .unwrap_err();
        assert_eq!(err.context_value("column"), Some("missing"));
    }

    #[test]
    fn oversize_cells_are_rejected_with_the_field_named() {
        let big = vec![0u8; limits::MAX_CELL_BYTES + 1];
        let b = batch(vec![
            ("id", Arc::new(StringArray::from(vec!["a"]))),
            ("blob", Arc::new(BinaryArray::from(vec![big.as_slice()]))),
        ]);
        let rows = encode_all(
            &b,
            &mapping(RowKey::field("id"), ColumnMapping::family("cf")),
            &families(&[("cf", ValueType::Raw)]),
            0,
        );
        assert!(rejected(&rows[0]).contains("field \"blob\": the value is 104857601 bytes"));
    }

    #[test]
    fn marker_names_are_forgiving() {
        assert_eq!(RowAction::parse("DELETE_ROW"), Some(RowAction::DeleteRow));
        assert_eq!(
            RowAction::parse("delete-families"),
            Some(RowAction::DeleteFamilies)
        );
        assert_eq!(RowAction::parse("Cells"), Some(RowAction::DeleteCells));
        assert_eq!(RowAction::parse(""), Some(RowAction::Write));
        assert_eq!(RowAction::parse("nuke"), None);
    }

    #[test]
    fn serde_forms() {
        assert_eq!(
            serde_json::from_str::<RowKey>(r#""id""#).unwrap(),
            RowKey::field("id")
        );
        assert_eq!(
            serde_json::from_str::<RowKey>(r#"["a","b"]"#).unwrap(),
            RowKey::fields(["a", "b"], "#")
        );
        let joined = RowKey::fields(["a", "b"], "/");
        let json = serde_json::to_string(&joined).unwrap();
        assert_eq!(json, r#"{"fields":["a","b"],"separator":"/"}"#);
        assert_eq!(serde_json::from_str::<RowKey>(&json).unwrap(), joined);
        assert_eq!(serde_json::to_string(&RowKey::field("id")).unwrap(), r#""id""#);

        for (text, expected) in [
            (r#"{"family":"cf"}"#, ColumnMapping::family("cf")),
            (r#""struct_families""#, ColumnMapping::StructFamilies),
            (
                r#"{"explicit":[{"field":"a","family":"f","qualifier":"q"}]}"#,
                ColumnMapping::explicit([Column::new("a", "f").with_qualifier("q")]),
            ),
        ] {
            let parsed: ColumnMapping = serde_json::from_str(text).unwrap();
            assert_eq!(parsed, expected);
            assert_eq!(serde_json::to_string(&parsed).unwrap(), text);
        }
        for (text, expected) in [
            (r#""write_time""#, CellTimestamp::WriteTime),
            (r#""server_time""#, CellTimestamp::ServerTime),
            (r#"{"field":"ts"}"#, CellTimestamp::Field("ts".into())),
        ] {
            assert_eq!(serde_json::from_str::<CellTimestamp>(text).unwrap(), expected);
            assert_eq!(serde_json::to_string(&expected).unwrap(), text);
        }
    }
}
