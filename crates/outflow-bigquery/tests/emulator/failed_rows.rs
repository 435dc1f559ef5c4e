//! Rows that cannot be written come back as failed records while the others are written;
//! bad input fails clearly with nothing half-written.

use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder};
use arrow_array::{ArrayRef, Decimal128Array, DurationSecondArray, Int64Array, StringArray, UInt64Array};
use outflow_bigquery::{BigQuerySinkOptions, FieldType, TableField, TableSchema, WriteMethod};
use outflow_core::{ErrorKind, Sink};

use crate::common::*;

fn big_schema() -> TableSchema {
    TableSchema::new(vec![
        TableField::new("id", FieldType::Int64).required(),
        TableField::new("big", FieldType::BigNumeric),
    ])
}

fn bigs(ids: &[i64], values: Vec<i128>) -> arrow_array::RecordBatch {
    let big = Decimal128Array::from(values)
        .with_precision_and_scale(38, 0)
        .unwrap();
    batch(vec![
        ("id", false, Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef),
        ("big", true, Arc::new(big)),
    ])
}

/// Rows the service refuses come back as failed records; the others are written once.
///
/// The refusal used here is the emulator's: its BIGNUMERIC column is DECIMAL(38,18), so it
/// refuses values of 1e20 and more with a row error found before inserting, and then writes
/// nothing of the request, as the service does for any row error. (Errors the emulator only
/// finds while inserting, such as malformed JSON, leave the request's other rows written,
/// unlike the service; Outflow's handling of the service's answer is tested in
/// `sink::tests::refused_rows_fail_and_the_rest_is_sent_again_at_the_same_offset`.)
#[tokio::test]
async fn rows_the_service_rejects_come_back_with_index_and_reason() {
    let ctx = Ctx::new().await;
    let huge = 10i128.pow(25);
    for method in [WriteMethod::ExactlyOnce, WriteMethod::AtLeastOnce] {
        let table = format!("t_{method:?}").to_lowercase();
        let options = ctx
            .options(&table)
            .schema(big_schema())
            .write_method(method)
            .build()
            .unwrap();
        let result = write_all(
            options,
            vec![
                bigs(&[0, 1], vec![1, 2]),
                bigs(&[2, 3, 4, 5], vec![3, huge, 5, huge]),
            ],
        )
        .await;
        let failed: Vec<u64> = result.failed.iter().map(|f| f.index.unwrap()).collect();
        assert_eq!(failed, [3, 5], "{method:?}: {:?}", result.failed);
        for f in &result.failed {
            assert_eq!(f.destination, ctx.full(&table));
            assert!(
                f.reason.to_ascii_lowercase().contains("bignumeric"),
                "{}",
                f.reason
            );
            assert_eq!(f.record.as_ref().unwrap()["id"], f.index.unwrap());
        }
        assert_eq!(result.rows_written(), 4);
        assert_eq!(ctx.ids(&table), [0, 1, 2, 4], "{method:?}");
    }
}

#[tokio::test]
async fn rows_over_the_request_limit_are_refused_up_front_and_requests_split() {
    let ctx = Ctx::new().await;
    let schema = TableSchema::new(vec![
        TableField::new("id", FieldType::Int64).required(),
        TableField::new("s", FieldType::String),
    ]);
    let limit = 64 * 1024;
    let options = ctx
        .options("t")
        .schema(schema)
        .max_request_bytes(limit)
        .build()
        .unwrap();
    let n = 2_000;
    let mut values: Vec<String> = (0..n).map(|i| format!("{i:0>100}")).collect();
    values[1_500] = "x".repeat(100_000);
    let input = batch(vec![
        (
            "id",
            false,
            Arc::new(Int64Array::from_iter_values(0..n as i64)) as ArrayRef,
        ),
        ("s", true, Arc::new(StringArray::from(values))),
    ]);
    let result = write_all(options, vec![input]).await;
    assert_eq!(result.failed.len(), 1);
    let f = &result.failed[0];
    assert_eq!(f.index, Some(1_500));
    assert!(
        f.reason.contains("over the request limit of 65536 bytes"),
        "{}",
        f.reason
    );
    let stats = &result.destinations[&ctx.full("t")];
    assert_eq!(stats.rows, n as u64 - 1);
    // About 220 KB of rows under a 64 KiB limit: several requests.
    assert!(stats.commits >= 4, "{} requests", stats.commits);
    assert!(stats.bytes / stats.commits <= limit as u64);
    assert_eq!(ctx.ids("t").len(), n - 1);
}

#[tokio::test]
async fn unsupported_arrow_types_are_rejected_naming_the_column() {
    let ctx = Ctx::new().await;
    let options = ctx.options("t").schema(id_name_schema()).build().unwrap();
    for (column, array) in [
        ("big", Arc::new(UInt64Array::from(vec![1u64])) as ArrayRef),
        (
            "wait",
            Arc::new(DurationSecondArray::from(vec![5i64])) as ArrayRef,
        ),
    ] {
        let mut s = sink(options.clone()).await;
        let input = batch(vec![
            ("id", false, Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            (column, true, array),
        ]);
        let err = s.write(input).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        assert_eq!(err.context_value("column"), Some(column), "{err}");
    }
    // Arrays of arrays have no BigQuery type either.
    let mut inner = ListBuilder::new(ListBuilder::new(Int64Builder::new()));
    inner.values().values().append_value(1);
    inner.values().append(true);
    inner.append(true);
    let nested = inner.finish();
    let input = batch(vec![
        ("id", false, Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ("ll", true, Arc::new(nested)),
    ]);
    let err = sink(options).await.write(input).await.unwrap_err();
    assert_eq!(err.context_value("column"), Some("ll"), "{err}");
    assert!(ctx.ids("t").is_empty(), "nothing was written");
}

#[tokio::test]
async fn null_array_elements_fail_their_rows() {
    let ctx = Ctx::new().await;
    let schema = TableSchema::new(vec![
        TableField::new("id", FieldType::Int64).required(),
        TableField::new("xs", FieldType::Int64).repeated(),
    ]);
    let mut xs = ListBuilder::new(Int64Builder::new());
    xs.values().append_value(1);
    xs.append(true);
    xs.values().append_null();
    xs.append(true);
    xs.append(false);
    let input = batch(vec![
        ("id", false, Arc::new(Int64Array::from(vec![0, 1, 2])) as ArrayRef),
        ("xs", true, Arc::new(xs.finish())),
    ]);
    let result = write_all(ctx.options("t").schema(schema).build().unwrap(), vec![input]).await;
    assert_eq!(result.failed.len(), 1);
    assert_eq!(result.failed[0].index, Some(1));
    assert!(
        result.failed[0]
            .reason
            .contains("column xs: a REPEATED column cannot hold a NULL element")
    );
    assert_eq!(ctx.ids("t"), [0, 2]);
}

#[tokio::test]
async fn malformed_table_names_and_missing_schemas_fail_before_any_request() {
    let ctx = Ctx::new().await;
    let err = ctx
        .options("bad-name!")
        .schema(id_name_schema())
        .build()
        .unwrap_err();
    assert_eq!(err.context_value("field"), Some("table"));
    assert!(err.to_string().contains("bad-name!"), "{err}");
    let err = ctx.options("t").build().unwrap_err();
    assert_eq!(err.context_value("field"), Some("schema"));
    let err = serde_yaml_ng::from_str::<BigQuerySinkOptions>("table: p.d.t\n").unwrap_err();
    assert!(err.to_string().contains("create_if_needed"), "{err}");
    // A template filled with a value no table name may take: that row fails, naming the
    // field, and the others go.
    let schema = TableSchema::new(vec![
        TableField::new("id", FieldType::Int64).required(),
        TableField::new("k", FieldType::String),
    ]);
    let input = batch(vec![
        ("id", false, Arc::new(Int64Array::from(vec![0, 1])) as ArrayRef),
        ("k", true, Arc::new(StringArray::from(vec!["ok", "no!"]))),
    ]);
    let result = write_all(ctx.options("t_{k}").schema(schema).build().unwrap(), vec![input]).await;
    assert_eq!(result.failed.len(), 1);
    assert_eq!(result.failed[0].destination, "t_{k}");
    assert!(
        result.failed[0]
            .reason
            .starts_with("row 1: field k is \"no!\", which destination template t_{k} cannot put"),
        "{}",
        result.failed[0].reason
    );
    assert_eq!(ctx.ids("t_ok"), [0]);
    assert_eq!(ctx.list().await, ["t_ok"]);
}
