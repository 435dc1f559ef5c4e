//! Schema update options: field addition and relaxation, with and without them, and
//! `ignore_unknown_values`. Nested additions are not tested here: the emulator answers a
//! tables.patch adding a field inside a RECORD with 200 and leaves the schema unchanged; the
//! patch Outflow sends for one is checked by `admin::tests::nested_addition_and_relaxation_make_one_patch`,
//! and Outflow's check of the answer (which turns the emulator's silent no-op into an error)
//! by `types::tests::evolution_keeps_existing_attributes_and_appends`.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, StringArray};
use outflow_bigquery::{FieldType, TableField, TableSchema, WriteMethod};
use outflow_core::{SchemaEvolutionOption, Sink};

use crate::common::*;

fn must_schema() -> TableSchema {
    TableSchema::new(vec![
        TableField::new("id", FieldType::Int64).required(),
        TableField::new("must", FieldType::String).required(),
    ])
}

fn rows(ids: &[i64], must: Vec<Option<&str>>, extra: Option<Vec<Option<&str>>>) -> arrow_array::RecordBatch {
    let mut columns = vec![
        ("id", false, Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef),
        ("must", true, Arc::new(StringArray::from(must)) as ArrayRef),
    ];
    if let Some(extra) = extra {
        columns.push(("extra", true, Arc::new(StringArray::from(extra))));
    }
    batch(columns)
}

#[tokio::test]
async fn field_addition_adds_nullable_columns_before_the_rows_that_need_them() {
    let ctx = Ctx::new().await;
    for method in [WriteMethod::ExactlyOnce, WriteMethod::AtLeastOnce] {
        let table = format!("t_{method:?}").to_lowercase();
        let options = ctx
            .options(&table)
            .schema(must_schema())
            .write_method(method)
            .schema_evolution(evolution(&[SchemaEvolutionOption::AllowFieldAddition]))
            .build()
            .unwrap();
        let mut s = sink(options).await;
        // The first batch fits the table; the second brings a new column, on the same stream.
        s.write(rows(&[1], vec![Some("a")], None)).await.unwrap();
        s.write(rows(
            &[2, 3],
            vec![Some("b"), Some("c")],
            Some(vec![Some("x"), None]),
        ))
        .await
        .unwrap();
        let result = s.close().await.unwrap();
        assert!(result.failed.is_empty(), "{:?}", result.failed);
        assert_eq!(
            ctx.columns(&table),
            [
                "id INT64 REQUIRED",
                "must STRING REQUIRED",
                "extra STRING NULLABLE"
            ]
        );
        // The same through tables.get (the API's own spelling of the types).
        let fields = ctx.get(&table).await.unwrap().schema.unwrap().fields;
        let got: Vec<_> = fields
            .iter()
            .map(|f| (f.name.as_str(), f.r#type.as_str(), f.mode.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("id", "INTEGER", "REQUIRED"),
                ("must", "STRING", "REQUIRED"),
                ("extra", "STRING", "NULLABLE")
            ]
        );
        let read = ctx.rows(&table);
        let mut extras: Vec<_> = read
            .iter()
            .map(|r| (r["id"].as_i64().unwrap(), r["extra"].clone()))
            .collect();
        extras.sort_by_key(|(id, _)| *id);
        assert_eq!(
            extras,
            [
                (1, serde_json::Value::Null),
                (2, "x".into()),
                (3, serde_json::Value::Null)
            ],
            "{method:?}"
        );
    }
}

#[tokio::test]
async fn without_field_addition_unknown_columns_fail_their_rows_with_a_reason() {
    let ctx = Ctx::new().await;
    let options = ctx.options("t").schema(must_schema()).build().unwrap();
    let result = write_all(
        options,
        vec![
            rows(&[1], vec![Some("a")], None),
            rows(&[2, 3], vec![Some("b"), Some("c")], Some(vec![Some("x"), None])),
        ],
    )
    .await;
    assert_eq!(result.rows_written(), 1);
    let failed: Vec<_> = result.failed.iter().map(|f| f.index.unwrap()).collect();
    assert_eq!(failed, [1, 2]);
    let f = &result.failed[0];
    assert_eq!(f.destination, ctx.full("t"));
    assert!(
        f.reason
            .contains("extra: the table has no such column and field addition is not allowed"),
        "{}",
        f.reason
    );
    assert_eq!(f.record.as_ref().unwrap()["extra"], "x");
    assert_eq!(
        ctx.columns("t"),
        ["id INT64 REQUIRED", "must STRING REQUIRED"],
        "nothing was added"
    );
    assert_eq!(ctx.ids("t"), [1]);
}

#[tokio::test]
async fn ignore_unknown_values_drops_unknown_columns_on_purpose() {
    let ctx = Ctx::new().await;
    let options = ctx
        .options("t")
        .schema(must_schema())
        .ignore_unknown_values(true)
        .build()
        .unwrap();
    let result = write_all(
        options,
        vec![rows(
            &[2, 3],
            vec![Some("b"), Some("c")],
            Some(vec![Some("x"), None]),
        )],
    )
    .await;
    assert!(result.failed.is_empty(), "{:?}", result.failed);
    assert_eq!(ctx.columns("t"), ["id INT64 REQUIRED", "must STRING REQUIRED"]);
    assert_eq!(ctx.ids("t"), [2, 3]);
}

#[tokio::test]
async fn field_relaxation_makes_required_columns_nullable_when_rows_need_it() {
    let ctx = Ctx::new().await;
    let options = ctx
        .options("t")
        .schema(must_schema())
        .schema_evolution(evolution(&[SchemaEvolutionOption::AllowFieldRelaxation]))
        .build()
        .unwrap();
    let mut s = sink(options).await;
    // No null: nothing changes.
    s.write(rows(&[1], vec![Some("a")], None)).await.unwrap();
    assert_eq!(ctx.columns("t"), ["id INT64 REQUIRED", "must STRING REQUIRED"]);
    // A null in `must`: relaxed, then the rows are written.
    s.write(rows(&[2, 3], vec![None, Some("c")], None)).await.unwrap();
    assert_eq!(ctx.columns("t"), ["id INT64 REQUIRED", "must STRING NULLABLE"]);
    assert_eq!(
        ctx.get("t").await.unwrap().schema.unwrap().fields[1].mode,
        "NULLABLE"
    );
    // Rows without the column at all are fine now too.
    s.write(batch(vec![(
        "id",
        false,
        Arc::new(Int64Array::from(vec![4])) as ArrayRef,
    )]))
    .await
    .unwrap();
    let result = s.close().await.unwrap();
    assert!(result.failed.is_empty(), "{:?}", result.failed);
    assert_eq!(ctx.ids("t"), [1, 2, 3, 4]);
    let nulls = ctx.rows("t").iter().filter(|r| r["must"].is_null()).count();
    assert_eq!(nulls, 2);
}

#[tokio::test]
async fn relaxation_for_a_missing_column_is_made_before_the_rows() {
    let ctx = Ctx::new().await;
    let options = ctx
        .options("t")
        .schema(must_schema())
        .write_method(WriteMethod::AtLeastOnce)
        .schema_evolution(evolution(&[SchemaEvolutionOption::AllowFieldRelaxation]))
        .build()
        .unwrap();
    let lacking = batch(vec![(
        "id",
        false,
        Arc::new(Int64Array::from(vec![7, 8])) as ArrayRef,
    )]);
    let result = write_all(options, vec![lacking]).await;
    assert!(result.failed.is_empty(), "{:?}", result.failed);
    assert_eq!(ctx.columns("t"), ["id INT64 REQUIRED", "must STRING NULLABLE"]);
    assert_eq!(ctx.ids("t"), [7, 8]);
}

#[tokio::test]
async fn without_relaxation_rows_holding_nulls_fail_alone() {
    let ctx = Ctx::new().await;
    let options = ctx.options("t").schema(must_schema()).build().unwrap();
    let mut s = sink(options).await;
    s.write(rows(&[1, 2, 3], vec![Some("a"), None, Some("c")], None))
        .await
        .unwrap();
    // A batch without the required column: every row fails, nothing is half-written.
    s.write(batch(vec![(
        "id",
        false,
        Arc::new(Int64Array::from(vec![4, 5])) as ArrayRef,
    )]))
    .await
    .unwrap();
    let result = s.close().await.unwrap();
    let failed: Vec<_> = result
        .failed
        .iter()
        .map(|f| (f.index.unwrap(), f.reason.clone()))
        .collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert_eq!(failed[0].0, 1);
    assert!(
        failed[0]
            .1
            .starts_with("must: required in the table, but the input holds 1 null"),
        "{}",
        failed[0].1
    );
    assert_eq!((failed[1].0, failed[2].0), (3, 4));
    assert!(
        failed[1]
            .1
            .contains("must: required in the table, but the input lacks the column"),
        "{}",
        failed[1].1
    );
    assert_eq!(ctx.columns("t"), ["id INT64 REQUIRED", "must STRING REQUIRED"]);
    assert_eq!(ctx.ids("t"), [1, 3]);
}
