//! The checkpoints of streaming jobs: each checkpoint's pending streams are committed with
//! its source offsets (recorded in the dataset's `_outflow_offsets`), a checkpoint
//! interrupted after its intent is completed by whoever reads the offsets next, and a stale
//! one is refused. Rows are read back with Google's Python client.

use std::collections::BTreeMap;

use outflow_bigquery::{BigQueryCommitter, BigQuerySink, BigQuerySinkOptions};
use outflow_core::{
    Checkpoint, Committer, ErrorKind, OffsetRange, Offsets, PrepareDestination, Sink, TopicPartition,
    TwoPhaseSink,
};

use crate::common::{Ctx, id_name, id_name_schema};

fn partition() -> TopicPartition {
    TopicPartition::new("orders", 0)
}

fn checkpoint(from: Option<i64>, to: i64) -> Checkpoint {
    Checkpoint {
        job: "job".into(),
        ranges: BTreeMap::from([(partition(), OffsetRange { from, to })]),
    }
}

fn offsets(next: i64) -> Option<Offsets> {
    Some(Offsets::from_iter([(partition(), next)]))
}

/// Writes `ids` through a two-phase writer and finalizes its stream, uncommitted.
async fn prepared(
    options: &BigQuerySinkOptions,
    ids: std::ops::Range<i64>,
) -> Vec<outflow_bigquery::PendingStream> {
    let mut writer = BigQuerySink::connect_two_phase(options.clone()).await.unwrap();
    writer.write(id_name(ids)).await.unwrap();
    writer.prepare_commit().await.unwrap().committables
}

#[tokio::test]
async fn checkpoints_commit_with_their_offsets_and_an_interrupted_one_is_completed() {
    let ctx = Ctx::new().await;
    let options = ctx.options("t").schema(id_name_schema()).build().unwrap();
    let committer = BigQueryCommitter::connect(&options).await.unwrap();
    let preparer = BigQuerySink::connect(options.clone()).await.unwrap().preparer();
    assert_eq!(
        preparer.stored_offsets("t", "job", None).await.unwrap(),
        Some(Offsets::new())
    );

    let streams = prepared(&options, 0..3).await;
    let first = checkpoint(None, 3);
    committer.commit_checkpoint(streams, "t", &first).await.unwrap();
    assert_eq!(ctx.ids("t"), [0, 1, 2]);
    assert_eq!(
        preparer.stored_offsets("t", "job", None).await.unwrap(),
        offsets(3)
    );
    assert_eq!(
        preparer.stored_offsets("t", "other", None).await.unwrap(),
        Some(Offsets::new())
    );

    // The same checkpoint from a second copy of the job: refused, nothing doubles.
    let again = prepared(&options, 0..3).await;
    let err = committer.commit_checkpoint(again, "t", &first).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(err.message().contains("orders/0"), "{err}");
    assert_eq!(ctx.ids("t"), [0, 1, 2]);

    // A job killed after recording its intent, before committing: the rows are not visible
    // until the next reader of the offsets commits the intent's stream.
    let streams = prepared(&options, 3..5).await;
    let intent = |checkpoint: &str, next: i64, stream: &str| {
        format!(
            "INSERT INTO `{}._outflow_offsets` (destination, job, checkpoint, state, offsets, streams, \
             recorded_at) VALUES ('{}', 'job', '{checkpoint}', 'intent', '{{\"orders\":{{\"0\":{next}}}}}', \
             '[\"{stream}\"]', CURRENT_TIMESTAMP())",
            ctx.full("").trim_end_matches('.'),
            ctx.full("t"),
        )
    };
    ctx.env.query(&intent("killed", 5, &streams[0].stream));
    assert_eq!(ctx.ids("t"), [0, 1, 2]);
    // A process owning only another partition leaves the intent alone: its owner may be
    // committing it right now.
    let other = [TopicPartition::new("orders", 1)];
    assert_eq!(
        preparer.stored_offsets("t", "job", Some(&other)).await.unwrap(),
        Some(Offsets::new())
    );
    assert_eq!(ctx.ids("t"), [0, 1, 2]);
    assert_eq!(
        preparer.stored_offsets("t", "job", None).await.unwrap(),
        offsets(5)
    );
    assert_eq!(ctx.ids("t"), [0, 1, 2, 3, 4]);

    // An intent whose stream BigQuery does not have uncommitted never became visible: it
    // is abandoned, and its offsets do not count.
    let gone = streams[0]
        .stream
        .replace(streams[0].stream.rsplit('/').next().unwrap(), "gone");
    ctx.env.query(&intent("lost", 9, &gone));
    assert_eq!(
        preparer.stored_offsets("t", "job", None).await.unwrap(),
        offsets(5)
    );
    let next = prepared(&options, 5..6).await;
    committer
        .commit_checkpoint(next, "t", &checkpoint(Some(5), 6))
        .await
        .unwrap();
    assert_eq!(ctx.ids("t"), [0, 1, 2, 3, 4, 5]);
    assert_eq!(
        preparer.stored_offsets("t", "job", None).await.unwrap(),
        offsets(6)
    );
}
