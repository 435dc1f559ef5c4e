//! A DataFusion SQL insert through the BigQuery sink into the local-bigquery emulator
//! (started by `scripts/test.sh`), read back with Google's Python client.

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::MemTable;
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::prelude::SessionContext;
use outflow_bigquery::{
    BigQuerySink, BigQuerySinkOptions, ConnectionOptions, FieldType, TableField, TableSchema,
};
use outflow_core::{PrepareDestination, Sink};
use outflow_datafusion::{SinkSpec, SinkTable};
use outflow_testkit::bigquery::BigQueryEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_insert_writes_rows_through_the_bigquery_sink() {
    let env = BigQueryEnv::from_env();
    let dataset = outflow_testkit::unique_name("df");
    env.create_dataset(&dataset);
    let options = events_options(&env, &dataset);
    let table = SinkTable::new(events_schema(), move || {
        let options = options.clone();
        async move { Ok(Box::new(BigQuerySink::connect(options).await?) as Box<dyn Sink>) }
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

/// Options writing `dataset.events` (id required, city) on the emulator, exactly once.
fn events_options(env: &BigQueryEnv, dataset: &str) -> BigQuerySinkOptions {
    BigQuerySinkOptions::builder()
        .project(&env.project)
        .dataset(dataset)
        .table("events")
        .connection(ConnectionOptions::emulator(&env.rest, &env.grpc))
        .schema(TableSchema::new(vec![
            TableField::new("id", FieldType::Int64).required(),
            TableField::new("city", FieldType::String),
        ]))
        .build()
        .unwrap()
}

/// The Arrow schema of `events`.
fn events_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("city", DataType::Utf8, true),
    ]))
}

/// Creates `dataset.events` before a statement's writers meet it: three writers creating
/// one table at once race in the emulator, whose DuckLake catalog can show one of them the
/// table before its columns (the service creates a table atomically). What these tests are
/// about is the commit, not that race.
async fn create_events(options: &BigQuerySinkOptions) {
    let sink = BigQuerySink::connect(options.clone()).await.unwrap();
    sink.preparer().prepare("events", &events_schema()).await.unwrap();
}

/// A source of `partitions` partitions of `per_partition` ids each (from 1), in batches of
/// 100 rows, so every writer appends many requests.
fn source(partitions: i64, per_partition: i64) -> MemTable {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let parts = (0..partitions)
        .map(|p| {
            (0..per_partition / 100)
                .map(|b| {
                    let first = p * per_partition + b * 100 + 1;
                    let ids = Int64Array::from_iter_values(first..first + 100);
                    RecordBatch::try_new(schema.clone(), vec![Arc::new(ids)]).unwrap()
                })
                .collect()
        })
        .collect();
    MemTable::try_new(schema, parts).unwrap()
}

/// Sorted ids of the rows Google's client reads from `dataset.events`.
fn read_ids(env: &BigQueryEnv, dataset: &str) -> Vec<i64> {
    env.sorted_ids(dataset, "events")
}

/// A fresh dataset with the events table, a spec-built table over it, and a session where
/// `source` has three partitions of 1,000 ids each.
async fn three_writers_into_events(prefix: &str) -> (BigQueryEnv, String, SessionContext, SinkTable) {
    let env = BigQueryEnv::from_env();
    let dataset = outflow_testkit::unique_name(prefix);
    env.create_dataset(&dataset);
    let options = events_options(&env, &dataset);
    create_events(&options).await;
    let table = SinkTable::from_spec(events_schema(), SinkSpec::BigQuery(Box::new(options)));
    let ctx = SessionContext::new();
    ctx.register_table("source", Arc::new(source(3, 1000))).unwrap();
    ctx.register_table("events", Arc::new(table.clone())).unwrap();
    (env, dataset, ctx, table)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_writers_commit_their_pending_streams_together() {
    let (env, dataset, ctx, table) = three_writers_into_events("dfpar").await;

    let df = ctx
        .sql("INSERT INTO events SELECT id, 'Porto' FROM source")
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
    let result = table.last_result().unwrap();
    assert_eq!(
        (column("count"), column("failed")),
        (3000, 0),
        "{:?}",
        result.failed.first()
    );
    let stats = &result.destinations[&format!("{}.{dataset}.events", env.project)];
    assert_eq!(stats.rows, 3000);
    assert_eq!(
        read_ids(&env, &dataset),
        (1..=3000).collect::<Vec<i64>>(),
        "each row once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_failing_midway_commits_no_writer_s_rows() {
    let (env, dataset, ctx, _) = three_writers_into_events("dffail").await;

    // The middle writer fails on its last batch, when the others have written theirs (to
    // pending streams nobody commits).
    let err = ctx
        .sql("INSERT INTO events SELECT id, CAST(1000 / (id - 2000) AS VARCHAR) FROM source")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(err.to_string().to_lowercase().contains("divide by zero"), "{err}");
    assert_eq!(read_ids(&env, &dataset), Vec::<i64>::new(), "nothing committed");

    // The same statement without the failure writes every row once.
    ctx.sql("INSERT INTO events SELECT id, 'Faro' FROM source")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(read_ids(&env, &dataset), (1..=3000).collect::<Vec<i64>>());
}
