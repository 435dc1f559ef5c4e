//! Spec-built tables: a writer per input partition and one commit per statement, into an
//! Iceberg table on the SQLite catalog, read back by PyIceberg and Java Iceberg; and the
//! same plan after a round trip through Outflow's codecs.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::datasource::MemTable;
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::bytes::{
    logical_plan_from_bytes_with_extension_codec, logical_plan_to_bytes_with_extension_codec,
    physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
};
use outflow_core::{IncompatibleSchemaHandling, SchemaEvolutionConfig, SchemaEvolutionOption};
use outflow_datafusion::{OutflowLogicalCodec, OutflowPhysicalCodec, SinkSpec, SinkTable};
use outflow_iceberg::{CatalogConfig, IcebergSinkOptions};
use outflow_testkit::iceberg::{TestCatalog, rows};
use serde_json::Value;

fn schema(id_required: bool) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, !id_required),
        Field::new("city", DataType::Utf8, true),
    ]))
}

fn spec(dir: &Path, table: &str, evolution: SchemaEvolutionConfig) -> SinkSpec {
    let options = IcebergSinkOptions::builder()
        .catalog(CatalogConfig::sqlite_in(dir))
        .table(table)
        .schema_evolution(evolution)
        .writers_per_table(1)
        .build()
        .unwrap();
    SinkSpec::Iceberg(Box::new(options))
}

/// A source table of `partitions` partitions, `per_partition` rows each, ids from 1.
fn source(partitions: usize, per_partition: i64) -> MemTable {
    let schema = schema(true);
    let parts = (0..partitions as i64)
        .map(|p| {
            let ids: Vec<i64> = (1..=per_partition).map(|i| p * per_partition + i).collect();
            let cities: Vec<Option<&str>> = ids
                .iter()
                .map(|id| if id % 2 == 0 { Some("Lisbon") } else { None })
                .collect();
            vec![
                RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int64Array::from(ids)),
                        Arc::new(StringArray::from(cities)),
                    ],
                )
                .unwrap(),
            ]
        })
        .collect();
    MemTable::try_new(schema, parts).unwrap()
}

/// The answer row of an INSERT into a spec-built table: (count, failed).
fn answer(batches: &[RecordBatch]) -> (u64, u64) {
    assert_eq!(
        batches.iter().map(|b| b.num_rows()).sum::<usize>(),
        1,
        "one answer row"
    );
    let value = |name: &str| {
        batches[0]
            .column_by_name(name)
            .unwrap()
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap()
            .value(0)
    };
    (value("count"), value("failed"))
}

fn ids(read: &Value) -> Vec<i64> {
    let mut ids: Vec<i64> = rows(read).iter().map(|r| r["id"].as_i64().unwrap()).collect();
    ids.sort_unstable();
    ids
}

fn context(partitions: usize) -> SessionContext {
    SessionContext::new_with_config(SessionConfig::new().with_target_partitions(partitions))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_partition_writes_and_the_statement_commits_one_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let readers = TestCatalog::sql_in(dir.path());
    let ctx = context(4);
    ctx.register_table("source", Arc::new(source(4, 50_000))).unwrap();
    let table = SinkTable::from_spec(schema(true), spec(dir.path(), "par.trips", Default::default()));
    ctx.register_table("trips", Arc::new(table.clone())).unwrap();

    let df = ctx
        .sql("INSERT INTO trips SELECT id, city FROM source")
        .await
        .unwrap();
    let plan = df.clone().create_physical_plan().await.unwrap();
    let shown = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(false)
        .to_string();
    assert!(
        shown.contains("SinkCommitExec") && shown.contains("SinkWriterExec"),
        "{shown}"
    );
    assert_eq!(answer(&df.collect().await.unwrap()), (200_000, 0));

    let result = table.last_result().unwrap();
    assert_eq!(result.destinations["par.trips"].rows, 200_000);
    assert_eq!(result.destinations["par.trips"].commits, 1);

    let read = readers.read_both("par.trips");
    let snapshots = read["snapshots"].as_array().unwrap();
    assert_eq!(snapshots.len(), 1, "one snapshot for the statement");
    let files: u64 = snapshots[0]["summary"]["added-data-files"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        files >= 4,
        "each of the 4 writers wrote its own files, got {files}"
    );
    assert_eq!(ids(&read), (1..=200_000).collect::<Vec<i64>>());
    assert!(rows(&read).iter().any(|r| r["id"] == 2 && r["city"] == "Lisbon"));
    assert!(rows(&read).iter().any(|r| r["id"] == 3 && r["city"].is_null()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_failing_midway_leaves_the_table_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let readers = TestCatalog::sql_in(dir.path());
    let ctx = context(4);
    ctx.register_table("source", Arc::new(source(4, 50_000))).unwrap();
    let table = SinkTable::from_spec(schema(true), spec(dir.path(), "par.partial", Default::default()));
    ctx.register_table("partial", Arc::new(table)).unwrap();
    ctx.sql("INSERT INTO partial VALUES (0, 'Faro')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();

    // Only the partition holding id 150,000 fails, after the others may have finished.
    let err = ctx
        .sql("INSERT INTO partial SELECT id, CAST(1000000 / (id - 150000) AS VARCHAR) FROM source")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(err.to_string().to_lowercase().contains("divide by zero"), "{err}");

    let read = readers.read_both("par.partial");
    assert_eq!(
        read["snapshots"].as_array().unwrap().len(),
        1,
        "the failed statement committed"
    );
    assert_eq!(ids(&read), vec![0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_rows_are_counted_in_the_answer_and_written_to_the_dead_letter_file() {
    let dir = tempfile::tempdir().unwrap();
    let readers = TestCatalog::sql_in(dir.path());
    let dead_letter = dir.path().join("rejected.ndjson");
    let ctx = context(2);
    let strict = SinkTable::from_spec(schema(true), spec(dir.path(), "par.strict", Default::default()));
    ctx.register_table("strict", Arc::new(strict)).unwrap();
    ctx.sql("INSERT INTO strict VALUES (1, 'Lisbon')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();

    let routing = SchemaEvolutionConfig::builder()
        .allow(SchemaEvolutionOption::AllowFieldAddition)
        .on_incompatible(IncompatibleSchemaHandling::RouteToErrors)
        .build()
        .unwrap();
    let lenient = SinkTable::from_spec(schema(false), spec(dir.path(), "par.strict", routing))
        .with_dead_letter(&dead_letter);
    ctx.register_table("lenient", Arc::new(lenient)).unwrap();
    let batches = ctx
        .sql("INSERT INTO lenient VALUES (2, 'Porto'), (CAST(NULL AS BIGINT), 'Braga')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    // Both rows are in one batch, which does not fit as a whole (a null in `id`).
    assert_eq!(answer(&batches), (0, 2));
    let lines: Vec<Value> = std::fs::read_to_string(&dead_letter)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l["destination"] == "par.strict"));
    assert!(lines.iter().any(|l| l["record"]["city"] == "Braga"));
    assert_eq!(ids(&readers.read_both("par.strict")), vec![1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_runs_after_a_round_trip_through_the_codecs() {
    let dir = tempfile::tempdir().unwrap();
    let readers = TestCatalog::sql_in(dir.path());
    let planner = context(3);
    let table = SinkTable::from_spec(schema(true), spec(dir.path(), "par.shipped", Default::default()));
    planner.register_table("shipped", Arc::new(table)).unwrap();
    // A source DataFusion's protobuf form knows (generate_series and memory tables are not
    // among them; Ballista clusters read files, see outflow-ballista's tests).
    let values: Vec<String> = (1..=5000).map(|i| format!("({i}, 'Evora')")).collect();
    let sql = format!("INSERT INTO shipped VALUES {}", values.join(","));

    // The logical plan, as a Ballista client sends it to the scheduler...
    let logical = planner.sql(&sql).await.unwrap().into_unoptimized_plan();
    let bytes =
        logical_plan_to_bytes_with_extension_codec(&logical, &OutflowLogicalCodec::default()).unwrap();
    let scheduler = context(3);
    let decoded = logical_plan_from_bytes_with_extension_codec(
        &bytes,
        &scheduler.task_ctx(),
        &OutflowLogicalCodec::default(),
    )
    .unwrap();
    // ...planned there, and its physical plan as the scheduler sends it to executors.
    let physical = scheduler.state().create_physical_plan(&decoded).await.unwrap();
    let bytes =
        physical_plan_to_bytes_with_extension_codec(physical, &OutflowPhysicalCodec::default()).unwrap();
    let executor = context(3);
    let shipped = physical_plan_from_bytes_with_extension_codec(
        &bytes,
        &executor.task_ctx(),
        &OutflowPhysicalCodec::default(),
    )
    .unwrap();
    assert_eq!(
        answer(&collect(shipped, executor.task_ctx()).await.unwrap()),
        (5000, 0)
    );

    let read = readers.read_both("par.shipped");
    assert_eq!(read["snapshots"].as_array().unwrap().len(), 1);
    assert_eq!(ids(&read), (1..=5000).collect::<Vec<i64>>());
    assert!(rows(&read).iter().all(|r| r["city"] == "Evora"));
}

#[test]
fn a_table_built_from_a_closure_cannot_be_sent() {
    use datafusion_proto::logical_plan::LogicalExtensionCodec;
    let table = SinkTable::new(schema(true), || async { unreachable!("never opened") });
    let err = OutflowLogicalCodec::default()
        .try_encode_table_provider(&"t".into(), Arc::new(table), &mut Vec::new())
        .unwrap_err();
    assert!(err.to_string().contains("from_spec"), "{err}");
}

#[test]
fn a_spec_reads_like_a_job_file_sink_section() {
    let spec: SinkSpec = serde_json::from_str(
        r#"{"iceberg": {"catalog": {"type": "sql", "uri": "/lake/catalog.db", "warehouse": "/lake/wh"}, "table": "a.b"}}"#,
    )
    .unwrap();
    assert_eq!(spec.name(), "iceberg");
    let back: SinkSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
    assert_eq!(back, spec);
    let unknown = serde_json::from_str::<SinkSpec>(r#"{"kafka": {}}"#).unwrap_err();
    assert!(unknown.to_string().contains("kafka"), "{unknown}");
}
