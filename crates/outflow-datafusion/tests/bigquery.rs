//! A DataFusion SQL insert through the BigQuery sink into the local-bigquery emulator
//! (started by `scripts/test.sh`), read back with Google's Python client.

use std::sync::Arc;

use datafusion::arrow::array::{Array, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::prelude::SessionContext;
use outflow_bigquery::{
    BigQuerySink, BigQuerySinkOptions, ConnectionOptions, FieldType, TableField, TableSchema,
};
use outflow_core::Sink;
use outflow_datafusion::{SinkSpec, SinkTable};
use outflow_testkit::bigquery::BigQueryEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_insert_writes_rows_through_the_bigquery_sink() {
    let env = BigQueryEnv::from_env();
    let dataset = outflow_testkit::unique_name("df");
    env.create_dataset(&dataset);
    let options = BigQuerySinkOptions::builder()
        .project(&env.project)
        .dataset(&dataset)
        .table("events")
        .connection(ConnectionOptions::emulator(&env.rest, &env.grpc))
        .schema(TableSchema::new(vec![
            TableField::new("id", FieldType::Int64).required(),
            TableField::new("city", FieldType::String),
        ]))
        .build()
        .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("city", DataType::Utf8, true),
    ]));
    let table = SinkTable::new(schema, move || {
        let options = options.clone();
        async move { Ok(Box::new(BigQuerySink::builder(options).build().await?) as Box<dyn Sink>) }
    });
    let ctx = SessionContext::new();
    ctx.register_table("events", Arc::new(table.clone())).unwrap();

    let batches = ctx
        .sql(
            "INSERT INTO events SELECT value, CASE WHEN value % 2 = 0 THEN 'Lisbon' ELSE NULL END \
             FROM generate_series(1, 500)",
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
    assert_eq!(count.value(0), 500);
    let result = table.last_result().unwrap();
    assert!(result.failed.is_empty(), "{:?}", result.failed);

    let read = env.read_table(&dataset, "events");
    let rows = read["rows"].as_array().unwrap();
    let mut ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=500).collect::<Vec<i64>>());
    let row = rows.iter().find(|r| r["id"] == 4).unwrap();
    assert_eq!(row["city"], "Lisbon");
    assert!(rows.iter().find(|r| r["id"] == 3).unwrap()["city"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_writers_each_append_through_their_own_bigquery_sink() {
    let env = BigQueryEnv::from_env();
    let dataset = outflow_testkit::unique_name("dfpar");
    env.create_dataset(&dataset);
    let options = BigQuerySinkOptions::builder()
        .project(&env.project)
        .dataset(&dataset)
        .table("events")
        .connection(ConnectionOptions::emulator(&env.rest, &env.grpc))
        .schema(TableSchema::new(vec![
            TableField::new("id", FieldType::Int64).required(),
            TableField::new("city", FieldType::String),
        ]))
        .build()
        .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("city", DataType::Utf8, true),
    ]));
    let table = SinkTable::from_spec(schema, SinkSpec::BigQuery(Box::new(options)));
    let ctx =
        SessionContext::new_with_config(datafusion::prelude::SessionConfig::new().with_target_partitions(3));
    ctx.register_table("events", Arc::new(table.clone())).unwrap();

    let df = ctx
        .sql("INSERT INTO events SELECT value, 'Porto' FROM generate_series(1, 3000)")
        .await
        .unwrap();
    let plan = df.clone().create_physical_plan().await.unwrap();
    assert_eq!(
        plan.children()[0].children()[0]
            .output_partitioning()
            .partition_count(),
        3,
        "three writers"
    );
    let batches = df.collect().await.unwrap();
    let column = |name: &str| {
        batches[0]
            .column_by_name(name)
            .unwrap()
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap()
            .value(0)
    };
    assert_eq!((column("count"), column("failed")), (3000, 0));
    assert_eq!(table.last_result().unwrap().rows_written(), 3000);

    let read = env.read_table(&dataset, "events");
    let rows = read["rows"].as_array().unwrap();
    let mut ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=3000).collect::<Vec<i64>>(), "each row once");
}
