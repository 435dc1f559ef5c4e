//! What aborting a sink (a failed or interrupted run) leaves: Bigtable applies rows as they
//! are acknowledged, so they stay and the abort says how many; a table the sink created
//! that no row reached is deleted; a table that existed before is never deleted. Tables are
//! listed and read with Google's Python client.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use outflow_bigtable::{Batching, ColumnMapping, RowKey, TableCreateOptions};
use outflow_core::{CreateDisposition, PrepareDestination, Sink};
use outflow_testkit::bigtable::python_tables;

use crate::common::*;

fn families() -> TableCreateOptions {
    TableCreateOptions::builder()
        .raw_family("cf", None)
        .build()
        .unwrap()
}

/// Rows `k{i}` with one value each.
fn rows(ids: std::ops::Range<usize>) -> RecordBatch {
    let keys: Vec<String> = ids.clone().map(|i| format!("k{i}")).collect();
    let values: Vec<String> = ids.map(|i| format!("v{i}")).collect();
    batch(vec![
        ("id", Arc::new(StringArray::from(keys)) as ArrayRef),
        ("v", Arc::new(StringArray::from(values))),
    ])
}

/// Options for `table`, sending a request every `entries` rows.
fn options(table: &str, entries: usize) -> outflow_bigtable::BigtableSinkOptionsBuilder {
    sink(table)
        .table_options(families())
        .row_key(RowKey::field("id"))
        .columns(ColumnMapping::family("cf"))
        .batching(Batching::new().with_max_entries(entries))
}

fn tables() -> Vec<String> {
    python_tables(&host(), PROJECT, INSTANCE)
}

#[tokio::test]
async fn a_created_table_no_row_reached_is_deleted() {
    let table = table_name("unsent");
    let prepared = table_name("prepared");
    // Rows wait for a full request of 100: none is sent before the abort.
    let mut s = open(options(&table, 100)).await;
    s.write(rows(0..3)).await.unwrap();
    s.preparer()
        .prepare(&prepared, &rows(0..1).schema())
        .await
        .unwrap();
    let before = tables();
    assert!(
        before.contains(&table) && before.contains(&prepared),
        "{before:?}"
    );

    let aborted = s.abort().await;
    let mut expected = vec![table.clone(), prepared.clone()];
    expected.sort();
    assert_eq!(aborted.removed_tables, expected);
    assert_eq!(aborted.discarded_rows, 3);
    assert!(aborted.left.is_empty(), "{aborted:?}");
    let after = tables();
    assert!(!after.contains(&table) && !after.contains(&prepared), "{after:?}");
    let said = aborted.describe().unwrap();
    assert!(said.contains("removed tables"), "{said}");
    assert!(said.contains(&table) && said.contains(&prepared), "{said}");
    assert!(
        s.write(rows(3..4)).await.is_err(),
        "an aborted sink writes no more"
    );
}

#[tokio::test]
async fn a_created_table_rows_reached_stays_and_the_abort_says_how_many() {
    let table = table_name("applied");
    // A request every 2 rows: 4 rows are applied, the fifth waits and is discarded.
    let mut s = open(options(&table, 2)).await;
    s.write(rows(0..5)).await.unwrap();
    let aborted = s.abort().await;
    assert!(aborted.removed_tables.is_empty(), "{aborted:?}");
    assert_eq!(aborted.discarded_rows, 1);
    assert_eq!(
        aborted.left,
        [format!(
            "table {table} (created by this run) keeps 4 rows applied before the run stopped"
        )]
    );
    assert_eq!(py_keys(&python(&table)), ["k0", "k1", "k2", "k3"]);
}

#[tokio::test]
async fn a_table_that_existed_is_never_deleted() {
    let table = table_name("existing");
    // Empty, as a table the sink created would be: only having existed keeps it.
    client()
        .await
        .ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&families()))
        .await
        .unwrap();
    let mut s = open(options(&table, 100)).await;
    s.write(rows(0..2)).await.unwrap();
    let aborted = s.abort().await;
    assert!(aborted.removed_tables.is_empty(), "{aborted:?}");
    assert!(aborted.left.is_empty(), "{aborted:?}");
    assert!(tables().contains(&table));
    assert_eq!(py_keys(&python(&table)), Vec::<String>::new());
}
