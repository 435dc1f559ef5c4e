//! Streaming checkpoints on a real table (SQL catalog): rows and source offsets in one
//! snapshot, read back by PyIceberg and Java Iceberg; a checkpoint that no longer begins
//! where the table is gets refused.

use std::collections::BTreeMap;

use outflow_core::{
    Checkpoint, Committer, ErrorKind, OffsetRange, Offsets, PrepareDestination, Sink, TopicPartition,
    TwoPhaseSink,
};
use outflow_iceberg::IcebergCommitter;

use crate::common::{events, options, sink, sql_catalog};

const TABLE: &str = "lake.stream";

fn checkpoint(job: &str, ranges: &[(i32, Option<i64>, i64)]) -> Checkpoint {
    Checkpoint {
        job: job.into(),
        ranges: ranges
            .iter()
            .map(|&(partition, from, to)| {
                (TopicPartition::new("orders", partition), OffsetRange { from, to })
            })
            .collect(),
    }
}

fn offsets(pairs: &[(i32, i64)]) -> Offsets {
    pairs
        .iter()
        .map(|&(p, n)| (TopicPartition::new("orders", p), n))
        .collect()
}

#[tokio::test]
async fn a_checkpoint_commits_rows_and_offsets_in_one_snapshot_and_a_stale_one_is_refused() {
    let fx = sql_catalog();
    let options = options(&fx.config, TABLE).build().unwrap();
    let preparer = sink(options.clone()).await.preparer();
    let committer = IcebergCommitter::connect(&options).await.unwrap();
    assert_eq!(
        preparer.stored_offsets(TABLE, "job", None).await.unwrap(),
        Some(Offsets::new())
    );

    // Rows 0..100 from partitions 0 and 1, the job's first checkpoint of both.
    let mut writer = sink(options.clone()).await;
    let batch = events(0..100, "eu");
    preparer.prepare(TABLE, &batch.schema()).await.unwrap();
    writer.write(batch).await.unwrap();
    let prepared = writer.prepare_commit().await.unwrap();
    let first = checkpoint("job", &[(0, None, 50), (1, None, 50)]);
    let result = committer
        .commit_checkpoint(prepared.committables.clone(), TABLE, &first)
        .await
        .unwrap();
    assert_eq!(result.destinations[TABLE].commits, 1);
    assert_eq!(
        preparer.stored_offsets(TABLE, "job", None).await.unwrap(),
        Some(offsets(&[(0, 50), (1, 50)]))
    );

    // The same commit again (a retried commit task) finds itself in the table.
    let again = committer
        .commit_checkpoint(prepared.committables.clone(), TABLE, &first)
        .await
        .unwrap();
    assert_eq!(again.destinations[TABLE].commits, 0);

    // A process that began partition 0 from nothing (a zombie, or a second copy of the
    // job) is refused, and its rows are not committed.
    let mut zombie = sink(options.clone()).await;
    zombie.write(events(100..110, "eu")).await.unwrap();
    let staged = zombie.prepare_commit().await.unwrap();
    let stale = checkpoint("job", &[(0, None, 55)]);
    let err = committer
        .commit_checkpoint(staged.committables, TABLE, &stale)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(err.message().contains("orders/0"), "{err}");

    // Records read but no rows written (all filtered out): the offsets still move.
    let offsets_only = checkpoint("job", &[(0, Some(50), 60)]);
    let result = committer
        .commit_checkpoint(Vec::new(), TABLE, &offsets_only)
        .await
        .unwrap();
    assert_eq!(result.destinations[TABLE].commits, 1);
    assert_eq!(
        preparer.stored_offsets(TABLE, "job", None).await.unwrap(),
        Some(offsets(&[(0, 60), (1, 50)]))
    );
    // Another job's offsets are its own.
    assert_eq!(
        preparer.stored_offsets(TABLE, "other", None).await.unwrap(),
        Some(Offsets::new())
    );

    // Both readers: the 100 rows once, and the two snapshots' offsets as written.
    let read = fx.readers.read_both(TABLE);
    assert_eq!(
        outflow_testkit::iceberg::sorted_ids(&read),
        (0..100).collect::<Vec<i64>>()
    );
    let summaries: Vec<BTreeMap<String, serde_json::Value>> = read["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| serde_json::from_value(s["summary"].clone()).unwrap())
        .collect();
    let mut stored: Vec<&str> = summaries
        .iter()
        .filter_map(|s| s.get("outflow.offsets.job").and_then(|v| v.as_str()))
        .collect();
    // The readers list snapshots in their own order.
    stored.sort();
    assert_eq!(
        stored,
        [r#"{"orders":{"0":50,"1":50}}"#, r#"{"orders":{"0":60}}"#]
    );
}
