//! `check`, `plan` and `run` refuse the same job files the same way: every field a sink
//! option names is checked against the schema the sink receives (after the transforms, or
//! an engine job's query) before any service is reached, with exit code 2 and the option
//! and the column named. The sinks point at a catalog directory that must stay absent or at
//! an endpoint nothing listens on, so a command that reached the service would show it.

use std::path::{Path, PathBuf};

use predicates::prelude::*;
use predicates::str::contains;

use crate::outflow;

/// Rows with `id`, `city`, `ts` (a timestamp) and `score` (a double).
const ROWS: &str = "id,city,ts,score\n1,Lisbon,2026-11-01T00:02:00,1.5\n2,Porto,2026-11-02T10:00:00,2.5\n";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A job over [`ROWS`] with `sink` (the YAML under `sink:`, indented by four).
fn job(dir: &Path, sink: &str) -> PathBuf {
    write(dir, "rows.csv", ROWS);
    write(
        dir,
        "job.yaml",
        &format!("source: {{ path: rows.csv }}\nsink:\n{sink}"),
    )
}

fn iceberg(options: &str) -> String {
    format!(
        "  iceberg:\n    catalog: {{ type: sql, uri: lake/catalog.db, warehouse: lake/wh }}\n    table: db.t\n{options}"
    )
}

/// Each command exits 2, naming `key` and `column`, and nothing was created under `lake/`.
fn refused_alike(dir: &Path, path: &Path, key: &str, column: &str) {
    for command in ["check", "plan", "run"] {
        let output = outflow().arg(command).arg(path).arg("--quiet").output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid configuration: {key}: ")),
            "{command} names {key}: {stderr}"
        );
        assert!(stderr.contains(column), "{command} names {column}: {stderr}");
        assert!(!dir.join("lake").exists(), "{command} created the catalog");
    }
}

#[test]
fn iceberg_creation_settings_are_refused_with_create_never() {
    let dir = tempfile::tempdir().unwrap();
    let path = job(
        dir.path(),
        &iceberg(
            "    create_disposition: create_never\n    table_options: { partition_fields: [\"day(ts)\"] }\n",
        ),
    );
    refused_alike(
        dir.path(),
        &path,
        "table_options.partition_fields",
        "create_never",
    );
}

#[test]
fn iceberg_partition_and_sort_fields_must_fit_the_rows() {
    for (options, key, column, says) in [
        (
            "table_options: { partition_fields: [\"day(started_at)\"] }",
            "table_options.partition_fields",
            "started_at",
            "the rows have no column started_at",
        ),
        (
            "table_options: { partition_fields: [\"day(city)\"] }",
            "table_options.partition_fields",
            "city",
            "column city is string, which the day transform does not take",
        ),
        (
            "table_options: { partition_fields: [\"bucket(4, score)\"] }",
            "table_options.partition_fields",
            "score",
            "column score is double, which the bucket transform does not take",
        ),
        (
            "table_options: { partition_fields: [\"truncate(2, ts)\"] }",
            "table_options.partition_fields",
            "ts",
            "truncate",
        ),
        (
            "table_options: { sort_order: [\"scores desc\"] }",
            "table_options.sort_order",
            "scores",
            "the rows have no column scores",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = job(dir.path(), &iceberg(&format!("    {options}\n")));
        refused_alike(dir.path(), &path, key, says);
        let err = outflow().arg("check").arg(&path).output().unwrap();
        assert!(String::from_utf8_lossy(&err.stderr).contains(column));
    }
}

#[test]
fn iceberg_fields_are_checked_after_the_transforms() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "rows.csv", ROWS);
    let path = write(
        dir.path(),
        "job.yaml",
        &format!(
            "source: {{ path: rows.csv }}\ntransforms:\n  - rename: {{ ts: started_at }}\nsink:\n{}",
            iceberg("    table_options: { partition_fields: [\"day(ts)\"] }\n")
        ),
    );
    refused_alike(dir.path(), &path, "table_options.partition_fields", "ts");
    let renamed = std::fs::read_to_string(&path)
        .unwrap()
        .replace("day(ts)", "day(started_at)");
    let path = write(dir.path(), "job.yaml", &renamed);
    outflow().arg("check").arg(&path).assert().success();
}

#[test]
fn a_table_template_field_the_rows_lack_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = job(
        dir.path(),
        &iceberg("").replace("table: db.t", "table: db.t_{region}"),
    );
    refused_alike(dir.path(), &path, "table", "the rows have no field region");
}

#[test]
fn bigtable_fields_must_be_in_the_rows() {
    let sink = "  bigtable:\n    project: p\n    instance: i\n    table: users\n    endpoint: 127.0.0.1:9\n\
                \x20   create_disposition: create_never\n";
    for (options, key, column) in [
        (
            "row_key: user_id\n    columns: { family: cf }",
            "row_key",
            "user_id",
        ),
        (
            "row_key: [id, ciyt]\n    columns: { family: cf }",
            "row_key",
            "ciyt",
        ),
        (
            "row_key: id\n    columns: { explicit: [{ field: city, family: cf }, { field: scor, family: cf }] }",
            "columns.explicit[1].field",
            "scor",
        ),
        (
            "row_key: id\n    columns: { family: cf }\n    timestamp: { field: time }",
            "timestamp.field",
            "time",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = job(dir.path(), &format!("{sink}    {options}\n"));
        refused_alike(dir.path(), &path, key, column);
    }
}

#[test]
fn bigquery_partitioning_and_clustering_columns_must_be_in_the_rows() {
    let sink = "  bigquery:\n    project: p\n    dataset: d\n    table: events\n\
                \x20   connection: { emulator_host: \"127.0.0.1:9\" }\n\
                \x20   schema:\n      - { name: id, type: INT64 }\n      - { name: region, type: STRING }\n\
                \x20     - { name: day, type: DATE }\n";
    for (options, key, column) in [
        (
            "time_partitioning: { type: DAY, field: day }",
            "time_partitioning.field",
            "day",
        ),
        ("clustering: [region]", "clustering", "region"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = job(dir.path(), &format!("{sink}    {options}\n"));
        refused_alike(dir.path(), &path, key, column);
    }
}

#[cfg(feature = "engine")]
#[test]
fn an_engine_job_is_checked_and_planned_against_its_query() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "rows.csv", ROWS);
    let engine = "engine:\n  sql: SELECT id, lower(city) AS town, ts FROM source\n";
    let path = write(
        dir.path(),
        "job.yaml",
        &format!(
            "source: {{ path: rows.csv }}\n{engine}sink:\n{}",
            iceberg("    table_options: { partition_fields: [\"day(ts)\", town] }\n")
                .replace("table: db.t", "table: db.t_{town}")
        ),
    );
    outflow()
        .arg("check")
        .arg(&path)
        .assert()
        .success()
        .stdout(contains("Schema after transforms:").and(contains("  town: ")));
    outflow().arg("plan").arg(&path).assert().success().stdout(
        contains("db.t_lisbon")
            .and(contains("db.t_porto"))
            .and(contains("town")),
    );

    // A field the query does not select is refused by all three (in a directory that
    // holds no catalog yet: the plan above made one).
    let fresh = tempfile::tempdir().unwrap();
    write(fresh.path(), "rows.csv", ROWS);
    let dropped = std::fs::read_to_string(&path)
        .unwrap()
        .replace(", ts FROM", " FROM");
    let path = write(fresh.path(), "job.yaml", &dropped);
    refused_alike(
        fresh.path(),
        &path,
        "table_options.partition_fields",
        "no column ts",
    );

    // Transforms and an engine do not mix, in check and plan as in run.
    let both = dropped.replace("engine:", "transforms:\n  - select: [id]\nengine:");
    let path = write(fresh.path(), "job.yaml", &both);
    refused_alike(fresh.path(), &path, "transforms", "express the transforms in SQL");
}
