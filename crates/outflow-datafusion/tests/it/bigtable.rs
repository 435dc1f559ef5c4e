//! A DataFusion SQL insert through the Bigtable sink into Google's emulator (started by
//! `scripts/test.sh`), read back with Google's Python client.

use std::sync::Arc;

use datafusion::arrow::array::{Array, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::prelude::SessionContext;
use outflow_bigtable::{
    BigtableSink, BigtableSinkOptions, ColumnFamily, ColumnMapping, RowKey, TableCreateOptions,
};
use outflow_core::Sink;
use outflow_datafusion::SinkTable;
use outflow_testkit::bigtable::{emulator_host, python_read};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_insert_writes_rows_through_the_bigtable_sink() {
    let host = emulator_host();
    let table = outflow_testkit::unique_name("df");
    let schema = Arc::new(Schema::new(vec![
        Field::new("user_id", DataType::Utf8, false),
        Field::new("city", DataType::Utf8, true),
    ]));
    let families = TableCreateOptions::builder()
        .column_family(ColumnFamily::new("cf"))
        .build()
        .unwrap();
    let (endpoint, name) = (host.clone(), table.clone());
    let sink_table = SinkTable::new(schema, move || {
        let options = BigtableSinkOptions::builder()
            .project("outflow-it")
            .instance("emulated")
            .endpoint(endpoint.clone())
            .table(name.clone())
            .table_options(families.clone())
            .row_key(RowKey::field("user_id"))
            .columns(ColumnMapping::family("cf"))
            .build();
        async move { Ok(Box::new(BigtableSink::connect(options?).await?) as Box<dyn Sink>) }
    });
    let ctx = SessionContext::new();
    ctx.register_table("users", Arc::new(sink_table.clone())).unwrap();

    let batches = ctx
        .sql(
            "INSERT INTO users SELECT 'user' || CAST(value + 10000 AS VARCHAR), \
             CASE WHEN value % 2 = 0 THEN 'Lisbon' ELSE 'Porto' END \
             FROM generate_series(1, 3000)",
        )
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let count = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap();
    assert_eq!(count.value(0), 3000);
    let result = sink_table.last_result().unwrap();
    assert_eq!(result.rows_written(), 3000);
    assert!(result.failed.is_empty(), "{:?}", result.failed);

    let read = python_read(&host, "outflow-it", "emulated", &table);
    let rows = read["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3000);
    let row = rows.iter().find(|r| r["key"] == "user10002").unwrap();
    // "Lisbon" as hex, the raw bytes of a string cell.
    assert_eq!(row["cells"]["cf"]["city"][0]["value_hex"], "4c6973626f6e");
}
