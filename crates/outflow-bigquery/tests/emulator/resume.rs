//! Exactly-once across a crash: a writer stops mid-way (dropped, or its task aborted in the
//! middle of a batch) and a new one resumes from the last checkpoint, replaying the input
//! from there in the same batches. Every row lands exactly once.

use std::time::Duration;

use outflow_bigquery::{BigQuerySink, Checkpoint, StreamType};
use outflow_core::Sink;

use crate::common::*;

const BATCH: i64 = 100;
const BATCHES: i64 = 12;

/// Small requests, so every batch takes several appends and a crash can fall between them.
fn options(ctx: &Ctx, table: &str, stream_type: StreamType) -> outflow_bigquery::BigQuerySinkOptions {
    ctx.options(table)
        .schema(id_name_schema())
        .stream_type(stream_type)
        .max_request_bytes(16 * 1024)
        .build()
        .unwrap()
}

fn batches() -> impl Iterator<Item = arrow_array::RecordBatch> {
    (0..BATCHES).map(|b| {
        // Long names make each batch larger than one 16 KiB request.
        let ids = b * BATCH..(b + 1) * BATCH;
        let names: Vec<String> = ids.clone().map(|i| format!("{i:0>200}")).collect();
        batch(vec![
            (
                "id",
                false,
                std::sync::Arc::new(arrow_array::Int64Array::from_iter_values(ids)) as arrow_array::ArrayRef,
            ),
            (
                "name",
                true,
                std::sync::Arc::new(arrow_array::StringArray::from(names)),
            ),
        ])
    })
}

async fn resume_and_finish(ctx: &Ctx, table: &str, stream_type: StreamType, checkpoint: Checkpoint) {
    let from = (checkpoint.rows as i64 / BATCH) as usize;
    let mut s = BigQuerySink::resume(options(ctx, table, stream_type), checkpoint)
        .await
        .unwrap();
    for b in batches().skip(from) {
        s.write(b).await.unwrap();
    }
    let result = s.close().await.unwrap();
    assert!(result.failed.is_empty(), "{:?}", result.failed);
}

#[tokio::test]
async fn a_writer_resumed_from_a_stale_checkpoint_writes_each_row_once() {
    let ctx = Ctx::new().await;
    for stream_type in [StreamType::Committed, StreamType::Pending] {
        let table = format!("t_{stream_type:?}").to_lowercase();
        let mut s = BigQuerySink::connect(options(&ctx, &table, stream_type))
            .await
            .unwrap();
        let mut input = batches();
        s.write(input.next().unwrap()).await.unwrap();
        s.write(input.next().unwrap()).await.unwrap();
        let checkpoint = s.checkpoint();
        assert_eq!(checkpoint.rows, 200);
        assert_eq!(checkpoint.streams.len(), 1);
        // The third batch is written and acknowledged, but the writer dies before it could
        // save a checkpoint: its resumed successor replays that batch.
        s.write(input.next().unwrap()).await.unwrap();
        assert!(s.result().destinations.is_empty());
        drop(s);
        resume_and_finish(&ctx, &table, stream_type, checkpoint).await;
        assert_eq!(
            ctx.ids(&table),
            (0..BATCHES * BATCH).collect::<Vec<_>>(),
            "{stream_type:?}"
        );
    }
}

#[tokio::test]
async fn a_committed_writer_killed_mid_batch_resumes_exactly_once() {
    let ctx = Ctx::new().await;
    let (tx, mut rx) = tokio::sync::watch::channel(Checkpoint::default());
    let writer_options = options(&ctx, "t", StreamType::Committed);
    let task = tokio::spawn(async move {
        let mut s = BigQuerySink::connect(writer_options).await.unwrap();
        for b in batches() {
            s.write(b).await.unwrap();
            tx.send(s.checkpoint()).unwrap();
        }
    });
    // Let a few batches through, then kill the writer while it is inside a batch.
    while rx.borrow().rows < 4 * BATCH as u64 {
        tokio::time::timeout(Duration::from_secs(60), rx.changed())
            .await
            .expect("progress")
            .expect("writer alive");
    }
    tokio::time::sleep(Duration::from_millis(15 + rand::random::<u64>() % 60)).await;
    task.abort();
    let _ = task.await;
    // The killed writer's last request may still be on its way through the emulator. The
    // service checks an append's offset and writes its rows in one step, so a replay racing
    // it is answered ALREADY_EXISTS either way; the emulator checks first and inserts after,
    // and two connections appending at the same offset at once could both pass its check.
    // Waiting until the dead connection's request is done keeps the test on what the
    // service does.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let checkpoint = rx.borrow().clone();
    assert!(
        checkpoint.rows < (BATCHES * BATCH) as u64,
        "killed before the end"
    );
    resume_and_finish(&ctx, "t", StreamType::Committed, checkpoint).await;
    let ids = ctx.ids("t");
    assert_eq!(ids.len(), (BATCHES * BATCH) as usize, "every row exactly once");
    assert_eq!(ids, (0..BATCHES * BATCH).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_truncating_writer_resumes_with_its_staging_table() {
    let ctx = Ctx::new().await;
    write_all(
        ctx.options("t").schema(id_name_schema()).build().unwrap(),
        vec![id_name(1000..1005)],
    )
    .await;
    let options = ctx
        .options("t")
        .schema(id_name_schema())
        .write_disposition(outflow_core::WriteDisposition::Truncate)
        .build()
        .unwrap();
    let mut s = BigQuerySink::connect(options.clone()).await.unwrap();
    s.write(id_name(0..10)).await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(ctx.ids("t"), (0..10).collect::<Vec<_>>());
    s.write(id_name(10..20)).await.unwrap();
    let checkpoint = s.checkpoint();
    let staging = checkpoint.streams[&ctx.full("t")]
        .staging_table
        .clone()
        .expect("a staging table");
    drop(s); // killed: the rows 10..20 are staged, not swapped in
    assert_eq!(ctx.ids("t"), (0..10).collect::<Vec<_>>());
    let mut s = BigQuerySink::resume(options, checkpoint).await.unwrap();
    s.write(id_name(20..25)).await.unwrap();
    s.close().await.unwrap();
    assert_eq!(ctx.ids("t"), (0..25).collect::<Vec<_>>());
    assert!(ctx.get(&staging).await.is_none(), "the staging table is gone");
}
