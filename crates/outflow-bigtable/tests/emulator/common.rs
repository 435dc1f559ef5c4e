//! Shared helpers: connections, table names, batches and the independent reader.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema};
use outflow_bigtable::{
    BigtableClient, BigtableConnection, BigtableSink, BigtableSinkOptions, BigtableSinkOptionsBuilder,
};
use outflow_testkit::bigtable::{emulator_host, python_read};
use serde_json::Value;

pub const PROJECT: &str = "outflow-it";
pub const INSTANCE: &str = "emulated";

/// The shared emulator's address; panics (failing the test) when it is not running.
pub fn host() -> String {
    emulator_host()
}

/// A fresh table id.
pub fn table_name(prefix: &str) -> String {
    outflow_testkit::unique_name(prefix)
}

/// A client of the emulator at `host`.
pub async fn client_at(host: &str) -> BigtableClient {
    BigtableConnection::new(PROJECT, INSTANCE)
        .with_endpoint(host)
        .connect()
        .await
        .expect("connect to the emulator")
}

/// A client of the shared emulator.
pub async fn client() -> BigtableClient {
    client_at(&host()).await
}

/// Sink options for `table` on the emulator at `host`.
pub fn sink_at(host: &str, table: &str) -> BigtableSinkOptionsBuilder {
    BigtableSinkOptions::builder()
        .project(PROJECT)
        .instance(INSTANCE)
        .endpoint(host)
        .table(table)
}

/// Sink options for `table` on the shared emulator.
pub fn sink(table: &str) -> BigtableSinkOptionsBuilder {
    sink_at(&host(), table)
}

/// The sink `options` describe (valid options: a test of invalid ones calls `build()`).
pub async fn open(options: BigtableSinkOptionsBuilder) -> BigtableSink {
    let options = options.build().expect("valid sink options");
    BigtableSink::connect(options).await.expect("a sink")
}

/// A batch of named columns (all nullable).
pub fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array)| Field::new(*name, array.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
    .expect("a valid batch")
}

/// The table as Google's Python client reads it.
pub fn python(table: &str) -> Value {
    python_read(&host(), PROJECT, INSTANCE, table)
}

/// The same through the emulator at `host`.
pub fn python_at(host: &str, table: &str) -> Value {
    python_read(host, PROJECT, INSTANCE, table)
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The Python reader's row with key `key`.
pub fn py_row<'a>(read: &'a Value, key: &str) -> &'a Value {
    read["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("the Python reader has no row {key:?}: {read}"))
}

/// The Python reader's cells of one column: (timestamp, value hex), newest first.
pub fn py_cells(read: &Value, key: &str, family: &str, qualifier: &str) -> Vec<(i64, String)> {
    py_row(read, key)["cells"][family][qualifier]
        .as_array()
        .map(|cells| {
            cells
                .iter()
                .map(|c| {
                    (
                        c["ts"].as_i64().unwrap(),
                        c["value_hex"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The row keys the Python reader sees.
pub fn py_keys(read: &Value) -> Vec<String> {
    read["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["key"].as_str().unwrap_or("<binary>").to_string())
        .collect()
}
