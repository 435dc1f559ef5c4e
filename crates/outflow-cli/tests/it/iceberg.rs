//! `outflow run` and `outflow plan` with the Iceberg sink, against a real SQLite catalog,
//! with the tables read back by PyIceberg and Java Iceberg.

use crate::outflow;
use std::path::Path;

use outflow_testkit::iceberg::TestCatalog;
use predicates::prelude::*;
use predicates::str::contains;
use serde_json::{Value, json};

/// A copy of the repository's examples/ in `dir`, so the quickstart writes under `dir`.
fn copy_examples(dir: &Path) {
    let repo = outflow_testkit::repo_root();
    for sub in ["examples/jobs", "examples/data"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        for entry in std::fs::read_dir(repo.join(sub)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.join(sub).join(entry.file_name())).unwrap();
        }
    }
}

fn quickstart_catalog(dir: &Path) -> TestCatalog {
    TestCatalog::sql_in(&dir.join("outflow-quickstart"))
}

#[test]
fn the_quickstart_job_writes_a_table_both_readers_agree_on() {
    let dir = tempfile::tempdir().unwrap();
    copy_examples(dir.path());
    let job = dir.path().join("examples/jobs/quickstart.yaml");
    outflow().arg("run").arg(&job).assert().success().stdout(
        contains("quickstart.trips")
            .and(contains("2,000"))
            .and(contains("Not recorded").not()),
    );
    let read = quickstart_catalog(dir.path()).read_both("quickstart.trips");
    assert_eq!(read["row_count"], 2000);
    let fields: Vec<(String, Value, bool)> = outflow_testkit::iceberg::fields(&read)
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["type"].clone(),
                f["required"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(fields[0], ("trip_id".into(), json!("long"), false));
    assert_eq!(fields[3], ("started_at".into(), json!("timestamptz"), false));
    assert_eq!(fields[6], ("fare_eur".into(), json!("decimal(8,2)"), false));
    let transforms: Vec<&str> = read["partition_spec"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["transform"].as_str().unwrap())
        .collect();
    assert_eq!(transforms, ["day", "identity"]);
    let first = outflow_testkit::iceberg::rows(&read)
        .iter()
        .find(|r| r["trip_id"] == 1)
        .unwrap();
    assert_eq!(first["city"], "Lisbon");
    assert_eq!(first["started_at"], "2026-11-01T00:02:00.000000+00:00");
    assert_eq!(first["fare_eur"], "8.30");

    // A second run finds the table holds the file and loads nothing; `--reload` appends
    // the same rows again, in a second snapshot.
    outflow()
        .arg("run")
        .arg(&job)
        .arg("--quiet")
        .assert()
        .success()
        .stdout(contains(
            "Skipped 1 file quickstart.trips already holds from an earlier run: ",
        ));
    let read = quickstart_catalog(dir.path()).read_both("quickstart.trips");
    assert_eq!(read["row_count"], 2000);
    assert_eq!(read["snapshots"].as_array().unwrap().len(), 1);
    outflow()
        .args(["run", "--quiet", "--reload"])
        .arg(&job)
        .assert()
        .success();
    let read = quickstart_catalog(dir.path()).read_both("quickstart.trips");
    assert_eq!(read["row_count"], 4000);
    assert_eq!(read["snapshots"].as_array().unwrap().len(), 2);
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The SQLite catalog under `dir/lake/`, where this file's jobs write.
fn lake_catalog(dir: &Path) -> TestCatalog {
    TestCatalog::Sql {
        name: "outflow".into(),
        db: dir.join("lake/catalog.db"),
        warehouse: dir.join("lake/wh"),
    }
}

const SINK: &str = "sink:\n  iceberg:\n    catalog: { type: sql, uri: lake/catalog.db, warehouse: lake/wh }\n    table: db.people\n";

#[test]
fn plan_shows_the_evolution_a_run_then_makes() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "v1.csv", "id,name\n1,ada\n2,alan\n");
    write(dir.path(), "v2.csv", "id,name,email\n3,grace,g@example.com\n");
    let first = write(
        dir.path(),
        "first.yaml",
        &format!("source:\n  path: v1.csv\n{SINK}"),
    );
    outflow()
        .arg("plan")
        .arg(&first)
        .assert()
        .success()
        .stdout(contains("db.people").and(contains("create")));
    outflow().arg("run").arg(&first).arg("--quiet").assert().success();

    let evolving = format!(
        "source:\n  path: v2.csv\n{SINK}    schema_evolution: {{ options: [allow_field_addition] }}\n"
    );
    let second = write(dir.path(), "second.yaml", &evolving);
    outflow()
        .arg("plan")
        .arg(&second)
        .assert()
        .success()
        .stdout(contains("update").and(contains("+ email")));
    let output = outflow().arg("plan").arg(&second).arg("--json").output().unwrap();
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    let change = &plan["destinations"][0]["evolution"]["changes"][0];
    assert_eq!(
        (change["path"].as_str(), change["kind"].as_str()),
        (Some("email"), Some("addition"))
    );
    // Planning changed nothing.
    let catalog = lake_catalog(dir.path());
    assert_eq!(
        outflow_testkit::iceberg::fields(&catalog.read_both("db.people")).len(),
        2
    );

    outflow()
        .arg("run")
        .arg(&second)
        .arg("--quiet")
        .assert()
        .success();
    let read = catalog.read_both("db.people");
    assert_eq!(outflow_testkit::iceberg::fields(&read).len(), 3);
    assert_eq!(read["row_count"], 3);

    // Without the option, the same plan fails and says why.
    let refusing = write(
        dir.path(),
        "third.yaml",
        &format!("source:\n  path: v2.csv\n{SINK}"),
    );
    write(
        dir.path(),
        "v2.csv",
        "id,name,email,phone\n4,linus,l@example.com,123\n",
    );
    outflow()
        .arg("plan")
        .arg(&refusing)
        .assert()
        .code(1)
        .stdout(contains("phone"));
}

#[test]
fn rejected_rows_go_to_the_dead_letter_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.csv", "id,region\n1,eu\n2,\n3,us\n");
    let job = write(
        dir.path(),
        "job.yaml",
        "source:\n  path: a.csv\n  csv: { schema: [ {name: id, type: long}, {name: region, type: string} ] }\n\
         sink:\n  iceberg:\n    catalog: { type: sql, uri: lake/catalog.db, warehouse: lake/wh }\n\
         \x20   table: db.events\n    schema_evolution: { options: [allow_field_addition], on_incompatible: route_to_errors }\n\
         dead_letter: failed.ndjson\n",
    );
    // First run creates the table with `id` and `region`; then a file whose `id` is text
    // cannot fit it and its rows are routed to the dead-letter file.
    outflow().arg("run").arg(&job).arg("--quiet").assert().success();
    write(dir.path(), "a.csv", "id,region\nx,eu\n");
    let job2 = write(
        dir.path(),
        "job2.yaml",
        &std::fs::read_to_string(&job)
            .unwrap()
            .replace("{name: id, type: long}", "{name: id, type: string}"),
    );
    outflow().arg("run").arg(&job2).arg("--quiet").assert().code(3);
    let dead = std::fs::read_to_string(dir.path().join("failed.ndjson")).unwrap();
    let line: Value = serde_json::from_str(dead.lines().next().unwrap()).unwrap();
    assert_eq!(line["destination"], "db.events");
    assert_eq!(line["index"], 0);
    assert_eq!(line["record"], json!({"id": "x", "region": "eu"}));
    assert!(
        line["reason"]
            .as_str()
            .unwrap()
            .contains("id: the table has long, the input string")
    );
    let catalog = lake_catalog(dir.path());
    assert_eq!(catalog.read_both("db.events")["row_count"], 3);
}

/// Rows a table template cannot route (a null `region`) are rejected; each dead-letter line
/// names the file and line the row was read from, though a filter dropped rows before the
/// sink counted them and the rows span two files and several batches.
#[test]
fn dead_letter_lines_name_the_source_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("in")).unwrap();
    write(dir.path(), "in/a.csv", "id,region\n1,eu\n2,\n3,us\n4,\n");
    write(dir.path(), "in/b.csv", "id,region\n5,\n6,eu\n7,\n");
    let job = write(
        dir.path(),
        "job.yaml",
        "source:\n  path: in/*.csv\n  batch_size: 2\n\
         transforms:\n  - filter: { column: id, op: ne, value: 1 }\n\
         sink:\n  iceberg:\n    catalog: { type: sql, uri: lake/catalog.db, warehouse: lake/wh }\n\
         \x20   table: db.events_{region}\n\
         dead_letter: failed.ndjson\n",
    );
    outflow().arg("run").arg(&job).arg("--quiet").assert().code(3);
    let dead = std::fs::read_to_string(dir.path().join("failed.ndjson")).unwrap();
    let found: Vec<(Value, String, Value)> = dead
        .lines()
        .map(|l| {
            let line: Value = serde_json::from_str(l).unwrap();
            let file = Path::new(line["source"]["file"].as_str().unwrap());
            assert!(file.is_absolute(), "{line}");
            let name = file.file_name().unwrap().to_str().unwrap().to_string();
            (line["record"]["id"].clone(), name, line["source"]["line"].clone())
        })
        .collect();
    assert_eq!(
        found,
        [
            (json!(2), "a.csv".to_string(), json!(3)),
            (json!(4), "a.csv".to_string(), json!(5)),
            (json!(5), "b.csv".to_string(), json!(2)),
            (json!(7), "b.csv".to_string(), json!(4)),
        ],
        "{dead}"
    );
    let first: Value = serde_json::from_str(dead.lines().next().unwrap()).unwrap();
    // The sink's own index counts the rows it was given, after the filter.
    assert_eq!(first["index"], 0);
}

#[cfg(feature = "engine")]
#[test]
fn an_engine_job_runs_its_sql_through_datafusion_and_commits_once() {
    let dir = tempfile::tempdir().unwrap();
    copy_examples(dir.path());
    // The quickstart's source and sink, with SQL instead of the typed schema and transforms.
    let job = write(
        dir.path(),
        "examples/jobs/engine.yaml",
        "source:\n  path: ../data/trips.csv\n\
         engine:\n  sql: SELECT trip_id, upper(city) AS city, CAST(fare_eur AS DOUBLE) AS fare FROM source WHERE duration_s >= 60\n  partitions: 3\n\
         sink:\n  iceberg:\n    catalog: { type: sql, uri: ../../outflow-quickstart/catalog.db, warehouse: ../../outflow-quickstart/warehouse }\n\
         \x20   table: engine.trips\n",
    );
    let out = outflow().arg("run").arg(&job).arg("--json").assert().success();
    let doc: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let read = quickstart_catalog(dir.path()).read_both("engine.trips");
    let rows = outflow_testkit::iceberg::rows(&read);
    assert!(rows.len() > 1000, "{} rows", rows.len());
    assert_eq!(doc["result"]["destinations"]["engine.trips"]["rows"], rows.len());
    assert_eq!(
        read["snapshots"].as_array().unwrap().len(),
        1,
        "one commit for the statement"
    );
    assert!(
        rows.iter()
            .all(|r| r["city"].as_str().unwrap().chars().all(|c| !c.is_lowercase()))
    );
    let lisbon = rows.iter().find(|r| r["trip_id"] == 1).unwrap();
    assert_eq!(lisbon["city"], "LISBON");
    assert_eq!(lisbon["fare"], 8.3);

    // Transforms and an engine do not mix; a bad query names engine.sql.
    let both = write(
        dir.path(),
        "examples/jobs/both.yaml",
        &std::fs::read_to_string(&job)
            .unwrap()
            .replace("engine:", "transforms:\n  - select: [trip_id]\nengine:"),
    );
    outflow()
        .arg("run")
        .arg(&both)
        .assert()
        .code(2)
        .stderr(contains("transforms"));
    let bad = write(
        dir.path(),
        "examples/jobs/bad.yaml",
        &std::fs::read_to_string(&job)
            .unwrap()
            .replace("upper(city)", "upper(no_such_column)"),
    );
    outflow()
        .arg("run")
        .arg(&bad)
        .assert()
        .code(2)
        .stderr(contains("engine.sql").and(contains("no_such_column")));
}

/// A REST catalog answering 500 to `/v1/config` is a failed service, exit 1 (not a bad job
/// file, 2), and the error names the endpoint as it ran: the port the variable gave, not
/// the `${VAR:-default}` the job file holds.
#[test]
fn a_server_error_from_a_rest_catalog_is_a_service_failure_naming_the_real_endpoint() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let failing = runtime.block_on(outflow_testkit::faults::FaultyEndpoint::http_status(500));
    let port = failing.host().rsplit_once(':').unwrap().1.to_string();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.csv", "id\n1\n");
    let job = write(
        dir.path(),
        "job.yaml",
        "source: { path: a.csv }\nsink:\n  iceberg:\n    catalog:\n      type: rest\n\
         \x20     uri: 'http://127.0.0.1:${OUTFLOW_TEST_REST_PORT:-9050}'\n\
         \x20     properties: { request-timeout: 500ms }\n    table: db.t\n\
         \x20   retry: { deadline: 1s, initial_backoff: 50ms, max_backoff: 200ms }\n",
    );
    let started = std::time::Instant::now();
    let output = outflow()
        .arg("run")
        .arg(&job)
        .arg("--quiet")
        .env("OUTFLOW_TEST_REST_PORT", &port)
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("http://127.0.0.1:{port}")), "{stderr}");
    assert!(!stderr.contains("${OUTFLOW_TEST_REST_PORT"), "{stderr}");
    assert!(stderr.contains("HTTP 500"), "{stderr}");
    assert!(stderr.contains("transient"), "{stderr}");
    assert!(!stderr.contains("invalid configuration"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

/// A job writing `db.t` from `in.csv` (`id` long, `note` string) in batches of 100 rows.
fn small_batch_job(dir: &Path) -> std::path::PathBuf {
    write(
        dir,
        "job.yaml",
        "source:\n  path: in.csv\n  batch_size: 100\n  csv: { schema: [ {name: id, type: long}, {name: note, type: string} ] }\n\
         sink:\n  iceberg:\n    catalog: { type: sql, uri: lake/catalog.db, warehouse: lake/wh }\n    table: db.t\n",
    )
}

fn csv_rows(rows: std::ops::Range<u64>) -> String {
    std::iter::once("id,note\n".to_string())
        .chain(rows.map(|i| format!("{i},row number {i} of the test input\n")))
        .collect()
}

/// The files under `dir`, recursively (none when it does not exist).
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flat_map(|e| {
            let path = e.unwrap().path();
            if path.is_dir() {
                files_under(&path)
            } else {
                vec![path]
            }
        })
        .collect()
}

#[test]
fn a_run_that_fails_part_way_leaves_no_table_and_no_files_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut input = csv_rows(0..1000);
    input.push_str("oops,not a number\n");
    write(dir.path(), "in.csv", &input);
    let job = small_batch_job(dir.path());
    let failed = outflow().arg("run").arg(&job).arg("--quiet").assert().code(1);
    let stderr = String::from_utf8_lossy(&failed.get_output().stderr).to_string();
    assert!(stderr.contains("in.csv, line 1002"), "{stderr}");
    assert!(
        stderr.contains("removed table db.t, created by this run and never committed to"),
        "{stderr}"
    );
    assert!(stderr.contains("uncommitted data file"), "{stderr}");
    assert_eq!(
        files_under(&dir.path().join("lake/wh")),
        Vec::<std::path::PathBuf>::new()
    );
    // Nothing of the failed run remains: plan would create the table, and a rerun on good
    // input writes every row once.
    outflow()
        .arg("plan")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains("create"));
    write(dir.path(), "in.csv", &csv_rows(0..1000));
    outflow().arg("run").arg(&job).arg("--quiet").assert().success();
    let catalog = lake_catalog(dir.path());
    let read = catalog.read_both("db.t");
    assert_eq!(read["row_count"], 1000);
    assert_eq!(read["snapshots"].as_array().unwrap().len(), 1);
}

#[test]
fn ctrl_c_stops_a_run_and_removes_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "in.csv", &csv_rows(0..5_000_000));
    let job = small_batch_job(dir.path());
    // Interrupted once it is writing data files.
    let data = dir.path().join("lake/wh/db/t/data");
    let (code, stderr) = crate::interrupted_run(&job, &[], || !files_under(&data).is_empty());
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("outflow: interrupted: stopping the run"),
        "{stderr}"
    );
    assert!(
        stderr.contains("removed table db.t, created by this run and never committed to"),
        "{stderr}"
    );
    assert_eq!(
        files_under(&dir.path().join("lake/wh")),
        Vec::<std::path::PathBuf>::new()
    );
}

/// `outflow iceberg rewrite-manifests` on a table of six commits that never merged their
/// manifests: a dry run says what it would do and changes nothing, the run merges them in
/// one replace snapshot, both readers read the same rows, and a second run has nothing to do.
#[test]
fn rewrite_manifests_merges_small_manifests_and_a_dry_run_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    one_row_commits(dir.path(), "db.small", 6, |_| {
        "    table_options: { properties: { commit.manifest-merge.enabled: \"false\" } }\n".to_string()
    });
    let rewrite = |extra: &[&str]| maintenance(dir.path(), "rewrite-manifests", "db.small", extra);
    let planned = rewrite(&["--dry-run"]);
    assert_eq!(
        (
            &planned["manifests_before"],
            &planned["manifests_after"],
            &planned["snapshot_id"]
        ),
        (&json!(6), &json!(1), &Value::Null),
        "{planned}"
    );
    let catalog = TestCatalog::sql_in(&dir.path().join("lake"));
    let before = catalog.read_both("db.small");
    assert_eq!(
        before["snapshots"].as_array().unwrap().len(),
        6,
        "a dry run commits nothing"
    );

    let done = rewrite(&[]);
    assert_eq!(
        (&done["manifests_before"], &done["manifests_after"]),
        (&json!(6), &json!(1)),
        "{done}"
    );
    let after = catalog.read_both("db.small");
    assert_eq!(after["rows"], before["rows"]);
    assert_eq!(after["row_count"], 6);
    let current = after["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["snapshot_id"] == after["current_snapshot_id"])
        .unwrap();
    assert_eq!(current["snapshot_id"], done["snapshot_id"]);
    assert_eq!(current["operation"], "replace");
    assert_eq!(current["summary"]["total-records"], "6");

    let again = rewrite(&[]);
    assert_eq!(
        (&again["manifests_before"], &again["snapshot_id"]),
        (&json!(1), &Value::Null),
        "{again}"
    );
}

/// `outflow iceberg expire-snapshots` on five appends and a truncate: a dry run says what it
/// would expire and delete and changes nothing; keeping the last two snapshots deletes the
/// manifest lists of the others and no data file (the append before the truncate still
/// reaches them all); keeping one deletes the data files only the expired snapshots held.
/// Both readers read the same rows throughout, and the files left on disk are exactly the
/// ones the remaining snapshots reach.
#[test]
fn expire_snapshots_removes_old_snapshots_and_only_the_files_they_alone_reach() {
    let dir = tempfile::tempdir().unwrap();
    one_row_commits(dir.path(), "db.hist", 6, |n| {
        let disposition = if n == 5 { "truncate" } else { "append" };
        format!("    write_disposition: {disposition}\n")
    });
    let expire = |extra: &[&str]| {
        let args = [&["--older-than", "0s"], extra].concat();
        maintenance(dir.path(), "expire-snapshots", "db.hist", &args)
    };
    let catalog = TestCatalog::sql_in(&dir.path().join("lake"));
    let parquet = || parquet_files(dir.path());
    let snapshots = |read: &Value| read["snapshots"].as_array().unwrap().len();
    let before = catalog.read_both("db.hist");
    assert_eq!(before["row_count"], 1, "the truncate left its one row");
    assert_eq!((snapshots(&before), parquet()), (6, 6));
    let history = catalog.java_snapshot_rows("db.hist");
    let mut counts: Vec<u64> = history
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 1, 2, 3, 4, 5], "{history}");
    // Time travel to each snapshot still there reads what it read before.
    let travel = |kept: usize| {
        let now = catalog.java_snapshot_rows("db.hist");
        let now = now.as_object().unwrap();
        assert_eq!(now.len(), kept, "{now:?}");
        for (id, rows) in now {
            assert_eq!(&history[id], rows, "snapshot {id}");
        }
    };

    let planned = expire(&["--retain-last", "1", "--dry-run"]);
    assert_eq!(planned["expired"].as_array().unwrap().len(), 5, "{planned}");
    assert_eq!(planned["deleted"]["data_files"], 5, "{planned}");
    assert_eq!(planned["deleted"]["manifest_lists"], 5, "{planned}");
    assert_eq!(
        (snapshots(&catalog.read_both("db.hist")), parquet()),
        (6, 6),
        "a dry run changes nothing"
    );

    let kept_two = expire(&["--retain-last", "2"]);
    assert_eq!(
        (kept_two["expired"].as_array().unwrap().len(), &kept_two["kept"]),
        (4, &json!(2)),
        "{kept_two}"
    );
    assert_eq!(kept_two["deleted"]["data_files"], 0, "{kept_two}");
    assert_eq!(kept_two["deleted"]["manifest_lists"], 4, "{kept_two}");
    assert_eq!(kept_two["not_deleted"], json!([]), "{kept_two}");
    let after = catalog.read_both("db.hist");
    assert_eq!(after["rows"], before["rows"]);
    assert_eq!((snapshots(&after), parquet()), (2, 6));
    assert_eq!(after["current_snapshot_id"], before["current_snapshot_id"]);
    travel(2);

    let kept_one = expire(&["--retain-last", "1"]);
    assert_eq!(kept_one["expired"].as_array().unwrap().len(), 1, "{kept_one}");
    assert_eq!(kept_one["deleted"]["data_files"], 5, "{kept_one}");
    let last = catalog.read_both("db.hist");
    assert_eq!(last["rows"], before["rows"]);
    assert_eq!((snapshots(&last), parquet()), (1, 1));
    travel(1);
    // Only what the current snapshot reaches is left: its manifest list and manifests.
    let metadata_files = files_under(&dir.path().join("lake/wh/db/hist/metadata"));
    let lists = metadata_files
        .iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("snap-"))
        .count();
    assert_eq!(lists, 1, "{metadata_files:?}");

    let again = expire(&["--retain-last", "1"]);
    assert_eq!(
        (&again["expired"], &again["kept"]),
        (&json!([]), &json!(1)),
        "{again}"
    );
}

/// A snapshot a tag points at (made by PyIceberg) stays, and so do its files, while the
/// untagged ones around it go.
#[test]
fn expire_snapshots_keeps_what_a_tag_points_at() {
    let dir = tempfile::tempdir().unwrap();
    one_row_commits(dir.path(), "db.tagged", 3, |_| {
        "    write_disposition: truncate\n".to_string()
    });
    let catalog = TestCatalog::sql_in(&dir.path().join("lake"));
    let tagged = catalog.pyiceberg_tag_oldest("db.tagged", "first-load", None);
    let report = maintenance(
        dir.path(),
        "expire-snapshots",
        "db.tagged",
        &["--older-than", "0s"],
    );
    assert_eq!(report["expired"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["kept"], 2, "{report}");
    assert_eq!(
        report["deleted"]["data_files"], 1,
        "the middle truncate's file: {report}"
    );
    let read = catalog.read_both("db.tagged");
    let ids: Vec<&Value> = read["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["snapshot_id"])
        .collect();
    assert!(ids.contains(&&tagged["snapshot_id"]), "{read}");
    assert_eq!(read["row_count"], 1);
    assert_eq!(
        parquet_files(dir.path()),
        2,
        "the tagged snapshot's file and the current one's"
    );
}

/// A job whose Iceberg warehouse is in S3 (SeaweedFS): the keys come through `${ENV}`, the
/// run writes every row to the store, PyIceberg reads them back from it, and neither
/// `plan --json` nor the run's output shows the secret.
#[test]
fn a_job_writes_into_an_s3_warehouse_with_keys_from_the_environment() {
    let s3 = outflow_testkit::iceberg::S3Store::from_env();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "in.csv", "id,name\n1,ada\n2,grace\n3,edsger\n");
    let warehouse = format!("s3://{}/{}", s3.bucket, outflow_testkit::unique_name("job"));
    let job = write(
        dir.path(),
        "job.yaml",
        &format!(
            "source:\n  path: in.csv\nsink:\n  iceberg:\n    table: db.people\n    catalog:\n\
             \x20     type: sql\n      uri: lake/catalog.db\n      warehouse: {warehouse}\n\
             \x20     properties:\n        s3.endpoint: '${{OUTFLOW_S3_ENDPOINT}}'\n\
             \x20       s3.region: us-east-1\n        s3.path-style-access: 'true'\n\
             \x20       s3.access-key-id: '${{S3_KEY}}'\n        s3.secret-access-key: '${{S3_SECRET}}'\n"
        ),
    );
    std::fs::create_dir_all(dir.path().join("lake")).unwrap();
    let run = |verb: &str| {
        outflow()
            .env("OUTFLOW_S3_ENDPOINT", &s3.endpoint)
            .env("S3_KEY", &s3.access_key_id)
            .env("S3_SECRET", &s3.secret_access_key)
            .args([verb, "--json"])
            .arg(&job)
            .assert()
            .success()
    };
    let plan = run("plan");
    let ran = run("run");
    for output in [plan.get_output(), ran.get_output()] {
        let shown = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!shown.contains(&s3.secret_access_key), "{shown}");
    }
    let readers = TestCatalog::SqlInStore {
        name: "outflow".into(),
        db: dir.path().join("lake/catalog.db"),
        warehouse,
        properties: s3.properties(),
    };
    let read = readers.read_both("db.people");
    assert_eq!(read["row_count"], 3, "{read}");
    assert!(!dir.path().join("lake/wh").exists() && !dir.path().join("lake/warehouse").exists());
}

/// `outflow iceberg compact`: a dry run says what it would rewrite and writes nothing; a
/// run rewrites six one-row files into one in a replace snapshot both readers read the same
/// rows from; expiring the older snapshots then leaves that one file.
#[test]
fn compact_rewrites_small_files_and_expiry_removes_the_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    one_row_commits(dir.path(), "db.small", 6, |_| String::new());
    let catalog = TestCatalog::sql_in(&dir.path().join("lake"));
    let before = catalog.read_both("db.small");
    let compact = |extra: &[&str]| maintenance(dir.path(), "compact", "db.small", extra);

    let planned = compact(&["--dry-run"]);
    assert_eq!(
        (&planned["data_files_before"], &planned["data_files_after"]),
        (&json!(6), &json!(1)),
        "{planned}"
    );
    assert_eq!(planned["groups"][0]["input_files"], 6, "{planned}");
    assert_eq!(parquet_files(dir.path()), 6, "a dry run writes nothing");
    let too_many = compact(&["--dry-run", "--min-input-files", "7"]);
    assert_eq!(too_many["groups"], json!([]), "{too_many}");

    let done = compact(&[]);
    assert!(done["snapshot_id"].is_i64(), "{done}");
    assert_eq!(done["groups"][0]["output_records"], 6, "{done}");
    let after = catalog.read_both("db.small");
    assert_eq!(after["rows"], before["rows"]);
    assert_eq!(parquet_files(dir.path()), 7, "the old files stay for time travel");
    maintenance(
        dir.path(),
        "expire-snapshots",
        "db.small",
        &["--older-than", "0s"],
    );
    assert_eq!(parquet_files(dir.path()), 1);
    assert_eq!(catalog.read_both("db.small")["rows"], before["rows"]);

    let text = outflow()
        .current_dir(dir.path())
        .args(["iceberg", "compact", "--catalog-uri", "lake/catalog.db"])
        .args(["--warehouse", "lake/wh", "--table", "db.small"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&text.get_output().stdout).to_string();
    assert_eq!(text, "db.small: 1 data files, nothing to compact\n");
    outflow()
        .current_dir(dir.path())
        .args(["iceberg", "compact", "--catalog-uri", "lake/catalog.db"])
        .args([
            "--warehouse",
            "lake/wh",
            "--table",
            "db.small",
            "--partition",
            "nonsense",
        ])
        .assert()
        .code(2)
        .stderr(contains("'nonsense' is not FIELD=VALUE"));
}

/// Retention set on the table and its refs: a tag past its `max-ref-age-ms` (set by
/// PyIceberg) is removed with the snapshot only it kept, and the table's
/// `history.expire.min-snapshots-to-keep` applies when `--retain-last` is not given.
#[test]
fn expire_snapshots_follows_the_retention_of_refs_and_table() {
    let dir = tempfile::tempdir().unwrap();
    one_row_commits(dir.path(), "db.kept", 4, |_| {
        "    write_disposition: truncate\n    table_options: { properties: { history.expire.min-snapshots-to-keep: \"2\" } }\n"
            .to_string()
    });
    let catalog = TestCatalog::sql_in(&dir.path().join("lake"));
    catalog.pyiceberg_tag_oldest("db.kept", "aged", Some(1));
    let report = maintenance(dir.path(), "expire-snapshots", "db.kept", &["--older-than", "0s"]);
    assert_eq!(report["expired_refs"], json!(["aged"]), "{report}");
    assert_eq!(
        (report["expired"].as_array().unwrap().len(), &report["kept"]),
        (2, &json!(2)),
        "the table keeps two of main's snapshots; the aged tag no longer holds the first: {report}"
    );
    let read = catalog.read_both("db.kept");
    assert_eq!(read["snapshots"].as_array().unwrap().len(), 2, "{read}");
    assert_eq!(read["row_count"], 1);
    assert_eq!(
        parquet_files(dir.path()),
        2,
        "the files of the two snapshots kept"
    );
    let history = catalog.java_snapshot_rows("db.kept");
    assert!(
        history.as_object().unwrap().values().all(|rows| rows == 1),
        "{history}"
    );
}

/// Commits `count` one-row files (`in-N.csv`, id N) into `table` of `lake/`, one run
/// each, with `sink_extra(N)` as more sink keys (YAML lines indented as sink keys).
fn one_row_commits(dir: &Path, table: &str, count: usize, sink_extra: impl Fn(usize) -> String) {
    for n in 0..count {
        write(dir, &format!("in-{n}.csv"), &format!("id,name\n{n},name-{n}\n"));
        let job = write(
            dir,
            "job.yaml",
            &format!(
                "source:\n  path: in-{n}.csv\nsink:\n  iceberg:\n\
                 \x20   catalog: {{ type: sql, uri: lake/catalog.db, warehouse: lake/wh }}\n\
                 \x20   table: {table}\n{}",
                sink_extra(n)
            ),
        );
        outflow().args(["run", "--quiet"]).arg(&job).assert().success();
    }
}

/// `outflow iceberg remove-orphans`: files no snapshot references (a data file and a
/// manifest a killed writer left, made old) are listed by a dry run and deleted by a run;
/// one younger than the safety age and every referenced file stay, and both readers read
/// the same rows after.
#[test]
fn remove_orphans_deletes_old_unreferenced_files_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    one_row_commits(dir.path(), "db.orphans", 3, |_| String::new());
    let table_dir = dir.path().join("lake/wh/db/orphans");
    let referenced = files_under(&table_dir);
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(4 * 24 * 3600);
    let plant = |relative: &str, modified: Option<std::time::SystemTime>| {
        let path = table_dir.join(relative);
        std::fs::write(&path, b"left by a writer that never committed").unwrap();
        if let Some(time) = modified {
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(time)
                .unwrap();
        }
        path
    };
    let data = plant("data/00000-killed.parquet", Some(old));
    let manifest = plant("metadata/killed-m0.avro", Some(old));
    let young = plant("data/00001-running.parquet", None);
    let catalog = TestCatalog::sql_in(&dir.path().join("lake"));
    let before = catalog.read_both("db.orphans");
    let remove = |extra: &[&str]| maintenance(dir.path(), "remove-orphans", "db.orphans", extra);
    let planned = remove(&["--dry-run"]);
    let expected = json!([data.display().to_string(), manifest.display().to_string()]);
    assert_eq!(planned["orphans"], expected, "{planned}");
    assert_eq!(planned["too_young"], 1, "{planned}");
    assert!(data.exists() && manifest.exists(), "a dry run deletes nothing");

    let done = remove(&[]);
    assert_eq!(done["orphans"], expected, "{done}");
    assert_eq!(done["not_deleted"], json!([]), "{done}");
    assert!(!data.exists() && !manifest.exists());
    assert!(young.exists(), "younger than the safety age");
    let mut left = files_under(&table_dir);
    left.retain(|p| p != &young);
    left.sort();
    let mut referenced = referenced;
    referenced.sort();
    assert_eq!(left, referenced);
    assert_eq!(catalog.read_both("db.orphans")["rows"], before["rows"]);

    let all = remove(&["--older-than", "0s"]);
    assert_eq!(all["orphans"], json!([young.display().to_string()]), "{all}");
    assert!(!young.exists());
    assert_eq!(catalog.read_both("db.orphans")["row_count"], 3);
}

/// Runs `outflow iceberg COMMAND --table TABLE --json EXTRA...` on the catalog in
/// `dir/lake`, expecting success; its JSON report.
fn maintenance(dir: &Path, command: &str, table: &str, extra: &[&str]) -> Value {
    let out = outflow()
        .current_dir(dir)
        .args(["iceberg", command, "--catalog-uri", "lake/catalog.db"])
        .args(["--warehouse", "lake/wh", "--table", table, "--json"])
        .args(extra)
        .assert()
        .success();
    serde_json::from_slice(&out.get_output().stdout).unwrap()
}

/// How many Parquet files are under the warehouse in `dir/lake`.
fn parquet_files(dir: &Path) -> usize {
    files_under(&dir.join("lake/wh"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .count()
}

/// `db.people` of the job's catalog under `dir` as Java Iceberg reads it (applying deletes):
/// `(id, name)` sorted, and the whole read.
fn people_by_java(dir: &Path) -> (Vec<(i64, String)>, Value) {
    let read = lake_catalog(dir).read(outflow_testkit::iceberg::Reader::Java, "db.people");
    let mut rows: Vec<(i64, String)> = outflow_testkit::iceberg::rows(&read)
        .iter()
        .map(|r| (r["id"].as_i64().unwrap(), r["name"].as_str().unwrap().to_string()))
        .collect();
    rows.sort();
    (rows, read)
}

#[test]
fn a_job_applies_change_files_by_key_and_plan_says_it_upserts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("changes")).unwrap();
    write(
        dir.path(),
        "changes/1.ndjson",
        concat!(
            "{\"id\": 1, \"op\": \"c\", \"name\": \"ada\"}\n",
            "{\"id\": 2, \"op\": \"c\", \"name\": \"alan\"}\n",
            "{\"id\": 1, \"op\": \"u\", \"name\": \"ada lovelace\"}\n",
            "{\"id\": 3, \"op\": \"c\", \"name\": \"grace\"}\n",
        ),
    );
    let job = write(
        dir.path(),
        "cdc.yaml",
        &format!(
            "source:\n  path: changes/*.ndjson\n{SINK}    changes: {{ key: [id], operation: {{ column: op }} }}\n"
        ),
    );
    outflow()
        .arg("plan")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains("upsert by key [id]").and(contains("create")));
    outflow().arg("run").arg(&job).arg("--quiet").assert().success();

    // The next file updates, deletes and re-inserts keys of the first run.
    write(
        dir.path(),
        "changes/2.ndjson",
        concat!(
            "{\"id\": 2, \"op\": \"d\", \"name\": null}\n",
            "{\"id\": 3, \"op\": \"u\", \"name\": \"grace hopper\"}\n",
            "{\"id\": 4, \"op\": \"c\", \"name\": \"linus\"}\n",
            "{\"id\": 4, \"op\": \"d\", \"name\": null}\n",
            "{\"id\": 2, \"op\": \"c\", \"name\": \"alan turing\"}\n",
        ),
    );
    outflow().arg("run").arg(&job).arg("--quiet").assert().success();
    let (rows, read) = people_by_java(dir.path());
    assert_eq!(
        rows,
        [
            (1, "ada lovelace".to_string()),
            (2, "alan turing".to_string()),
            (3, "grace hopper".to_string())
        ]
    );
    let names: Vec<&str> = outflow_testkit::iceberg::fields(&read)
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["id", "name"], "the operation column is not written");
}

#[test]
fn debezium_events_in_ndjson_files_are_unwrapped_and_applied_by_key() {
    let dir = tempfile::tempdir().unwrap();
    // The first file's event sits under the JSON converter's `payload`, the others are
    // bare, as Debezium writes either. The second file creates, updates and deletes keys.
    write(
        dir.path(),
        "events.ndjson",
        "{\"schema\": null, \"payload\": {\"before\": null, \"after\": {\"id\": 1, \"name\": \"ada\"}, \"op\": \"r\", \"source\": {\"db\": \"crm\"}, \"ts_ms\": 1}}\n",
    );
    write(
        dir.path(),
        "more.ndjson",
        concat!(
            "{\"before\": null, \"after\": {\"id\": 2, \"name\": \"alan\"}, \"op\": \"c\", \"source\": {\"db\": \"crm\"}, \"ts_ms\": 2}\n",
            "{\"before\": {\"id\": 2, \"name\": \"alan\"}, \"after\": {\"id\": 2, \"name\": \"alan turing\"}, \"op\": \"u\", \"source\": {\"db\": \"crm\"}, \"ts_ms\": 3}\n",
            "{\"before\": {\"id\": 3, \"name\": \"grace\"}, \"after\": null, \"op\": \"d\", \"source\": {\"db\": \"crm\"}, \"ts_ms\": 4}\n",
            "{\"before\": null, \"after\": {\"id\": 4, \"name\": \"linus\"}, \"op\": \"c\", \"source\": {\"db\": \"crm\"}, \"ts_ms\": 5}\n",
        ),
    );
    let changes = "    changes: { key: [id], operation: { column: op } }\ntransforms:\n  - debezium: {}\n";
    let first = write(
        dir.path(),
        "first.yaml",
        &format!("source:\n  path: events.ndjson\n{SINK}{changes}"),
    );
    outflow().arg("run").arg(&first).arg("--quiet").assert().success();
    let second = write(
        dir.path(),
        "second.yaml",
        &format!("source:\n  path: more.ndjson\n{SINK}{changes}"),
    );
    outflow()
        .arg("run")
        .arg(&second)
        .arg("--quiet")
        .assert()
        .success();
    // A delete of the first run's key, in a later file.
    write(
        dir.path(),
        "more.ndjson",
        "{\"before\": {\"id\": 1, \"name\": \"ada\"}, \"after\": null, \"op\": \"d\", \"source\": {\"db\": \"crm\"}, \"ts_ms\": 6}\n",
    );
    outflow()
        .arg("run")
        .arg(&second)
        .arg("--quiet")
        .arg("--reload")
        .assert()
        .success();

    let (rows, _) = people_by_java(dir.path());
    assert_eq!(rows, [(2, "alan turing".to_string()), (4, "linus".to_string())]);
}
