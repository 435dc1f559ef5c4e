//! Change data into Bigtable: a generated change stream applied by row key on the
//! emulator, read back by Google's Python client, against the same changes applied to a map.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::StringArray;
use outflow_bigtable::{ChangeDelete, Changes, Column, ColumnMapping, RowKey, TableCreateOptions};
use outflow_core::Sink;
use outflow_core::changes::OperationColumn;

use crate::common::*;

/// One change: key, operation word, value.
type Change = (Option<String>, Option<&'static str>, String);

fn change_batch(changes: &[Change]) -> arrow_array::RecordBatch {
    batch(vec![
        (
            "id",
            Arc::new(StringArray::from(
                changes.iter().map(|c| c.0.clone()).collect::<Vec<_>>(),
            )),
        ),
        (
            "op",
            Arc::new(StringArray::from(changes.iter().map(|c| c.1).collect::<Vec<_>>())),
        ),
        (
            "value",
            Arc::new(StringArray::from(
                changes.iter().map(|c| c.2.clone()).collect::<Vec<_>>(),
            )),
        ),
    ])
}

fn changes_into(table: &str, delete: ChangeDelete) -> outflow_bigtable::BigtableSinkOptionsBuilder {
    sink(table)
        .table_options(
            TableCreateOptions::builder()
                .raw_family("cf", None)
                .build()
                .unwrap(),
        )
        .row_key(RowKey::field("id"))
        .columns(ColumnMapping::explicit([Column::new("value", "cf")]))
        .changes(Changes {
            operation: OperationColumn::new("op"),
            delete,
        })
}

/// `key -> newest cf:value` as the Python client reads the table.
fn read_state(table: &str) -> BTreeMap<String, String> {
    let py = python(table);
    py_keys(&py)
        .into_iter()
        .map(|key| {
            let cells = py_cells(&py, &key, "cf", "value");
            let newest = &cells.first().expect("a cell").1;
            (key, outflow_testkit::bigtable::text_of_hex(newest))
        })
        .collect()
}

#[tokio::test]
async fn a_change_stream_applied_by_row_key_reads_back_exactly() {
    let table = table_name("changes");
    let mut sink = open(changes_into(&table, ChangeDelete::Row)).await;
    let (stream, held) = outflow_testkit::changes::change_stream(0xb16, 10_000, 100_000);
    let key = |k: u64| format!("k{k:05}");
    let changes: Vec<Change> = stream
        .iter()
        .map(|c| (Some(key(c.key)), Some(c.op), format!("v{}", c.value)))
        .collect();
    let state: BTreeMap<String, String> = held.into_iter().map(|(k, v)| (key(k), format!("v{v}"))).collect();
    // Batches of 5,000: keys repeat within a batch and across batches.
    for part in changes.chunks(5_000) {
        sink.write(change_batch(part)).await.unwrap();
    }
    let result = sink.close().await.unwrap();
    assert!(result.failed.is_empty(), "{:?}", result.failed.first());
    assert_eq!(read_state(&table), state);
}

#[tokio::test]
async fn a_delete_then_an_insert_in_one_batch_leaves_the_new_row_and_bad_changes_are_failed_records() {
    let table = table_name("redo");
    let mut sink = open(changes_into(&table, ChangeDelete::Row)).await;
    let row = |key: Option<&str>, op: Option<&'static str>, value: &str| {
        (key.map(str::to_string), op, value.to_string())
    };
    sink.write(change_batch(&[
        row(Some("a"), Some("c"), "1"),
        row(Some("b"), Some("c"), "2"),
    ]))
    .await
    .unwrap();
    sink.write(change_batch(&[
        row(Some("a"), Some("d"), "1"),
        row(Some("a"), Some("c"), "3"),
        row(Some("b"), Some("merge"), "4"),
        row(None, Some("u"), "5"),
        row(Some("b"), Some("d"), "2"),
    ]))
    .await
    .unwrap();
    let result = sink.close().await.unwrap();
    let failed: Vec<(Option<u64>, &str)> = result
        .failed
        .iter()
        .map(|f| (f.index, f.reason.as_str()))
        .collect();
    assert_eq!(
        failed,
        [
            (Some(4), "op: unknown operation \"merge\""),
            (Some(5), "id: the key column is null"),
        ]
    );
    let py = python(&table);
    assert_eq!(py_keys(&py), ["a"]);
    assert_eq!(
        py_cells(&py, "a", "cf", "value").len(),
        1,
        "the old cell went with the row"
    );
    assert_eq!(
        read_state(&table),
        BTreeMap::from([("a".to_string(), "3".to_string())])
    );
}

#[tokio::test]
async fn changes_and_a_delete_marker_together_are_refused_naming_both() {
    let table = table_name("both");
    let err = changes_into(&table, ChangeDelete::Cells)
        .delete_marker("op")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("delete_marker"), "{err}");
}
