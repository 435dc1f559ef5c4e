//! Upsert mode against the SQLite catalog: a generated change stream applied by key, read
//! back by Java Iceberg (which applies equality deletes), against the same changes applied
//! to a map here.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::*;
use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use outflow_core::changes::{ChangeConfig, OperationColumn};
use outflow_core::{ErrorKind, RetryPolicy, SchemaEvolutionConfig, SchemaEvolutionOption, Sink};
use outflow_iceberg::maintenance::compact::{CompactOptions, compact};
use outflow_iceberg::{IcebergCatalog, TableCreateOptions};
use outflow_testkit::iceberg::Reader;
use serde_json::{Value, json};

/// One change: key, operation word, value.
type Change = (Option<i64>, Option<&'static str>, i64);

fn change_batch(changes: &[Change]) -> RecordBatch {
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("op", DataType::Utf8, true),
        Field::new("value", DataType::Int64, true),
        Field::new("label", DataType::Utf8, true),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from(changes.iter().map(|c| c.0).collect::<Vec<_>>())),
            Arc::new(StringArray::from(changes.iter().map(|c| c.1).collect::<Vec<_>>())),
            Arc::new(Int64Array::from(changes.iter().map(|c| c.2).collect::<Vec<_>>())),
            Arc::new(StringArray::from(
                changes.iter().map(|c| format!("v{}", c.2)).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap()
}

fn by_id() -> ChangeConfig {
    ChangeConfig::new(["id"], OperationColumn::new("op"))
}

/// The shared generated change stream as rows of `id`, `op`, `value`, with the state it
/// leaves.
fn change_stream(keys: u64, count: u64) -> (Vec<Change>, BTreeMap<i64, i64>) {
    let (changes, state) = outflow_testkit::changes::change_stream(0x5eed, keys, count);
    let rows = changes
        .iter()
        .map(|c| (Some(c.key as i64), Some(c.op), c.value as i64))
        .collect();
    (
        rows,
        state.into_iter().map(|(k, v)| (k as i64, v as i64)).collect(),
    )
}

/// `id -> value` of what a reader read, failing on a key read twice.
fn read_state(read: &Value) -> BTreeMap<i64, i64> {
    let mut state = BTreeMap::new();
    for row in outflow_testkit::iceberg::rows(read) {
        let id = row["id"].as_i64().unwrap();
        let value = row["value"].as_i64().unwrap();
        assert_eq!(row["label"], json!(format!("v{value}")), "{row}");
        assert!(state.insert(id, value).is_none(), "key {id} read twice");
    }
    state
}

#[tokio::test]
async fn a_change_stream_applied_by_key_reads_back_exactly_in_java_iceberg() {
    let fixture = sql_catalog();
    let table = "cdc.accounts";
    let (changes, expected) = change_stream(10_000, 100_000);
    let options = options(&fixture.config, table).changes(by_id()).build().unwrap();
    // Batches of 5,000 changes, a commit every four: keys repeat within a batch, across the
    // batches of one commit and across commits.
    let mut commits = 0;
    for flush in changes.chunks(20_000) {
        let mut sink = sink(options.clone()).await;
        for batch in flush.chunks(5_000) {
            sink.write(change_batch(batch)).await.unwrap();
        }
        let result = sink.close().await.unwrap();
        assert!(result.failed.is_empty(), "{:?}", result.failed.first());
        commits += result.destinations[table].commits;
    }
    assert_eq!(commits, 5);

    let read = fixture.readers.read(Reader::Java, table);
    let state = read_state(&read);
    assert_eq!(state.len(), expected.len());
    assert_eq!(state, expected);
    let id = &outflow_testkit::iceberg::fields(&read)[0];
    assert_eq!(
        (id["name"].as_str(), id["required"].as_bool()),
        (Some("id"), Some(true))
    );
    let last = &read["snapshots"][4];
    assert_eq!(last["operation"], "overwrite");
    let deletes: u64 = last["summary"]["total-equality-deletes"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(deletes > 0, "{last}");

    // Compaction applies the equality deletes (each to the data files older than it): Java
    // reads the same state, and no delete file applies to the files it wrote.
    let catalog = IcebergCatalog::connect(&fixture.config).await.unwrap();
    let compacting = CompactOptions {
        min_input_files: 2,
        ..CompactOptions::default()
    };
    let report = compact(&catalog, table, &compacting, &RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(report.data_files_after, 1, "{report:?}");
    assert_eq!(
        report.groups[0].output_records,
        Some(expected.len() as u64),
        "{report:?}"
    );
    let compacted = read_state(&fixture.readers.read(Reader::Java, table));
    assert_eq!(compacted, expected);
    assert_no_deletes_apply(&fixture, table);
}

#[tokio::test]
async fn the_key_is_read_from_the_tables_identifier_fields() {
    let fixture = sql_catalog();
    let table = "cdc.by_identifier";
    let first = options(&fixture.config, table).changes(by_id()).build().unwrap();
    write_all(
        first,
        vec![change_batch(&[
            (Some(1), Some("c"), 10),
            (Some(2), Some("c"), 20),
        ])],
    )
    .await
    .unwrap();
    // No key named: the table's identifier fields, set when the sink created it.
    let keyless = ChangeConfig::new(Vec::<String>::new(), OperationColumn::new("op"));
    let second = options(&fixture.config, table).changes(keyless).build().unwrap();
    write_all(
        second,
        vec![change_batch(&[(Some(1), Some("u"), 11), (Some(2), Some("d"), 0)])],
    )
    .await
    .unwrap();
    let read = fixture.readers.read(Reader::Java, table);
    assert_eq!(read_state(&read), BTreeMap::from([(1, 11)]));

    // A column added by schema evolution keeps the identifier fields, and so the key.
    let added = options(&fixture.config, table)
        .changes(ChangeConfig::new(
            Vec::<String>::new(),
            OperationColumn::new("op"),
        ))
        .schema_evolution(
            SchemaEvolutionConfig::builder()
                .allow(SchemaEvolutionOption::AllowFieldAddition)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let with_note = change_batch(&[(Some(1), Some("d"), 0), (Some(3), Some("c"), 30)]);
    let note = Arc::new(StringArray::from(vec![Some("gone"), Some("new")]));
    let with_note = with_note
        .schema()
        .fields()
        .iter()
        .cloned()
        .zip(with_note.columns().iter().cloned())
        .chain([(
            Arc::new(Field::new("note", DataType::Utf8, true)),
            note as arrow_array::ArrayRef,
        )])
        .collect::<Vec<_>>();
    let with_note = RecordBatch::try_new(
        Arc::new(Schema::new(
            with_note.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>(),
        )),
        with_note.into_iter().map(|(_, c)| c).collect(),
    )
    .unwrap();
    write_all(added, vec![with_note]).await.unwrap();
    let read = fixture.readers.read(Reader::Java, table);
    assert_eq!(outflow_testkit::iceberg::fields(&read).len(), 4, "note was added");
    assert_eq!(read_state(&read), BTreeMap::from([(3, 30)]));
}

#[tokio::test]
async fn bad_changes_are_failed_records_naming_the_column_and_the_rest_is_applied() {
    let fixture = sql_catalog();
    let table = "cdc.bad";
    let options = options(&fixture.config, table).changes(by_id()).build().unwrap();
    let result = write_all(
        options,
        vec![change_batch(&[
            (Some(1), Some("c"), 10),
            (Some(2), Some("merge"), 20),
            (None, Some("u"), 30),
            (Some(4), Some("c"), 40),
        ])],
    )
    .await
    .unwrap();
    let failed: Vec<(Option<u64>, &str)> = result
        .failed
        .iter()
        .map(|f| (f.index, f.reason.as_str()))
        .collect();
    assert_eq!(
        failed,
        [
            (Some(1), "op: unknown operation \"merge\""),
            (Some(2), "id: the key column is null"),
        ]
    );
    assert_eq!(result.failed[0].record.as_ref().unwrap()["value"], json!(20));
    let read = fixture.readers.read(Reader::Java, table);
    assert_eq!(read_state(&read), BTreeMap::from([(1, 10), (4, 40)]));
}

#[tokio::test]
async fn a_missing_key_column_fails_naming_it_and_writes_nothing() {
    let fixture = sql_catalog();
    let table = "cdc.missing_key";
    let keyed = ChangeConfig::new(["account"], OperationColumn::new("op"));
    let options = options(&fixture.config, table).changes(keyed).build().unwrap();
    let err = write_all(options, vec![change_batch(&[(Some(1), Some("c"), 10)])])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("the key column \"account\""), "{err}");
    assert!(
        fixture.readers.try_read(Reader::Java, table).is_none(),
        "no table is left"
    );
}

#[tokio::test]
async fn tables_upsert_mode_cannot_write_are_refused_naming_the_reason() {
    let fixture = sql_catalog();
    // A partitioned table: its deletes would have to reach every partition.
    let table = "cdc.partitioned";
    let partitioned = options(&fixture.config, table)
        .table_options(
            TableCreateOptions::builder()
                .partition_field("bucket(4, id)")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    write_all(partitioned, vec![events(0..3, "eu")]).await.unwrap();
    let upsert = options(&fixture.config, table).changes(by_id()).build().unwrap();
    let err = write_all(upsert, vec![change_batch(&[(Some(1), Some("u"), 1)])])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SchemaIncompatible, "{err}");
    assert!(
        err.to_string().contains("cdc.partitioned") && err.to_string().contains("partitioned"),
        "{err}"
    );

    // An optional key column, as an append-only sink created it.
    let table = "cdc.optional_key";
    let plain = options(&fixture.config, table).build().unwrap();
    let nullable_ids = batch(vec![(Field::new("id", DataType::Int64, true), ids(3))]);
    write_all(plain, vec![nullable_ids]).await.unwrap();
    let upsert = options(&fixture.config, table).changes(by_id()).build().unwrap();
    let err = write_all(upsert, vec![change_batch(&[(Some(1), Some("u"), 1)])])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("the key column \"id\" is optional"),
        "{err}"
    );
    let read = fixture.readers.read(Reader::Java, table);
    assert_eq!(read["row_count"], 3, "nothing was written");
}
