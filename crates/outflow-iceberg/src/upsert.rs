//! Upsert mode: change data (inserts, upserts and deletes by key) applied to a table, after
//! Flink's upsert writes.
//!
//! The sink holds a flush's changes per table and reduces them together
//! ([`outflow_core::changes::reduce_batches`]): the last change to a key wins. What is left
//! is written as one commit: data files with each key's surviving row, and equality delete
//! files with every key an upsert or a delete touched. An equality delete applies to rows
//! of earlier commits only (lower sequence numbers), so the rows written beside it stay,
//! and since each key is written at most once per commit no position deletes are needed.
//!
//! The table must be format v2 and unpartitioned (a partitioned table would need its
//! deletes in every partition a key's rows may be in); the key columns must be top-level,
//! required primitive columns other than floating point, as Iceberg's identifier fields.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef as ArrowSchemaRef;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{FormatVersion, PrimitiveType, Schema as IcebergSchema, SchemaRef, Type};
use iceberg::table::Table;
use outflow_core::changes::ChangeConfig;
use outflow_core::schema::{InputSchema, Schema, conform_batch_mapped};
use outflow_core::{Error, ErrorKind, Result};

use crate::client::IcebergResultExt;
use crate::schema::table_name;

/// A table's key in upsert mode: its columns' names and their Iceberg schema.
#[derive(Clone, Debug)]
pub(crate) struct UpsertKey {
    /// The key columns, in order.
    pub(crate) columns: Vec<String>,
    /// The key columns as an Iceberg schema with the table's field ids: the equality
    /// delete files' schema.
    pub(crate) schema: SchemaRef,
    arrow: ArrowSchemaRef,
}

impl UpsertKey {
    /// The key `changes` names, or `table`'s identifier fields when it names none, checked
    /// against the table (see the module docs); the error names the table and the column.
    pub(crate) fn of(table: &Table, changes: &ChangeConfig) -> Result<UpsertKey> {
        let name = table_name(table.identifier());
        let metadata = table.metadata();
        if metadata.format_version() != FormatVersion::V2 {
            return Err(refusal(
                &name,
                format!(
                    "the table is format {}; equality deletes need format v2",
                    metadata.format_version()
                ),
            ));
        }
        let partitioned = !metadata.default_partition_spec().is_unpartitioned();
        UpsertKey::in_schema(&name, metadata.current_schema(), partitioned, changes)
    }

    /// The same checks on the schema and partitioning of table `name`, which may not exist
    /// yet (what `outflow plan` checks for a table it would create).
    pub(crate) fn in_schema(
        name: &str,
        schema: &IcebergSchema,
        partitioned: bool,
        changes: &ChangeConfig,
    ) -> Result<UpsertKey> {
        let refuse = |why: String| Err(refusal(name, why));
        if partitioned {
            return refuse("the table is partitioned; upsert mode writes unpartitioned tables".into());
        }
        let columns = if changes.key.is_empty() {
            let mut ids: Vec<i32> = schema.identifier_field_ids().collect();
            ids.sort_unstable();
            if ids.is_empty() {
                return refuse("changes.key names no column and the table has no identifier fields".into());
            }
            ids.iter()
                .map(|id| schema.name_by_field_id(*id).unwrap_or_default().to_string())
                .collect()
        } else {
            changes.key.clone()
        };
        let mut fields = Vec::new();
        for column in &columns {
            let Some(field) = schema.as_struct().fields().iter().find(|f| f.name == *column) else {
                return refuse(format!(
                    "the key column {column:?} is not a top-level column of the table"
                ));
            };
            match field.field_type.as_ref() {
                Type::Primitive(PrimitiveType::Float | PrimitiveType::Double) => {
                    return refuse(format!("the key column {column:?} is floating point"));
                }
                Type::Primitive(_) => {}
                other => return refuse(format!("the key column {column:?} is {other}, not a primitive")),
            }
            if !field.required {
                return refuse(format!(
                    "the key column {column:?} is optional; key columns must be required"
                ));
            }
            fields.push(field.clone());
        }
        let key_schema = IcebergSchema::builder()
            .with_fields(fields)
            .build()
            .doing("the key columns' schema")?;
        let arrow = Arc::new(schema_to_arrow_schema(&key_schema).doing("the key columns' schema")?);
        Ok(UpsertKey {
            columns,
            schema: Arc::new(key_schema),
            arrow,
        })
    }

    /// `keys` (the key columns of changed rows, as the input holds them) in the table's
    /// types, with field ids: what an equality delete file holds.
    pub(crate) fn conform(&self, keys: &RecordBatch) -> Result<RecordBatch> {
        conform_batch_mapped(keys, &self.arrow, None)
    }
}

/// Why upsert mode cannot write table `name`.
fn refusal(name: &str, why: String) -> Error {
    Error::new(
        ErrorKind::SchemaIncompatible,
        format!("upsert into {name}: {why}"),
    )
    .with_context("table", name.to_string())
}

/// What a table is planned and created from for input of `schema`, before its rows are
/// seen. In upsert mode that is without the operation column, which is read and never
/// written, and with no nulls in the `key` columns, since a change with a null key is a
/// failed record and never reaches the table.
pub(crate) fn planned_input(
    schema: &ArrowSchemaRef,
    changes: Option<&ChangeConfig>,
    key: &[String],
) -> Result<InputSchema> {
    let Some(changes) = changes else {
        return Ok(InputSchema::new(Schema::from_arrow(schema)?));
    };
    let schema = changes.written_schema(schema);
    let mut input = InputSchema::new(Schema::from_arrow(&schema)?);
    for column in key {
        input = input.with_null_count(column.clone(), 0);
    }
    Ok(input)
}

/// `schema` with the key columns required, for a table created in upsert mode; the names
/// of the columns that become its identifier fields (none outside upsert mode, or when the
/// key is the table's own).
pub(crate) fn keyed_schema(mut schema: Schema, changes: Option<&ChangeConfig>) -> (Schema, Vec<String>) {
    let Some(changes) = changes else {
        return (schema, Vec::new());
    };
    for field in &mut schema.fields {
        if changes.key.contains(&field.name) {
            field.required = true;
        }
    }
    (schema, changes.key.clone())
}
