//! Compaction (`outflow_iceberg::maintenance::compact`) on the SQLite catalog: what it
//! rewrites is read back by PyIceberg and Java Iceberg, row for row, and Java's scan
//! planning reports the new files' partitions, metrics and the deletes that still apply.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::common::*;
use outflow_core::{RetryPolicy, Sink, WriteDisposition};
use outflow_iceberg::maintenance::compact::{CompactOptions, Compaction, compact};
use outflow_iceberg::{IcebergCatalog, TableCreateOptions};
use serde_json::Value;

const REGIONS: [&str; 3] = ["eu", "us", "ap"];

/// Commits `commits` batches of `rows` rows to `table` (partitioned by region) through one
/// sink, one commit each, cycling through the regions; ids run from `first`.
async fn small_commits(fixture: &SqlFixture, table: &str, first: i64, commits: i64, rows: i64) {
    let options = options(&fixture.config, table)
        .table_options(
            TableCreateOptions::builder()
                .partition_field("region")
                .sort_field("id desc")
                .build()
                .unwrap(),
        )
        .writers_per_table(1)
        .build()
        .unwrap();
    let mut sink = sink(options).await;
    for c in 0..commits {
        let start = first + c * rows;
        let region = REGIONS[(c % 3) as usize];
        sink.write(events(start..start + rows, region)).await.unwrap();
        sink.flush().await.unwrap();
    }
    sink.close().await.unwrap();
}

async fn catalog(fixture: &SqlFixture) -> IcebergCatalog {
    IcebergCatalog::connect(&fixture.config).await.unwrap()
}

fn options_with(min_input_files: usize) -> CompactOptions {
    CompactOptions {
        min_input_files,
        ..CompactOptions::default()
    }
}

/// Java's data files, by partition.
fn files_by_partition(files: &Value) -> BTreeMap<String, Vec<&Value>> {
    let mut out: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for file in files["files"].as_array().unwrap() {
        out.entry(file["partition"].as_str().unwrap().to_string())
            .or_default()
            .push(file);
    }
    out
}

/// The current snapshot of a read: `snapshot_id`, `operation`, `summary`...
fn current_snapshot(read: &Value) -> &Value {
    let current = &read["current_snapshot_id"];
    read["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| &s["snapshot_id"] == current)
        .unwrap()
}

#[tokio::test]
async fn five_hundred_small_commits_become_one_file_per_partition() {
    let fixture = sql_catalog();
    let table = "cmp.many";
    small_commits(&fixture, table, 0, 500, 4).await;
    let before = fixture.readers.read_both(table);
    assert_eq!(
        (before["row_count"].as_u64(), snapshot_count(&before)),
        (Some(2000), 500)
    );
    let catalog = catalog(&fixture).await;
    let retry = RetryPolicy::default();

    let dry_run = CompactOptions {
        dry_run: true,
        ..CompactOptions::default()
    };
    let planned = compact(&catalog, table, &dry_run, &retry).await.unwrap();
    assert_eq!(planned.groups.len(), 3, "{planned:?}");
    assert_eq!((planned.data_files_before, planned.data_files_after), (500, 3));
    assert_eq!(planned.snapshot_id, None);
    assert_eq!(
        fixture.readers.java_files(table)["files"]
            .as_array()
            .unwrap()
            .len(),
        500,
        "a dry run writes nothing"
    );

    let report = compact(&catalog, table, &CompactOptions::default(), &retry)
        .await
        .unwrap();
    assert!(report.snapshot_id.is_some(), "{report:?}");
    assert_eq!((report.data_files_before, report.data_files_after), (500, 3));
    let mut partitions: Vec<(&str, usize, usize, Option<u64>)> = report
        .groups
        .iter()
        .map(|g| {
            (
                g.partition.as_str(),
                g.input_files,
                g.output_files,
                g.output_records,
            )
        })
        .collect();
    partitions.sort();
    assert_eq!(
        partitions,
        [
            ("region=ap", 166, 1, Some(664)),
            ("region=eu", 167, 1, Some(668)),
            ("region=us", 167, 1, Some(668)),
        ]
    );

    let after = fixture.readers.read_both(table);
    assert_eq!(after["rows"], before["rows"], "the same rows, compared in full");
    let current = current_snapshot(&after);
    assert_eq!(current["operation"], "replace", "{current}");
    let summary = &current["summary"];
    assert_eq!(summary["total-data-files"], "3", "{summary}");
    assert_eq!(summary["total-records"], "2000", "{summary}");
    assert_eq!(summary["deleted-data-files"], "500", "{summary}");
    assert_eq!(summary["added-data-files"], "3", "{summary}");

    // Each new file's partition and metrics, by Java, against the rows read back.
    let files = fixture.readers.java_files(table);
    let by_partition = files_by_partition(&files);
    assert_eq!(by_partition.len(), 3, "{files}");
    for (partition, files) in by_partition {
        assert_eq!(files.len(), 1, "{partition}");
        let file = files[0];
        let region = partition.strip_prefix("region=").unwrap();
        let ids: Vec<i64> = outflow_testkit::iceberg::rows(&after)
            .iter()
            .filter(|r| r["region"] == region)
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        let count = ids.len() as u64;
        assert_eq!(file["record_count"], count, "{file}");
        assert_eq!(file["value_counts"]["id"], count, "{file}");
        assert_eq!(file["null_counts"]["name"], 0, "{file}");
        assert_eq!(file["lower_bounds"]["id"], *ids.iter().min().unwrap(), "{file}");
        assert_eq!(file["upper_bounds"]["id"], *ids.iter().max().unwrap(), "{file}");
        assert_eq!(file["lower_bounds"]["region"], region, "{file}");
        assert_eq!(file["upper_bounds"]["region"], region, "{file}");
        assert_eq!(file["delete_files"], 0, "{file}");
    }

    let again = compact(&catalog, table, &CompactOptions::default(), &retry)
        .await
        .unwrap();
    assert_eq!((again.groups.len(), again.snapshot_id), (0, None), "{again:?}");
}

#[tokio::test]
async fn compaction_applies_the_position_and_equality_deletes_of_what_it_rewrites() {
    let fixture = sql_catalog();
    let table = "cmp.deletes";
    small_commits(&fixture, table, 0, 6, 10).await;
    let deleted = fixture
        .readers
        .java_delete_rows(table, "id", &["3", "14", "57"], "position");
    assert_eq!(deleted["positions"], 3, "{deleted}");
    let before = fixture.readers.read_both(table);
    assert_eq!(before["row_count"], 57);
    let catalog = catalog(&fixture).await;
    let retry = RetryPolicy::default();

    let report = compact(&catalog, table, &options_with(2), &retry).await.unwrap();
    let records: Vec<(u64, Option<u64>)> = report
        .groups
        .iter()
        .map(|g| (g.input_records, g.output_records))
        .collect();
    let (input, output): (u64, u64) = records
        .iter()
        .fold((0, 0), |(i, o), (a, b)| (i + a, o + b.unwrap()));
    assert_eq!((input, output), (60, 57), "{report:?}");
    let after = fixture.readers.read_both(table);
    assert_eq!(after["rows"], before["rows"]);
    let files = fixture.readers.java_files(table);
    let files = files["files"].as_array().unwrap();
    assert_eq!(files.len(), 3);
    assert!(
        files.iter().all(|f| f["delete_files"] == 0),
        "no delete file applies to the rewritten rows: {files:?}"
    );

    // Equality deletes (which only Java reads), then a file more per partition.
    fixture
        .readers
        .java_delete_rows(table, "id", &["20", "21", "22"], "equality");
    small_commits(&fixture, table, 100, 3, 10).await;
    let java = |fixture: &SqlFixture| {
        fixture
            .readers
            .read(outflow_testkit::iceberg::Reader::Java, table)
    };
    let before = java(&fixture);
    assert_eq!(before["row_count"], 57 - 3 + 30);
    let report = compact(&catalog, table, &options_with(2), &retry).await.unwrap();
    assert_eq!(report.data_files_after, 3, "{report:?}");
    let after = java(&fixture);
    assert_eq!(after["rows"], before["rows"]);
    assert_no_deletes_apply(&fixture, table);
}

/// With `delete_file_threshold`, a file that enough delete files apply to is rewritten
/// whatever its size, alone in its partition, and its deletes are applied; without it,
/// only small files are.
#[tokio::test]
async fn files_that_deletes_apply_to_are_rewritten_whatever_their_size() {
    let fixture = sql_catalog();
    let table = "cmp.deleted";
    // One file per region; ids 0..10 are in the eu one.
    small_commits(&fixture, table, 0, 3, 10).await;
    fixture
        .readers
        .java_delete_rows(table, "id", &["3", "4"], "position");
    let before = fixture.readers.read_both(table);
    assert_eq!(before["row_count"], 28);
    let catalog = catalog(&fixture).await;
    let retry = RetryPolicy::default();
    let none_small = CompactOptions {
        min_file_size_bytes: Some(1),
        ..CompactOptions::default()
    };
    let untouched = compact(&catalog, table, &none_small, &retry).await.unwrap();
    assert_eq!(untouched.groups, [], "{untouched:?}");

    let for_deletes = CompactOptions {
        delete_file_threshold: Some(1),
        ..none_small
    };
    let report = compact(&catalog, table, &for_deletes, &retry).await.unwrap();
    let groups: Vec<(&str, usize, usize, Option<u64>)> = report
        .groups
        .iter()
        .map(|g| {
            (
                g.partition.as_str(),
                g.input_files,
                g.delete_files,
                g.output_records,
            )
        })
        .collect();
    assert_eq!(groups, [("region=eu", 1, 1, Some(8))], "{report:?}");
    assert_eq!(fixture.readers.read_both(table)["rows"], before["rows"]);
    let files = fixture.readers.java_files(table);
    let files = files["files"].as_array().unwrap();
    assert_eq!(files.len(), 3);
    assert!(files.iter().all(|f| f["delete_files"] == 0), "{files:?}");
}

/// Partial progress: groups go into one snapshot per part of at most the given bytes.
#[tokio::test]
async fn partial_progress_commits_one_snapshot_per_part() {
    let fixture = sql_catalog();
    let table = "cmp.parts";
    small_commits(&fixture, table, 0, 9, 5).await;
    let before = fixture.readers.read_both(table);
    let catalog = catalog(&fixture).await;
    let retry = RetryPolicy::default();
    let planned = Compaction::plan(&catalog, table, &options_with(2))
        .await
        .unwrap()
        .report()
        .clone();
    // Three partitions of three files; parts of two groups at most.
    let two_groups = planned.groups[0].input_bytes + planned.groups[1].input_bytes;
    let report = compact(
        &catalog,
        table,
        &CompactOptions {
            max_commit_bytes: Some(
                two_groups.max(planned.groups[1].input_bytes + planned.groups[2].input_bytes),
            ),
            ..options_with(2)
        },
        &retry,
    )
    .await
    .unwrap();
    assert_eq!(report.snapshot_ids.len(), 2, "{report:?}");
    assert_eq!(report.snapshot_id, report.snapshot_ids.last().copied());
    assert_eq!(
        (report.groups.len(), report.data_files_after),
        (3, 3),
        "{report:?}"
    );
    let after = fixture.readers.read_both(table);
    assert_eq!(after["rows"], before["rows"]);
    let operations: Vec<&Value> = after["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| report.snapshot_ids.iter().any(|id| s["snapshot_id"] == *id))
        .map(|s| &s["operation"])
        .collect();
    assert_eq!(operations, ["replace", "replace"]);
}

#[tokio::test]
async fn a_compaction_whose_files_a_truncate_removed_gives_up_and_leaves_nothing() {
    let fixture = sql_catalog();
    let table = "cmp.truncated";
    small_commits(&fixture, table, 0, 6, 5).await;
    let catalog = catalog(&fixture).await;
    let rewritten = Compaction::plan(&catalog, table, &options_with(2))
        .await
        .unwrap()
        .rewrite()
        .await
        .unwrap();
    let written = rewritten.written_files();
    assert_eq!(written.len(), 3);
    assert!(
        written
            .iter()
            .all(|f| std::path::Path::new(f.trim_start_matches("file://")).exists())
    );

    // Meanwhile a truncate replaces every row.
    let truncate = options(&fixture.config, table)
        .write_disposition(WriteDisposition::Truncate)
        .build()
        .unwrap();
    write_all(truncate, vec![events(1000..1004, "eu")]).await.unwrap();

    let report = rewritten.commit(&catalog, &RetryPolicy::default()).await.unwrap();
    assert_eq!(report.snapshot_id, None, "{report:?}");
    assert!(
        report
            .groups
            .iter()
            .all(|g| g.given_up.as_deref().is_some_and(|r| r.contains("was removed"))),
        "{report:?}"
    );
    assert!(
        written
            .iter()
            .all(|f| !std::path::Path::new(f.trim_start_matches("file://")).exists()),
        "the files written for the given-up groups are deleted"
    );
    let read = fixture.readers.read_both(table);
    assert_eq!(read["row_count"], 4);
    assert_eq!(current_snapshot(&read)["operation"], "overwrite");
}

/// Four writers append for `OUTFLOW_COMPACT_RACE_SECS` seconds (30 by default) while
/// compactions run one after another: every row is there once, whatever commit lost a race.
#[tokio::test]
async fn compactions_racing_four_appenders_lose_and_duplicate_nothing() {
    let fixture = sql_catalog();
    let table = "cmp.race";
    small_commits(&fixture, table, 0, 3, 1).await;
    let seconds: u64 = std::env::var("OUTFLOW_COMPACT_RACE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut writers = Vec::new();
    for w in 0..4i64 {
        let options = options(&fixture.config, table)
            .writers_per_table(1)
            .build()
            .unwrap();
        writers.push(tokio::spawn(async move {
            let mut sink = sink(options).await;
            let mut ids = Vec::new();
            let mut next = 1_000_000 * (w + 1);
            while Instant::now() < until {
                sink.write(events(next..next + 3, REGIONS[(next % 3) as usize]))
                    .await
                    .unwrap();
                sink.flush().await.unwrap();
                ids.extend(next..next + 3);
                next += 3;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            sink.close().await.unwrap();
            ids
        }));
    }
    let catalog = catalog(&fixture).await;
    let mut committed = 0;
    let mut rewritten_files = 0;
    while Instant::now() < until {
        let report = compact(&catalog, table, &options_with(2), &RetryPolicy::default())
            .await
            .unwrap();
        if report.snapshot_id.is_some() {
            committed += 1;
            rewritten_files += report
                .groups
                .iter()
                .filter(|g| g.given_up.is_none())
                .map(|g| g.input_files)
                .sum::<usize>();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut expected: BTreeSet<i64> = (0..3).collect();
    for writer in writers {
        expected.extend(writer.await.unwrap());
    }
    assert!(committed >= 2, "{committed} compactions committed");
    assert!(rewritten_files > 0);
    let read = fixture.readers.read_both(table);
    let ids: Vec<i64> = outflow_testkit::iceberg::rows(&read)
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), expected.len(), "no row lost or doubled");
    assert_eq!(ids.into_iter().collect::<BTreeSet<_>>(), expected);
}

#[tokio::test]
async fn a_sorted_compaction_writes_rows_in_the_tables_sort_order() {
    let fixture = sql_catalog();
    let table = "cmp.sorted";
    small_commits(&fixture, table, 0, 9, 7).await;
    let catalog = catalog(&fixture).await;
    let before = fixture.readers.read_both(table);
    let report = compact(
        &catalog,
        table,
        &CompactOptions {
            sort: true,
            min_input_files: 2,
            ..CompactOptions::default()
        },
        &RetryPolicy::default(),
    )
    .await
    .unwrap();
    assert_eq!(report.data_files_after, 3, "{report:?}");
    assert_eq!(fixture.readers.read_both(table)["rows"], before["rows"]);
    // The table sorts by id descending: each new file holds its ids in that order.
    for file in fixture.readers.java_files(table)["files"].as_array().unwrap() {
        let path = file["path"].as_str().unwrap().trim_start_matches("file://");
        let ids = parquet_ids(path);
        let mut expected = ids.clone();
        expected.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(ids, expected, "{path}");
        assert_eq!(ids.len(), 21, "{path}");
    }

    let unsorted = "cmp.unsorted";
    write_all(
        options(&fixture.config, unsorted).build().unwrap(),
        vec![events(0..2, "eu")],
    )
    .await
    .unwrap();
    let err = Compaction::plan(
        &catalog,
        unsorted,
        &CompactOptions {
            sort: true,
            ..CompactOptions::default()
        },
    )
    .await
    .err()
    .unwrap();
    assert!(
        err.to_string().contains("cmp.unsorted has no sort order"),
        "{err}"
    );
}

/// The `id` column of a Parquet file, in file order.
fn parquet_ids(path: &str) -> Vec<i64> {
    use arrow_array::Int64Array;
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let column = batch.column_by_name("id").unwrap();
        ids.extend(
            column
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .iter(),
        );
    }
    ids
}
