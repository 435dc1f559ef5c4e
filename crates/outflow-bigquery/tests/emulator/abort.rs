//! What aborting a sink (a failed or interrupted run) leaves: a created table none of whose
//! rows became visible is deleted; rows committed or default streams made visible stay,
//! and the abort says how many; a table that existed before is never deleted; pending rows
//! and staging tables go. Every check reads through Google's Python client.

use outflow_bigquery::{BigQuerySinkOptions, StreamType, WriteMethod};
use outflow_core::{PrepareDestination, Sink, WriteDisposition};

use crate::common::*;

/// Options for `table`, created with `id_name_schema()`, written through pending streams.
fn pending(ctx: &Ctx, table: &str) -> BigQuerySinkOptions {
    ctx.options(table)
        .schema(id_name_schema())
        .stream_type(StreamType::Pending)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_created_table_whose_rows_were_never_committed_is_deleted() {
    let ctx = Ctx::new().await;
    let mut s = sink(pending(&ctx, "t")).await;
    s.write(id_name(0..5)).await.unwrap();
    // A second table the preparer created, which no row reached.
    s.preparer().prepare("u", &id_name(0..1).schema()).await.unwrap();
    assert_eq!(ctx.env.tables(&ctx.dataset), ["t", "u"]);

    let aborted = s.abort().await;
    assert_eq!(aborted.removed_tables, [ctx.full("t"), ctx.full("u")]);
    assert_eq!(aborted.discarded_rows, 5);
    assert!(aborted.left.is_empty(), "{aborted:?}");
    assert_eq!(ctx.env.tables(&ctx.dataset), Vec::<String>::new());
    let said = aborted.describe().unwrap();
    assert!(
        said.contains(&format!("removed tables {}, {}", ctx.full("t"), ctx.full("u"))),
        "{said}"
    );
    assert!(said.contains("discarded 5 rows not visible yet"), "{said}");
    assert!(
        s.write(id_name(5..6)).await.is_err(),
        "an aborted sink writes no more"
    );
}

#[tokio::test]
async fn rows_a_committed_or_default_stream_made_visible_stay_and_are_named() {
    for (table, method) in [
        ("committed", WriteMethod::ExactlyOnce),
        ("default", WriteMethod::AtLeastOnce),
    ] {
        let ctx = Ctx::new().await;
        let options = ctx
            .options(table)
            .schema(id_name_schema())
            .write_method(method)
            .build()
            .unwrap();
        let mut s = sink(options).await;
        s.write(id_name(0..3)).await.unwrap();
        let aborted = s.abort().await;
        assert!(aborted.removed_tables.is_empty(), "{aborted:?}");
        assert_eq!(aborted.discarded_rows, 0);
        assert_eq!(
            aborted.left,
            [format!(
                "table {} (created by this run) keeps 3 rows committed before the run stopped",
                ctx.full(table)
            )]
        );
        assert_eq!(ctx.ids(table), [0, 1, 2], "{table}");
    }
}

#[tokio::test]
async fn pending_rows_committed_at_a_flush_stay_and_the_rest_are_discarded() {
    let ctx = Ctx::new().await;
    let mut s = sink(pending(&ctx, "t")).await;
    s.write(id_name(0..2)).await.unwrap();
    s.flush().await.unwrap();
    s.write(id_name(2..5)).await.unwrap();
    let aborted = s.abort().await;
    assert!(aborted.removed_tables.is_empty(), "{aborted:?}");
    assert_eq!(aborted.discarded_rows, 3);
    assert_eq!(
        aborted.left,
        [format!(
            "table {} (created by this run) keeps 2 rows committed before the run stopped",
            ctx.full("t")
        )]
    );
    assert_eq!(ctx.ids("t"), [0, 1]);
}

#[tokio::test]
async fn a_table_that_existed_is_never_deleted() {
    let ctx = Ctx::new().await;
    // Empty, as a table the run created would be: only having existed keeps it.
    ctx.create("old", &id_name_schema()).await;
    let mut s = sink(pending(&ctx, "old")).await;
    s.write(id_name(0..4)).await.unwrap();
    let aborted = s.abort().await;
    assert!(aborted.removed_tables.is_empty(), "{aborted:?}");
    assert!(aborted.left.is_empty(), "{aborted:?}");
    assert_eq!(aborted.discarded_rows, 4);
    assert_eq!(ctx.env.tables(&ctx.dataset), ["old"]);
    assert_eq!(
        ctx.ids("old"),
        Vec::<i64>::new(),
        "pending rows never became visible"
    );
}

#[tokio::test]
async fn a_truncate_that_is_aborted_keeps_the_old_rows_and_deletes_its_staging_table() {
    let ctx = Ctx::new().await;
    ctx.create("t", &id_name_schema()).await;
    write_all(
        ctx.options("t").schema(id_name_schema()).build().unwrap(),
        vec![id_name(0..3)],
    )
    .await;
    let options = ctx
        .options("t")
        .schema(id_name_schema())
        .write_disposition(WriteDisposition::Truncate)
        .build()
        .unwrap();
    let mut s = sink(options).await;
    s.write(id_name(10..15)).await.unwrap();
    assert_eq!(ctx.env.tables(&ctx.dataset).len(), 2, "the staging table");
    let aborted = s.abort().await;
    assert!(aborted.removed_tables.is_empty(), "{aborted:?}");
    assert!(aborted.left.is_empty(), "{aborted:?}");
    assert_eq!(aborted.discarded_rows, 5);
    assert_eq!(ctx.env.tables(&ctx.dataset), ["t"]);
    assert_eq!(ctx.ids("t"), [0, 1, 2]);
}
