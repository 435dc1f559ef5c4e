//! Creating and reconciling tables.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, StringArray};
use outflow_bigtable::{ColumnFamily, ColumnMapping, GcRule, RowKey, TableCreateOptions, ValueType};
use outflow_core::{CreateDisposition, ErrorKind, PlannedAction, Sink};
use serde_json::json;

use crate::common::*;

fn days(n: u64) -> Duration {
    Duration::from_secs(n * 86_400)
}

/// Every GC rule shape, nested, and every value type.
fn every_shape() -> TableCreateOptions {
    TableCreateOptions::builder()
        .column_family(ColumnFamily::new("plain"))
        .column_family(ColumnFamily::new("versions").with_gc_rule(GcRule::MaxVersions(3)))
        .column_family(ColumnFamily::new("age").with_gc_rule(GcRule::MaxAge(days(7))))
        .column_family(ColumnFamily::new("either").with_gc_rule(GcRule::Union(vec![
            GcRule::MaxVersions(10),
            GcRule::Intersection(vec![GcRule::MaxAge(days(30)), GcRule::MaxVersions(1)]),
        ])))
        .column_family(ColumnFamily::new("both").with_gc_rule(GcRule::Intersection(vec![
            GcRule::MaxAge(Duration::from_millis(1500)),
            GcRule::MaxVersions(2),
        ])))
        .column_family(ColumnFamily::new("total").with_value_type(ValueType::Sum))
        .column_family(
            ColumnFamily::new("low")
                .with_value_type(ValueType::Min)
                .with_gc_rule(GcRule::MaxVersions(1)),
        )
        .column_family(
            ColumnFamily::new("high")
                .with_value_type(ValueType::Max)
                .with_gc_rule(GcRule::MaxAge(days(1))),
        )
        .column_family(ColumnFamily::new("distinct").with_value_type(ValueType::HyperLogLog))
        .build()
        .unwrap()
}

#[tokio::test]
async fn creates_every_gc_rule_shape_and_value_type() {
    let client = client().await;
    let table = table_name("shapes");
    let options = every_shape();
    let plan = client
        .ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&options))
        .await
        .unwrap();
    assert_eq!(plan.action, PlannedAction::Create);
    assert_eq!(plan.details.len(), 9, "{plan:?}");

    // Through the admin API (GetTable), converted back to Outflow's types.
    let described = client
        .describe_table(&table)
        .await
        .unwrap()
        .expect("the table exists");
    assert_eq!(described.families.len(), 9);
    for declared in options.column_families() {
        let actual = described.family(declared.name()).unwrap();
        assert_eq!(actual.gc_rule.as_ref(), declared.gc_rule(), "{}", declared.name());
        assert_eq!(
            actual.value_type,
            Some(declared.value_type()),
            "{}",
            declared.name()
        );
    }

    // Independently, through Google's Python client.
    let read = python(&table);
    assert_eq!(
        read["families"],
        json!({
            "plain": {"gc_rule": null, "value_type": "raw"},
            "versions": {"gc_rule": {"max_versions": 3}, "value_type": "raw"},
            "age": {"gc_rule": {"max_age": "604800s"}, "value_type": "raw"},
            "either": {"gc_rule": {"union": [
                {"max_versions": 10},
                {"intersection": [{"max_age": "2592000s"}, {"max_versions": 1}]}
            ]}, "value_type": "raw"},
            "both": {"gc_rule": {"intersection": [{"max_age": "1.5s"}, {"max_versions": 2}]}, "value_type": "raw"},
            "total": {"gc_rule": null, "value_type": "sum"},
            "low": {"gc_rule": {"max_versions": 1}, "value_type": "min"},
            "high": {"gc_rule": {"max_age": "86400s"}, "value_type": "max"},
            "distinct": {"gc_rule": null, "value_type": "hll"},
        })
    );
    assert_eq!(read["rows"], json!([]));

    // Preparing again changes nothing.
    let again = client
        .ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&options))
        .await
        .unwrap();
    assert_eq!(again.action, PlannedAction::Unchanged);
}

#[tokio::test]
async fn missing_families_are_added_and_existing_ones_left_alone() {
    let client = client().await;
    let table = table_name("reconcile");
    let first = TableCreateOptions::builder()
        .raw_family("kept", Some(GcRule::MaxVersions(1)))
        .raw_family("shared", Some(GcRule::MaxVersions(5)))
        .build()
        .unwrap();
    client
        .ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&first))
        .await
        .unwrap();

    // The second declaration omits "kept", gives "shared" another rule, and adds two
    // families, one an aggregate (so existing types are checked too).
    let second = TableCreateOptions::builder()
        .raw_family("shared", Some(GcRule::MaxAge(days(1))))
        .column_family(ColumnFamily::new("counts").with_value_type(ValueType::Sum))
        .raw_family("extra", Some(GcRule::MaxVersions(2)))
        .build()
        .unwrap();
    let plan = client
        .plan_table(&table, CreateDisposition::CreateIfNeeded, Some(&second))
        .await
        .unwrap();
    assert_eq!(plan.action, PlannedAction::Update);
    assert_eq!(
        plan.details,
        [
            "add family counts (sum, no gc rule)",
            "add family extra (raw, gc max_versions=2)"
        ]
    );
    assert!(
        client
            .describe_table(&table)
            .await
            .unwrap()
            .unwrap()
            .family("counts")
            .is_none(),
        "planning changes nothing"
    );

    let done = client
        .ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&second))
        .await
        .unwrap();
    assert_eq!(done.action, PlannedAction::Update);
    assert_eq!(done.details.len(), 2);

    let read = python(&table);
    assert_eq!(
        read["families"],
        json!({
            "kept": {"gc_rule": {"max_versions": 1}, "value_type": "raw"},
            "shared": {"gc_rule": {"max_versions": 5}, "value_type": "raw"},
            "counts": {"gc_rule": null, "value_type": "sum"},
            "extra": {"gc_rule": {"max_versions": 2}, "value_type": "raw"},
        }),
        "nothing dropped, the existing rule untouched, the new families created"
    );
}

#[tokio::test]
async fn a_raw_family_declared_as_an_aggregate_fails_before_any_write() {
    let client = client().await;
    let table = table_name("mismatch");
    let existing = TableCreateOptions::builder()
        .raw_family("counts", None)
        .build()
        .unwrap();
    client
        .ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&existing))
        .await
        .unwrap();

    let declared = TableCreateOptions::builder()
        .column_family(ColumnFamily::new("counts").with_value_type(ValueType::Sum))
        .raw_family("extra", None)
        .build()
        .unwrap();
    let plan = client
        .plan_table(&table, CreateDisposition::CreateIfNeeded, Some(&declared))
        .await
        .unwrap();
    assert_eq!(plan.action, PlannedAction::Fail);

    let mut sink = open(
        sink(&table)
            .table_options(declared)
            .row_key(RowKey::field("id"))
            .columns(ColumnMapping::family("counts")),
    )
    .await;
    let rows = batch(vec![
        ("id", Arc::new(StringArray::from(vec!["a"]))),
        ("n", Arc::new(Int64Array::from(vec![1]))),
    ]);
    let err = sink.write(rows).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SchemaIncompatible);
    assert_eq!(err.context_value("family"), Some("counts"));
    assert!(
        err.to_string().contains(&format!(
            "column family \"counts\" is declared sum but table {table} has it as raw"
        )),
        "{err}"
    );
    let read = python(&table);
    assert_eq!(read["rows"], json!([]), "no row was written");
    assert_eq!(
        read["families"],
        json!({"counts": {"gc_rule": null, "value_type": "raw"}}),
        "not even the missing family was added"
    );
}

#[tokio::test]
async fn raw_only_options_check_names_only() {
    let client = client().await;
    let table = table_name("names");
    let existing = TableCreateOptions::builder()
        .column_family(
            ColumnFamily::new("counts")
                .with_value_type(ValueType::Sum)
                .with_gc_rule(GcRule::MaxVersions(1)),
        )
        .build()
        .unwrap();
    client
        .ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&existing))
        .await
        .unwrap();
    let raw_only = TableCreateOptions::builder()
        .raw_family("counts", Some(GcRule::MaxAge(days(3))))
        .build()
        .unwrap();
    let plan = client
        .ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&raw_only))
        .await
        .unwrap();
    assert_eq!(plan.action, PlannedAction::Unchanged);
    assert_eq!(
        python(&table)["families"],
        json!({"counts": {"gc_rule": {"max_versions": 1}, "value_type": "sum"}})
    );
}

#[tokio::test]
async fn concurrent_preparation_succeeds_for_every_writer() {
    let table = table_name("race");
    // Eight writers with their own connections prepare the same missing table at once.
    // All declare "base"; each also declares a family of its own and one it shares with
    // its neighbour, so creations and additions collide.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let table = table.clone();
        tasks.push(tokio::spawn(async move {
            let client = client().await;
            let options = TableCreateOptions::builder()
                .raw_family("base", Some(GcRule::MaxVersions(1)))
                .column_family(ColumnFamily::new(format!("own{i}")).with_value_type(ValueType::Sum))
                .raw_family(format!("pair{}", i / 2), None)
                .build()
                .unwrap();
            client
                .ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&options))
                .await
        }));
    }
    let mut actions = Vec::new();
    for task in tasks {
        actions.push(
            task.await
                .unwrap()
                .expect("every writer's preparation succeeds")
                .action,
        );
    }
    assert_eq!(
        actions.iter().filter(|a| **a == PlannedAction::Create).count(),
        1,
        "{actions:?}"
    );
    let families = python(&table)["families"].clone();
    let mut names: Vec<&String> = families.as_object().unwrap().keys().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "base", "own0", "own1", "own2", "own3", "own4", "own5", "own6", "own7", "pair0", "pair1",
            "pair2", "pair3"
        ]
    );
    assert_eq!(families["own5"]["value_type"], "sum");
}

#[tokio::test]
async fn create_never_fails_on_a_missing_table_naming_it() {
    let table = table_name("absent");
    let mut sink = open(
        sink(&table)
            .create_disposition(CreateDisposition::CreateNever)
            .row_key(RowKey::field("id"))
            .columns(ColumnMapping::family("cf")),
    )
    .await;
    let rows = batch(vec![("id", Arc::new(StringArray::from(vec!["a"])))]);
    let err = sink.write(rows).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(
        err.to_string()
            .contains(&format!("tables/{table} does not exist")),
        "{err}"
    );
    assert!(err.to_string().contains("create_never"), "{err}");
    let client = client().await;
    assert!(
        client.describe_table(&table).await.unwrap().is_none(),
        "nothing was created"
    );
    let plan = client
        .plan_table(&table, CreateDisposition::CreateNever, None)
        .await
        .unwrap();
    assert_eq!(plan.action, PlannedAction::Fail);
}

#[tokio::test]
async fn planning_a_missing_table_creates_nothing() {
    let client = client().await;
    let table = table_name("plan");
    let plan = client
        .plan_table(&table, CreateDisposition::CreateIfNeeded, Some(&every_shape()))
        .await
        .unwrap();
    assert_eq!(plan.action, PlannedAction::Create);
    assert_eq!(plan.details[1], "create family versions (raw, gc max_versions=3)");
    assert!(client.describe_table(&table).await.unwrap().is_none());
}

#[tokio::test]
async fn an_options_file_in_the_form_before_types_creates_raw_families() {
    let client = client().await;
    let table = table_name("oldform");
    let path = std::env::temp_dir().join(format!("{table}.yaml"));
    std::fs::write(
        &path,
        "column_families:\n  events: {max_age: 7d}\n  profile: null\n",
    )
    .unwrap();
    let options = TableCreateOptions::from_file(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    client
        .ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&options))
        .await
        .unwrap();
    assert_eq!(
        python(&table)["families"],
        json!({
            "events": {"gc_rule": {"max_age": "604800s"}, "value_type": "raw"},
            "profile": {"gc_rule": null, "value_type": "raw"},
        })
    );
}
