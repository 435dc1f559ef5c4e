//! Write dispositions: append, empty, truncate (atomic, watched by a concurrent reader).

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, StringArray};
use outflow_bigquery::{FieldType, StreamType, TableField, TableSchema, WriteMethod};
use outflow_core::{ErrorKind, Sink, WriteDisposition};

use crate::common::*;

#[tokio::test]
async fn append_adds_to_the_rows_already_there() {
    let ctx = Ctx::new().await;
    let options = ctx.options("t").schema(id_name_schema()).build().unwrap();
    write_all(options.clone(), vec![id_name(0..3)]).await;
    write_all(options, vec![id_name(3..5)]).await;
    assert_eq!(ctx.ids("t"), [0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn empty_refuses_a_table_with_rows_and_writes_nothing() {
    let ctx = Ctx::new().await;
    let options = ctx
        .options("t")
        .schema(id_name_schema())
        .write_disposition(WriteDisposition::Empty)
        .build()
        .unwrap();
    // Missing, then created: empty, so the rows go in.
    write_all(options.clone(), vec![id_name(0..2)]).await;
    assert_eq!(ctx.ids("t"), [0, 1]);
    // Now it holds rows: refused before anything is written.
    let mut s = sink(options.clone()).await;
    let err = s.write(id_name(10..12)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.to_string().contains("holds rows"), "{err}");
    assert_eq!(ctx.ids("t"), [0, 1]);
    // An existing empty table is fine.
    ctx.create("other", &id_name_schema()).await;
    let other = ctx
        .options("other")
        .schema(id_name_schema())
        .write_disposition(WriteDisposition::Empty)
        .build()
        .unwrap();
    write_all(other, vec![id_name(5..6)]).await;
    assert_eq!(ctx.ids("other"), [5]);
}

fn tagged(tag: &str, ids: std::ops::Range<i64>) -> arrow_array::RecordBatch {
    let n = ids.end - ids.start;
    batch(vec![
        (
            "id",
            false,
            Arc::new(Int64Array::from_iter_values(ids)) as ArrayRef,
        ),
        ("tag", true, Arc::new(StringArray::from(vec![tag; n as usize]))),
    ])
}

fn tagged_schema() -> TableSchema {
    TableSchema::new(vec![
        TableField::new("id", FieldType::Int64).required(),
        TableField::new("tag", FieldType::String),
    ])
}

#[tokio::test]
async fn truncate_replaces_the_rows_atomically() {
    let ctx = Ctx::new().await;
    let old = || vec![tagged("a", 0..20), tagged("a", 20..40), tagged("a", 40..50)];
    let new = || vec![tagged("b", 100..110), tagged("b", 110..130)];
    let options = |method: WriteMethod| {
        ctx.options("t")
            .schema(tagged_schema())
            .write_method(method)
            .write_disposition(WriteDisposition::Truncate)
            .build()
            .unwrap()
    };
    write_all(options(WriteMethod::AtLeastOnce), old()).await;
    assert_eq!(ctx.ids("t"), (0..50).collect::<Vec<_>>());

    // A reader counts rows per tag again and again while the table is replaced back and
    // forth, each replacement written in several batches.
    let sql = format!(
        "SELECT tag, COUNT(*) AS n FROM `{}` GROUP BY tag ORDER BY tag",
        ctx.full("t")
    );
    let poller = ctx.env.poll(&sql, 240);
    poller.wait_for(1, Duration::from_secs(30));
    for round in 0..4 {
        let (method, batches) = if round % 2 == 0 {
            (WriteMethod::ExactlyOnce, new())
        } else {
            (WriteMethod::AtLeastOnce, old())
        };
        let result = write_all(options(method), batches).await;
        assert!(result.failed.is_empty(), "{:?}", result.failed);
        let seen = poller.results_so_far();
        poller.wait_for(seen + 2, Duration::from_secs(30));
    }
    let observations = poller.stop();
    assert!(
        observations.len() >= 8,
        "the reader looked {} times",
        observations.len()
    );
    let (mut saw_a, mut saw_b) = (0, 0);
    for o in &observations {
        assert!(o.get("error").is_none(), "the reader failed during a swap: {o}");
        let rows = o["rows"].as_array().unwrap();
        match rows.as_slice() {
            [r] if r["tag"] == "a" && r["n"] == 50 => saw_a += 1,
            [r] if r["tag"] == "b" && r["n"] == 30 => saw_b += 1,
            _ => panic!("a reader saw a mix or a partial table: {o}"),
        }
    }
    assert!(saw_a > 0 && saw_b > 0, "a: {saw_a}, b: {saw_b}");
    // The last round wrote the old rows back; no staging table is left behind.
    assert_eq!(ctx.ids("t"), (0..50).collect::<Vec<_>>());
    assert_eq!(ctx.list().await, ["t"]);
    // The schema survives (the emulator's copy job relaxes REQUIRED columns, which the
    // service does not do, so the modes are not compared here).
    let columns: Vec<String> = ctx
        .columns("t")
        .iter()
        .map(|c| c.rsplit_once(' ').unwrap().0.to_string())
        .collect();
    assert_eq!(columns, ["id INT64", "tag STRING"]);
}

#[tokio::test]
async fn truncate_swaps_at_each_flush_and_pending_rows_wait_for_it() {
    let ctx = Ctx::new().await;
    ctx.create("t", &tagged_schema()).await;
    write_all(
        ctx.options("t").schema(tagged_schema()).build().unwrap(),
        vec![tagged("a", 0..5)],
    )
    .await;
    let options = ctx
        .options("t")
        .schema(tagged_schema())
        .stream_type(StreamType::Pending)
        .write_disposition(WriteDisposition::Truncate)
        .build()
        .unwrap();
    let mut s = sink(options).await;
    s.write(tagged("b", 10..13)).await.unwrap();
    assert_eq!(ctx.ids("t"), [0, 1, 2, 3, 4], "nothing visible before the flush");
    s.flush().await.unwrap();
    assert_eq!(ctx.ids("t"), [10, 11, 12]);
    s.write(tagged("b", 13..15)).await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(
        ctx.ids("t"),
        [10, 11, 12, 13, 14],
        "the second flush holds every row written"
    );
    let result = s.close().await.unwrap();
    assert_eq!(result.rows_written(), 5);
    assert_eq!(ctx.list().await, ["t"]);
}
