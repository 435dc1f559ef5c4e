//! The Iceberg sink against real catalogs (SQLite, and Apache Iceberg's REST fixture), with
//! every table read back by PyIceberg and Java Iceberg.

use std::sync::Arc;

use crate::common::*;
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field};
use outflow_core::{
    CreateDisposition, ErrorKind, IncompatibleSchemaHandling, SchemaEvolutionConfig, SchemaEvolutionOption,
    Sink, WriteDisposition,
};
use outflow_iceberg::commit::{CommitOutcome, find_commit};
use outflow_iceberg::schema::parse_table_ident;
use outflow_iceberg::{CatalogConfig, IcebergCatalog, TableCreateOptions};
use outflow_testkit::iceberg::{Reader, TestCatalog};
use outflow_testkit::unique_name;
use serde_json::{Value, json};

async fn check_all_types(config: CatalogConfig, readers: TestCatalog) {
    let table = format!("{}.all_types", unique_name("ns"));
    let result = write_all(options(&config, &table).build().unwrap(), vec![all_types_batch()])
        .await
        .unwrap();
    assert_eq!(result.rows_written(), 3);
    assert_eq!(result.destinations[&table].commits, 1);
    let read = readers.read_both(&table);
    let types = field_types(&read);
    for expected in all_types_schema() {
        assert!(types.contains(&expected), "missing {expected:?} in {types:?}");
    }
    let point = &outflow_testkit::iceberg::fields(&read)[12];
    assert_eq!(point["type"]["fields"][0]["required"], json!(true));
    assert_eq!(read_rows(&read), all_types_rows());
    assert_eq!(read["snapshots"][0]["operation"], "append");
    assert!(read["snapshots"][0]["summary"]["outflow.commit-id"].is_string());
    assert!(read["properties"]["schema.name-mapping.default"].is_string());
}

#[tokio::test]
async fn every_type_round_trips_through_the_sqlite_catalog() {
    let fixture = sql_catalog();
    check_all_types(fixture.config.clone(), fixture.readers.clone()).await;
}

#[tokio::test]
async fn every_type_round_trips_through_the_rest_catalog() {
    let (config, readers) = rest_catalog();
    check_all_types(config, readers).await;
}

#[tokio::test]
async fn partitioned_tables_with_every_transform_read_back() {
    let fixture = sql_catalog();
    let cases: [(&str, &str); 7] = [
        ("region", "identity"),
        ("bucket(4, id)", "bucket[4]"),
        ("truncate(6, name)", "truncate[6]"),
        ("year(ts)", "year"),
        ("month(ts)", "month"),
        ("day(ts)", "day"),
        ("hour(ts)", "hour"),
    ];
    for (i, (field, transform)) in cases.into_iter().enumerate() {
        let table = format!("parts.t{i}");
        let opts = options(&fixture.config, &table)
            .table_options(partitioned(&[field]))
            .build()
            .unwrap();
        write_all(opts, vec![events(0..30, "eu"), events(30..40, "us")])
            .await
            .unwrap();
        let read = fixture.readers.read_both(&table);
        assert_eq!(read["partition_spec"][0]["transform"], transform, "{field}");
        assert_eq!(read["row_count"], 40, "{field}");
        let ids: Vec<i64> = read_rows(&read)
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        let mut ids = ids;
        ids.sort();
        assert_eq!(ids, (0..40).collect::<Vec<_>>(), "{field}");
        let files: u64 = read["snapshots"][0]["summary"]["added-data-files"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        if matches!(transform, "identity" | "bucket[4]" | "day" | "hour") {
            assert!(files > 1, "{field}: {files} files for several partitions");
        }
    }
}

fn all_options() -> SchemaEvolutionConfig {
    SchemaEvolutionConfig::builder()
        .allow_all([
            SchemaEvolutionOption::AllowFieldAddition,
            SchemaEvolutionOption::AllowFieldRelaxation,
            SchemaEvolutionOption::AllowTypePromotion,
        ])
        .build()
        .unwrap()
}

#[tokio::test]
async fn evolution_on_write_adds_relaxes_and_promotes() {
    let fixture = sql_catalog();
    let table = "evo.t";
    let first = batch(vec![
        (Field::new("id", DataType::Int64, false), ids(2)),
        (
            Field::new("n", DataType::Int32, false),
            Arc::new(Int32Array::from(vec![10, 20])),
        ),
    ]);
    write_all(options(&fixture.config, table).build().unwrap(), vec![first])
        .await
        .unwrap();
    let before = fixture.readers.read_both(table);
    assert_eq!(
        field_types(&before),
        vec![
            ("id".into(), json!("long"), true),
            ("n".into(), json!("int"), true)
        ]
    );

    // n arrives as long (promotion), with a null (relaxation), and a new column (addition).
    let second = batch(vec![
        (
            Field::new("id", DataType::Int64, false),
            Arc::new(Int64Array::from(vec![2, 3])),
        ),
        (
            Field::new("n", DataType::Int64, true),
            Arc::new(Int64Array::from(vec![Some(5_000_000_000), None])),
        ),
        (
            Field::new("note", DataType::Utf8, true),
            Arc::new(StringArray::from(vec!["x", "y"])),
        ),
    ]);
    let opts = options(&fixture.config, table)
        .schema_evolution(all_options())
        .build()
        .unwrap();
    write_all(opts, vec![second]).await.unwrap();
    let after = fixture.readers.read_both(table);
    assert_eq!(
        field_types(&after),
        vec![
            ("id".into(), json!("long"), true),
            ("n".into(), json!("long"), false),
            ("note".into(), json!("string"), false),
        ]
    );
    // Field ids are kept; the new column gets the next one.
    let fields = outflow_testkit::iceberg::fields(&after);
    assert_eq!(
        (
            fields[0]["id"].clone(),
            fields[1]["id"].clone(),
            fields[2]["id"].clone()
        ),
        (json!(1), json!(2), json!(3))
    );
    assert_eq!(
        read_rows(&after),
        sorted(vec![
            json!({"id": 0, "n": 10, "note": null}),
            json!({"id": 1, "n": 20, "note": null}),
            json!({"id": 2, "n": 5_000_000_000i64, "note": "x"}),
            json!({"id": 3, "n": null, "note": "y"}),
        ])
    );
    let mapping: Value = serde_json::from_str(
        after["properties"]["schema.name-mapping.default"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(mapping[2]["names"], json!(["note"]));
}

#[tokio::test]
async fn refused_evolution_names_the_column_and_commits_nothing() {
    let fixture = sql_catalog();
    let table = "refuse.t";
    let base = batch(vec![(Field::new("id", DataType::Int64, false), ids(2))]);
    write_all(options(&fixture.config, table).build().unwrap(), vec![base])
        .await
        .unwrap();

    let extra = batch(vec![
        (Field::new("id", DataType::Int64, false), ids(1)),
        (
            Field::new("extra", DataType::Utf8, true),
            Arc::new(StringArray::from(vec!["x"])),
        ),
    ]);
    let err = write_all(options(&fixture.config, table).build().unwrap(), vec![extra])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SchemaIncompatible);
    assert!(err.to_string().contains("extra"), "{err}");

    let conflict = batch(vec![(
        Field::new("id", DataType::Utf8, false),
        Arc::new(StringArray::from(vec!["1"])) as ArrayRef,
    )]);
    let err = write_all(
        options(&fixture.config, table)
            .schema_evolution(all_options())
            .build()
            .unwrap(),
        vec![conflict],
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("id: the table has long, the input string"),
        "{err}"
    );

    let nulls = batch(vec![(
        Field::new("id", DataType::Int64, true),
        Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef,
    )]);
    let err = write_all(options(&fixture.config, table).build().unwrap(), vec![nulls])
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("id: required in the table, but the input holds 1 null"),
        "{err}"
    );

    let read = fixture.readers.read_both(table);
    assert_eq!(snapshot_count(&read), 1);
    assert_eq!(read["row_count"], 2);
    assert_eq!(field_types(&read), vec![("id".into(), json!("long"), true)]);
}

#[tokio::test]
async fn route_to_errors_returns_the_rows_that_do_not_fit() {
    let fixture = sql_catalog();
    let table = "route.t";
    write_all(
        options(&fixture.config, table).build().unwrap(),
        vec![events(0..2, "eu")],
    )
    .await
    .unwrap();
    let config = SchemaEvolutionConfig::builder()
        .allow(SchemaEvolutionOption::AllowTypePromotion)
        .on_incompatible(IncompatibleSchemaHandling::RouteToErrors)
        .build()
        .unwrap();
    let bad = batch(vec![(
        Field::new("id", DataType::Utf8, false),
        Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
    )]);
    let opts = options(&fixture.config, table)
        .schema_evolution(config)
        .build()
        .unwrap();
    let result = write_all(opts, vec![events(2..4, "us"), bad]).await.unwrap();
    assert_eq!(result.rows_written(), 2);
    assert_eq!(result.failed.len(), 2);
    assert_eq!(result.failed[0].index, Some(2));
    assert_eq!(result.failed[1].record, Some(json!({"id": "b"})));
    assert!(result.failed[0].reason.contains("id: the table has long"));
    assert_eq!(fixture.readers.read_both(table)["row_count"], 4);
}

#[tokio::test]
async fn truncate_replaces_rows_in_one_snapshot_and_empty_refuses_a_full_table() {
    let fixture = sql_catalog();
    let table = "disp.t";
    write_all(
        options(&fixture.config, table).build().unwrap(),
        vec![events(0..5, "eu")],
    )
    .await
    .unwrap();

    let err = write_all(
        options(&fixture.config, table)
            .write_disposition(WriteDisposition::Empty)
            .build()
            .unwrap(),
        vec![events(5..6, "eu")],
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("holds 5 rows and write_disposition is empty"),
        "{err}"
    );

    let opts = options(&fixture.config, table)
        .write_disposition(WriteDisposition::Truncate)
        .build()
        .unwrap();
    write_all(opts, vec![events(100..102, "us"), events(102..103, "us")])
        .await
        .unwrap();
    let read = fixture.readers.read_both(table);
    let ids: Vec<i64> = read_rows(&read)
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![100, 101, 102]);
    assert_eq!(snapshot_count(&read), 2);
    let last = read["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["operation"] == "overwrite")
        .unwrap();
    assert_eq!(last["summary"]["deleted-records"], "5");
    assert_eq!(last["summary"]["total-records"], "3");

    // Truncate with no input empties the table; then Empty accepts it.
    write_all(
        options(&fixture.config, table)
            .write_disposition(WriteDisposition::Truncate)
            .build()
            .unwrap(),
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(fixture.readers.read_both(table)["row_count"], 0);
    let opts = options(&fixture.config, table)
        .write_disposition(WriteDisposition::Empty)
        .build()
        .unwrap();
    write_all(opts, vec![events(7..8, "eu")]).await.unwrap();
    assert_eq!(fixture.readers.read_both(table)["row_count"], 1);
}

#[tokio::test]
async fn dynamic_destinations_route_rows_by_template() {
    let fixture = sql_catalog();
    let opts = options(&fixture.config, "dyn.events_{region}").build().unwrap();
    let mut mixed = vec![events(0..3, "eu"), events(3..5, "us"), events(5..6, "eu")];
    mixed.push(arrow_select::concat::concat_batches(&mixed[0].schema(), &mixed).unwrap());
    write_all(opts, mixed).await.unwrap();
    let eu = fixture.readers.read_both("dyn.events_eu");
    let us = fixture.readers.read_both("dyn.events_us");
    assert_eq!(
        (eu["row_count"].clone(), us["row_count"].clone()),
        (json!(8), json!(4))
    );
    assert!(read_rows(&us).iter().all(|r| r["region"] == "us"));
}

#[tokio::test]
async fn template_values_that_would_move_a_table_are_failed_records() {
    let fixture = sql_catalog();
    let cols = ["a/b", "ok", "a.b", "ok", "../up"];
    let input = batch(vec![
        (Field::new("id", DataType::Int64, false), ids(5)),
        (
            Field::new("col", DataType::Utf8, false),
            Arc::new(StringArray::from(cols.to_vec())) as ArrayRef,
        ),
    ]);
    let opts = options(&fixture.config, "dyn.t_{col}").build().unwrap();
    let result = write_all(opts, vec![input]).await.unwrap();
    assert_eq!(result.rows_written(), 2);
    let failed: Vec<(Option<u64>, &str)> = result
        .failed
        .iter()
        .map(|f| (f.index, f.reason.as_str()))
        .collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert_eq!(
        failed.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [Some(0), Some(2), Some(4)]
    );
    assert!(
        failed[0].1.starts_with("row 0: field col is \"a/b\""),
        "{}",
        failed[0].1
    );
    assert!(result.failed.iter().all(|f| f.destination == "dyn.t_{col}"));
    assert_eq!(result.failed[1].record.as_ref().unwrap()["col"], "a.b");
    let read = fixture.readers.read_both("dyn.t_ok");
    assert_eq!(read["row_count"], 2);
    let warehouse = fixture.dir.path().join("warehouse/dyn");
    let tables: Vec<String> = std::fs::read_dir(&warehouse)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(tables, ["t_ok"], "nothing outside the one valid table's location");
}

#[tokio::test]
async fn a_replayed_commit_appends_nothing() {
    let fixture = sql_catalog();
    let table = "replay.t";
    let mut sink = sink(options(&fixture.config, table).build().unwrap()).await;
    sink.write(events(0..10, "eu")).await.unwrap();
    let pending = sink.prepare_commits().await.unwrap();
    assert_eq!(pending.len(), 1);
    let first = sink.commit(&pending[0]).await.unwrap();
    assert!(matches!(first, CommitOutcome::Committed { .. }));
    // The acknowledgement was "lost": the same commit is tried again.
    let again = sink.commit(&pending[0]).await.unwrap();
    assert_eq!(
        again,
        CommitOutcome::AlreadyCommitted {
            snapshot_id: first.snapshot_id()
        }
    );
    sink.close().await.unwrap();
    let read = fixture.readers.read_both(table);
    assert_eq!(snapshot_count(&read), 1);
    assert_eq!(read["row_count"], 10);
    let catalog = IcebergCatalog::connect(&fixture.config).await.unwrap();
    let loaded = catalog
        .require_table(&parse_table_ident(table).unwrap())
        .await
        .unwrap();
    assert_eq!(
        find_commit(&loaded, &pending[0].commit.commit_id),
        Some(first.snapshot_id())
    );
}

#[tokio::test]
async fn four_concurrent_writers_lose_and_duplicate_nothing() {
    let fixture = sql_catalog();
    let table = "conc.t";
    // Create the table first so that all four append to the same one.
    write_all(
        options(&fixture.config, table).build().unwrap(),
        vec![events(0..1, "eu")],
    )
    .await
    .unwrap();
    let mut tasks = Vec::new();
    for w in 0..4i64 {
        let opts = options(&fixture.config, table).build().unwrap();
        tasks.push(tokio::spawn(async move {
            let mut sink = sink(opts).await;
            for flush in 0..5i64 {
                let start = 1 + w * 1000 + flush * 100;
                sink.write(events(start..start + 20, "eu")).await.unwrap();
                sink.flush().await.unwrap();
            }
            sink.close().await.unwrap()
        }));
    }
    for t in tasks {
        let result = t.await.unwrap();
        assert_eq!(result.rows_written(), 100);
    }
    let read = fixture.readers.read_both(table);
    assert_eq!(read["row_count"], 401);
    let mut ids: Vec<i64> = read_rows(&read)
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 401, "every row exactly once");
    assert_eq!(snapshot_count(&read), 21);
}

#[tokio::test]
async fn outflow_appends_to_a_table_pyiceberg_created() {
    let fixture = sql_catalog();
    let table = "reverse.t";
    let parquet = fixture.dir.path().join("seed.parquet");
    let seed = events(0..3, "eu");
    let file = std::fs::File::create(&parquet).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, seed.schema(), None).unwrap();
    writer.write(&seed).unwrap();
    writer.close().unwrap();
    fixture.readers.pyiceberg_create_and_append(table, &parquet, &[]);

    let opts = options(&fixture.config, table)
        .create_disposition(CreateDisposition::CreateNever)
        .build()
        .unwrap();
    write_all(opts, vec![events(3..5, "us")]).await.unwrap();
    let read = fixture.readers.read(Reader::PyIceberg, table);
    assert_eq!(read["row_count"], 5);
    assert_eq!(read, fixture.readers.read(Reader::Java, table));
    let ids: Vec<i64> = read_rows(&read)
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn a_missing_table_under_create_never_is_named() {
    let fixture = sql_catalog();
    let opts = options(&fixture.config, "nowhere.t")
        .create_disposition(CreateDisposition::CreateNever)
        .build()
        .unwrap();
    let err = write_all(opts, vec![events(0..1, "eu")]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(
        err.to_string().contains("table nowhere.t does not exist"),
        "{err}"
    );
    assert!(!fixture.dir.path().join("warehouse/nowhere").exists());
}

#[tokio::test]
async fn an_unreachable_catalog_is_a_clear_error() {
    let config = CatalogConfig::Rest {
        uri: "http://127.0.0.1:9".into(),
        warehouse: None,
        name: "rest".into(),
        properties: Default::default(),
    };
    let err = IcebergCatalog::connect_with_retry(&config, &outflow_core::RetryPolicy::none())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot reach the REST catalog at http://127.0.0.1:9"),
        "{err}"
    );
    let missing_dir = CatalogConfig::Sql {
        uri: "/proc/nope/catalog.db".into(),
        warehouse: "/tmp".into(),
        name: "x".into(),
        properties: Default::default(),
    };
    assert!(IcebergCatalog::connect(&missing_dir).await.is_err());
}

#[tokio::test]
async fn the_memory_catalog_keeps_tables_for_the_process() {
    let config = CatalogConfig::Memory {
        warehouse: None,
        name: "mem".into(),
    };
    let catalog = IcebergCatalog::connect(&config).await.unwrap();
    let opts = options(&config, "mem.t")
        .write_disposition(WriteDisposition::Append)
        .build()
        .unwrap();
    let mut sink = outflow_iceberg::IcebergSink::with_catalog(catalog.clone(), opts.clone());
    sink.write(events(0..4, "eu")).await.unwrap();
    sink.close().await.unwrap();
    // A second sink on the same catalog sees the table and appends; truncate works too,
    // through the same commit path as the SQL catalog.
    let mut truncate = outflow_iceberg::IcebergSink::with_catalog(
        catalog.clone(),
        opts.to_builder()
            .write_disposition(WriteDisposition::Truncate)
            .build()
            .unwrap(),
    );
    truncate.write(events(10..12, "eu")).await.unwrap();
    truncate.close().await.unwrap();
    let table = catalog
        .require_table(&parse_table_ident("mem.t").unwrap())
        .await
        .unwrap();
    assert_eq!(outflow_iceberg::table_row_count(&table).await.unwrap(), 2);
    assert_eq!(table.metadata().snapshots().count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_writers_spread_batches_over_files() {
    let fixture = sql_catalog();
    let table = "par.t";
    let opts = options(&fixture.config, table)
        .writers_per_table(3)
        .build()
        .unwrap();
    let batches = (0..6).map(|i| events(i * 100..i * 100 + 100, "eu")).collect();
    let result = write_all(opts, batches).await.unwrap();
    assert_eq!(result.destinations[table].files, 3);
    let read = fixture.readers.read_both(table);
    assert_eq!(read["snapshots"][0]["summary"]["added-data-files"], "3");
    let mut ids: Vec<i64> = read_rows(&read)
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, (0..600).collect::<Vec<_>>());
}

/// One row: `id` and a column of structs nested `depth` levels (`s1.s2...leaf`).
fn nested_batch(depth: usize) -> RecordBatch {
    use arrow_array::Array;
    let mut field = Field::new("leaf", DataType::Int64, true);
    let mut array: ArrayRef = Arc::new(Int64Array::from(vec![7]));
    for level in (1..depth).rev() {
        let child = arrow_array::StructArray::new(vec![field].into(), vec![array], None);
        field = Field::new(format!("s{level}"), child.data_type().clone(), true);
        array = Arc::new(child);
    }
    batch(vec![
        (Field::new("id", DataType::Int64, false), ids(1)),
        (field, array),
    ])
}

#[tokio::test]
async fn a_schema_too_deep_for_table_metadata_creates_and_evolves_nothing() {
    let fixture = sql_catalog();
    let table = "deep.t";
    let err = write_all(
        options(&fixture.config, table).build().unwrap(),
        vec![nested_batch(60)],
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("nested 60 levels deep"), "{err}");
    assert!(
        err.context_value("column").unwrap().starts_with("s1.s2.s3"),
        "{err}"
    );
    let catalog = IcebergCatalog::connect(&fixture.config).await.unwrap();
    let ident = parse_table_ident(table).unwrap();
    assert!(
        catalog.require_table(&ident).await.is_err(),
        "no table was created"
    );

    // The same name then takes a shallow table, and evolving it to a depth its metadata
    // could not hold is refused while the table stays readable by every reader.
    let evolving = || {
        options(&fixture.config, table)
            .schema_evolution(all_options())
            .build()
            .unwrap()
    };
    write_all(evolving(), vec![nested_batch(10)]).await.unwrap();
    let err = write_all(evolving(), vec![nested_batch(60)]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    write_all(evolving(), vec![nested_batch(10)]).await.unwrap();
    let read = fixture.readers.read_both(table);
    assert_eq!(read["row_count"], 2);
    assert_eq!(snapshot_count(&read), 2);
}

/// The data files under a table's location.
fn data_files(fixture: &SqlFixture, table: &str) -> usize {
    let (ns, name) = table.split_once('.').unwrap();
    let dir = fixture
        .dir
        .path()
        .join("warehouse")
        .join(ns)
        .join(name)
        .join("data");
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}

#[tokio::test]
async fn abort_removes_what_was_not_committed_and_keeps_what_was() {
    let fixture = sql_catalog();
    // A table the sink created and never committed to goes, with its files.
    let mut fresh = sink(options(&fixture.config, "ab.fresh").build().unwrap()).await;
    fresh.write(events(0..10, "eu")).await.unwrap();
    let aborted = fresh.abort().await;
    assert_eq!(aborted.removed_tables, ["ab.fresh"]);
    assert_eq!(aborted.deleted_files, 1);
    assert!(aborted.left.is_empty(), "{aborted:?}");
    assert!(!fixture.dir.path().join("warehouse/ab/fresh").exists());
    let catalog = IcebergCatalog::connect(&fixture.config).await.unwrap();
    assert!(
        catalog
            .load_table(&parse_table_ident("ab.fresh").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        fresh.write(events(0..1, "eu")).await.is_err(),
        "an aborted sink writes no more"
    );

    // A table with a commit stays as committed; only the files written after it go.
    let mut kept = sink(options(&fixture.config, "ab.kept").build().unwrap()).await;
    kept.write(events(0..10, "eu")).await.unwrap();
    kept.flush().await.unwrap();
    kept.write(events(10..20, "eu")).await.unwrap();
    let aborted = kept.abort().await;
    assert!(aborted.removed_tables.is_empty(), "{aborted:?}");
    assert_eq!(aborted.deleted_files, 1);
    assert_eq!(data_files(&fixture, "ab.kept"), 1);
    let read = fixture.readers.read_both("ab.kept");
    assert_eq!(read["row_count"], 10);
    assert_eq!(snapshot_count(&read), 1);
}

/// Manifests in the current snapshot of `table`, by iceberg-rust.
async fn manifest_count(catalog: &CatalogConfig, table: &str) -> usize {
    let catalog = IcebergCatalog::connect(catalog).await.unwrap();
    let table = catalog
        .require_table(&parse_table_ident(table).unwrap())
        .await
        .unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap();
    let list = table.manifest_list_reader(snapshot).load().await.unwrap();
    list.entries().len()
}

#[tokio::test]
async fn small_commits_merge_manifests_past_the_tables_minimum_count() {
    let fixture = sql_catalog();
    let config = fixture.config.clone();
    for (property, commits, expected) in [
        (Some(("commit.manifest.min-count-to-merge", "4")), 10, 1),
        (Some(("commit.manifest-merge.enabled", "false")), 6, 6),
        (None, 6, 6),
    ] {
        let table = format!("{}.merged", unique_name("ns"));
        let mut create = TableCreateOptions::builder();
        if let Some((key, value)) = property {
            create = create.property(key, value);
        }
        let options = options(&config, &table)
            .table_options(create.build().unwrap())
            .build()
            .unwrap();
        for commit in 0..commits {
            write_all(options.clone(), vec![events(commit * 10..commit * 10 + 10, "eu")])
                .await
                .unwrap();
        }
        // Min count 4: commits 1-3 add a manifest each, the 4th merges the four into one,
        // the 5th to 7th add to it until the 7th merges again, and the 10th.
        let manifests = manifest_count(&config, &table).await;
        assert_eq!(
            manifests, expected,
            "{property:?}: manifests after {commits} commits"
        );
        let read = fixture.readers.read_both(&table);
        assert_eq!(snapshot_count(&read), commits as usize);
        let mut ids: Vec<i64> = read_rows(&read)
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..commits * 10).collect::<Vec<_>>(), "{property:?}");
    }
}
