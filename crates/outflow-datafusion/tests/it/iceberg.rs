//! DataFusion SQL inserts into an Iceberg table through the Outflow sink, on the SQLite
//! catalog, read back by PyIceberg and Java Iceberg.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{Array, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::prelude::SessionContext;
use outflow_core::{IncompatibleSchemaHandling, SchemaEvolutionConfig, SchemaEvolutionOption, Sink};
use outflow_datafusion::SinkTable;
use outflow_iceberg::{CatalogConfig, IcebergSink, IcebergSinkOptions};
use outflow_testkit::iceberg::{TestCatalog, rows};
use serde_json::Value;

/// `id` (required), `city`, `fare`: what the statements below produce.
fn trips_schema(id_required: bool) -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, !id_required),
        Field::new("city", DataType::Utf8, true),
        Field::new("fare", DataType::Float64, true),
    ]))
}

fn iceberg_table(
    dir: &Path,
    table: &str,
    schema: Arc<Schema>,
    evolution: SchemaEvolutionConfig,
) -> SinkTable {
    let options = IcebergSinkOptions::builder()
        .catalog(CatalogConfig::sqlite_in(dir))
        .table(table)
        .schema_evolution(evolution)
        .build()
        .unwrap();
    SinkTable::new(schema, move || {
        let options = options.clone();
        async move { Ok(Box::new(IcebergSink::connect(options).await?) as Box<dyn Sink>) }
    })
}

/// Runs `sql` and returns the count row DataFusion gives for an INSERT.
async fn insert(ctx: &SessionContext, sql: &str) -> datafusion::error::Result<u64> {
    let batches = ctx.sql(sql).await?.collect().await?;
    let counts = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .expect("an INSERT returns a count");
    Ok(counts.value(0))
}

fn ids(read: &Value) -> Vec<i64> {
    let mut ids: Vec<i64> = rows(read).iter().map(|r| r["id"].as_i64().unwrap()).collect();
    ids.sort_unstable();
    ids
}

const TRIPS: &str = "SELECT value AS id, \
     CASE value % 3 WHEN 0 THEN 'Lisbon' WHEN 1 THEN 'Porto' ELSE NULL END AS city, \
     CAST(value AS DOUBLE) / 4 AS fare \
     FROM generate_series(1, 20000)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_inserts_commit_once_per_statement_and_read_back_in_both_readers() {
    let dir = tempfile::tempdir().unwrap();
    let readers = TestCatalog::sql_in(dir.path());
    let table = iceberg_table(
        dir.path(),
        "df.trips",
        trips_schema(true),
        SchemaEvolutionConfig::default(),
    );
    let ctx = SessionContext::new();
    ctx.register_table("trips", Arc::new(table.clone())).unwrap();

    assert_eq!(
        insert(&ctx, &format!("INSERT INTO trips {TRIPS}")).await.unwrap(),
        20_000
    );
    let result = table.last_result().unwrap();
    assert_eq!(result.destinations["df.trips"].rows, 20_000);
    assert_eq!(result.destinations["df.trips"].commits, 1);
    assert!(result.failed.is_empty());

    let read = readers.read_both("df.trips");
    assert_eq!(read["snapshots"].as_array().unwrap().len(), 1);
    assert_eq!(ids(&read), (1..=20_000).collect::<Vec<i64>>());
    let lisbon = rows(&read).iter().find(|r| r["id"] == 3).unwrap();
    assert_eq!(lisbon["city"], "Lisbon");
    assert_eq!(lisbon["fare"], 0.75);
    assert!(rows(&read).iter().any(|r| r["id"] == 2 && r["city"].is_null()));

    // A second statement is a second snapshot, with the first one's rows kept.
    let n = insert(&ctx, "INSERT INTO trips SELECT id + 20000, city, fare FROM (VALUES (1, 'Paris', 1.5), (2, 'Lyon', 2.5)) AS t(id, city, fare)")
        .await
        .unwrap();
    assert_eq!(n, 2);
    let read = readers.read_both("df.trips");
    assert_eq!(read["snapshots"].as_array().unwrap().len(), 2);
    assert_eq!(ids(&read).len(), 20_002);
    assert!(
        rows(&read)
            .iter()
            .any(|r| r["id"] == 20_002 && r["city"] == "Lyon")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_that_fails_midway_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let readers = TestCatalog::sql_in(dir.path());
    let table = iceberg_table(
        dir.path(),
        "df.partial",
        trips_schema(true),
        SchemaEvolutionConfig::default(),
    );
    let ctx = SessionContext::new();
    ctx.register_table("partial", Arc::new(table.clone())).unwrap();
    insert(&ctx, "INSERT INTO partial VALUES (1, 'Lisbon', 1.0)")
        .await
        .unwrap();

    // Many batches succeed before value 150,000 divides by zero.
    let err = insert(
        &ctx,
        "INSERT INTO partial SELECT value, 'Porto', CAST(1000000 / (value - 150000) AS DOUBLE) \
         FROM generate_series(1, 200000)",
    )
    .await
    .unwrap_err();
    assert!(err.to_string().to_lowercase().contains("divide by zero"), "{err}");

    let read = readers.read_both("df.partial");
    assert_eq!(
        read["snapshots"].as_array().unwrap().len(),
        1,
        "the failed statement committed"
    );
    assert_eq!(ids(&read), vec![1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_rows_come_back_in_the_result_and_the_dead_letter_file() {
    let dir = tempfile::tempdir().unwrap();
    let readers = TestCatalog::sql_in(dir.path());
    let dead_letter = dir.path().join("rejected.ndjson");
    // The table is created with `id` required; a later statement's nulls in `id` do not fit,
    // and RouteToErrors makes them failed records instead of failing the statement.
    let strict = iceberg_table(
        dir.path(),
        "df.strict",
        trips_schema(true),
        SchemaEvolutionConfig::default(),
    );
    let ctx = SessionContext::new();
    ctx.register_table("strict", Arc::new(strict)).unwrap();
    insert(&ctx, "INSERT INTO strict VALUES (1, 'Lisbon', 1.0)")
        .await
        .unwrap();

    // (Routing needs some evolution allowed; relaxation, which these rows need, is not.)
    let routing = SchemaEvolutionConfig::builder()
        .allow(SchemaEvolutionOption::AllowFieldAddition)
        .on_incompatible(IncompatibleSchemaHandling::RouteToErrors)
        .build()
        .unwrap();
    let lenient =
        iceberg_table(dir.path(), "df.strict", trips_schema(false), routing).with_dead_letter(&dead_letter);
    ctx.register_table("lenient", Arc::new(lenient.clone())).unwrap();
    let n = insert(
        &ctx,
        "INSERT INTO lenient SELECT CAST(NULL AS BIGINT), 'Porto', 2.0",
    )
    .await
    .unwrap();
    assert_eq!(n, 0);
    let result = lenient.last_result().unwrap();
    assert_eq!(result.failed.len(), 1);
    assert!(
        result.failed[0].reason.contains("id"),
        "{}",
        result.failed[0].reason
    );

    let lines: Vec<Value> = std::fs::read_to_string(&dead_letter)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["destination"], "df.strict");
    assert_eq!(lines[0]["record"]["city"], "Porto");

    assert_eq!(ids(&readers.read_both("df.strict")), vec![1]);
}

#[tokio::test]
async fn overwrite_is_refused_and_the_table_is_write_only() {
    let dir = tempfile::tempdir().unwrap();
    let table = iceberg_table(
        dir.path(),
        "df.refused",
        trips_schema(true),
        SchemaEvolutionConfig::default(),
    );
    let ctx = SessionContext::new();
    ctx.register_table("t", Arc::new(table)).unwrap();
    let err = insert(&ctx, "INSERT OVERWRITE t VALUES (1, 'a', 1.0)")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("write_disposition"), "{err}");
    let err = ctx
        .sql("SELECT * FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("write-only"), "{err}");
}
