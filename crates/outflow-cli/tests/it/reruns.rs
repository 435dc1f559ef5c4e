//! Reruns are exactly-once: a job run again on the same files loads only what is new, and
//! says so; a run killed at any moment and run again holds each row once. Tables are read
//! back by PyIceberg and Java Iceberg.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use outflow_testkit::iceberg::{TestCatalog, rows};
use predicates::prelude::*;
use predicates::str::contains;
use serde_json::Value;

use crate::outflow;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

fn catalog(dir: &Path) -> TestCatalog {
    TestCatalog::sql_in(&dir.join("lake"))
}

fn job(dir: &Path, name: &str, path: &str, table: &str, extra: &str) -> PathBuf {
    write(
        dir,
        name,
        &format!(
            "source:\n  path: {path}\n\
             sink:\n  iceberg:\n    catalog: {{ type: sql, uri: lake/catalog.db, warehouse: lake/wh }}\n\
             \x20   table: {table}\n{extra}"
        ),
    )
}

/// The ids in a table as read, sorted, with how often each appears.
fn id_counts(read: &Value) -> BTreeMap<i64, usize> {
    let mut counts = BTreeMap::new();
    for row in rows(read) {
        *counts.entry(row["id"].as_i64().unwrap()).or_default() += 1;
    }
    counts
}

/// The file names in the current snapshot's record of loaded files.
fn recorded_files(read: &Value) -> Vec<String> {
    // Snapshots are listed in metadata order, which is not commit order.
    let last = read["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["snapshot_id"] == read["current_snapshot_id"])
        .expect("the current snapshot");
    let text = last["summary"]["outflow.loaded-files"]
        .as_str()
        .unwrap_or_else(|| panic!("no record of loaded files in {last}"));
    let files: Vec<Value> = serde_json::from_str(text).unwrap();
    files
        .iter()
        .map(|f| {
            assert!(f["size"].as_u64().unwrap() > 0, "{f}");
            assert!(f["modified_ms"].as_i64().unwrap() > 0, "{f}");
            let path = f["path"].as_str().unwrap();
            assert!(Path::new(path).is_absolute(), "{path}");
            Path::new(path)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn a_rerun_loads_only_the_new_files_and_says_which_it_skipped() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "in/a.csv", "id,name\n1,ada\n2,alan\n");
    write(dir.path(), "in/b.csv", "id,name\n3,grace\n");
    let job = job(dir.path(), "job.yaml", "in/*.csv", "db.people", "");
    outflow().arg("run").arg(&job).arg("--quiet").assert().success();
    let read = catalog(dir.path()).read_both("db.people");
    assert_eq!(recorded_files(&read), ["a.csv", "b.csv"]);

    // The same files again: nothing to load, and the run says why.
    outflow()
        .arg("run")
        .arg(&job)
        .arg("--quiet")
        .assert()
        .success()
        .stdout(
            contains("Skipped 2 files db.people already holds from an earlier run").and(contains("--reload")),
        );
    let read = catalog(dir.path()).read_both("db.people");
    assert_eq!(read["snapshots"].as_array().unwrap().len(), 1, "no empty commit");

    // A new file: plan says what a run skips, and the run loads only the new one.
    write(dir.path(), "in/c.csv", "id,name\n4,edsger\n5,barbara\n");
    let plan = outflow().arg("plan").arg(&job).arg("--json").assert().success();
    let plan: Value = serde_json::from_slice(&plan.get_output().stdout).unwrap();
    let details = plan["destinations"][0]["details"].to_string();
    assert!(details.contains("skip 2 of 3 source files"), "{details}");
    let run = outflow().arg("run").arg(&job).arg("--json").assert().success();
    let run: Value = serde_json::from_slice(&run.get_output().stdout).unwrap();
    assert_eq!(run["result"]["destinations"]["db.people"]["rows"], 2);
    let skipped: Vec<&str> = run["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["file"].as_str().unwrap())
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(
        skipped[0].ends_with("a.csv") && skipped[1].ends_with("b.csv"),
        "{skipped:?}"
    );
    let read = catalog(dir.path()).read_both("db.people");
    assert_eq!(id_counts(&read), (1..=5).map(|id| (id, 1)).collect());
    assert_eq!(recorded_files(&read), ["a.csv", "b.csv", "c.csv"]);
}

#[test]
fn reload_loads_every_file_again_and_a_changed_file_counts_as_new() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "in/a.csv", "id,name\n1,ada\n");
    write(dir.path(), "in/b.csv", "id,name\n2,alan\n");
    let job = job(dir.path(), "job.yaml", "in/*.csv", "db.people", "");
    outflow().arg("run").arg(&job).arg("--quiet").assert().success();

    // --reload (or `reload: true`) loads the files the table holds once more.
    outflow()
        .args(["run", "--quiet", "--reload"])
        .arg(&job)
        .assert()
        .success();
    let read = catalog(dir.path()).read_both("db.people");
    assert_eq!(id_counts(&read), [(1, 2), (2, 2)].into());
    let reload_job = job_with(&job, "reload: true\n");
    outflow()
        .args(["run", "--quiet"])
        .arg(&reload_job)
        .assert()
        .success();
    assert_eq!(
        id_counts(&catalog(dir.path()).read_both("db.people")),
        [(1, 3), (2, 3)].into()
    );

    // A file rewritten with another size is another file: loaded again, whole.
    write(dir.path(), "in/b.csv", "id,name\n2,alan\n3,grace\n");
    outflow().args(["run", "--quiet"]).arg(&job).assert().success();
    assert_eq!(
        id_counts(&catalog(dir.path()).read_both("db.people")),
        [(1, 3), (2, 4), (3, 1)].into()
    );
}

fn job_with(job: &Path, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(job).unwrap() + extra;
    let path = job.with_file_name("with-extra.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_truncate_loads_everything_and_later_appends_count_from_it() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "old/a.csv", "id,name\n1,ada\n");
    write(dir.path(), "new/b.csv", "id,name\n2,alan\n");
    let append_a = job(dir.path(), "append-a.yaml", "old/a.csv", "db.people", "");
    let truncate_b = job(
        dir.path(),
        "truncate-b.yaml",
        "new/b.csv",
        "db.people",
        "    write_disposition: truncate\n",
    );
    outflow()
        .args(["run", "--quiet"])
        .arg(&append_a)
        .assert()
        .success();
    // A truncate replaces the rows, so it loads its files however often it runs.
    for _ in 0..2 {
        outflow()
            .args(["run", "--quiet"])
            .arg(&truncate_b)
            .assert()
            .success();
        assert_eq!(
            id_counts(&catalog(dir.path()).read_both("db.people")),
            [(2, 1)].into()
        );
    }
    // a.csv's rows went with the truncate, so appending it loads it again.
    outflow()
        .args(["run", "--quiet"])
        .arg(&append_a)
        .assert()
        .success();
    assert_eq!(
        id_counts(&catalog(dir.path()).read_both("db.people")),
        [(1, 1), (2, 1)].into()
    );
}

#[test]
fn with_a_table_template_each_table_skips_only_the_files_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "in/a.csv", "id,city\n1,lisbon\n2,porto\n3,lisbon\n");
    write(dir.path(), "in/b.csv", "id,city\n4,porto\n5,lisbon\n");
    // A first job loads only Lisbon's rows of a.csv (as if a run had committed one table
    // and died before the other).
    let lisbon_only = job(
        dir.path(),
        "lisbon.yaml",
        "in/a.csv",
        "db.trips_{city}",
        "transforms:\n  - filter: { column: city, op: eq, value: lisbon }\n",
    );
    outflow()
        .args(["run", "--quiet"])
        .arg(&lisbon_only)
        .assert()
        .success();

    let all = job(dir.path(), "all.yaml", "in/*.csv", "db.trips_{city}", "");
    let plan = outflow().args(["plan", "--json"]).arg(&all).assert().success();
    let plan: Value = serde_json::from_slice(&plan.get_output().stdout).unwrap();
    let lisbon = plan["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["destination"] == "db.trips_lisbon")
        .unwrap();
    assert!(
        lisbon["details"].to_string().contains("1 of 2 source files"),
        "{lisbon}"
    );
    outflow()
        .args(["run", "--quiet"])
        .arg(&all)
        .assert()
        .success()
        .stdout(contains("Skipped 1 file db.trips_lisbon already holds").and(contains("left out 2 rows")));
    let catalog = catalog(dir.path());
    assert_eq!(
        id_counts(&catalog.read_both("db.trips_lisbon")),
        [(1, 1), (3, 1), (5, 1)].into()
    );
    assert_eq!(
        id_counts(&catalog.read_both("db.trips_porto")),
        [(2, 1), (4, 1)].into()
    );

    // Run again: every table holds every file; nothing is written.
    outflow().args(["run", "--quiet"]).arg(&all).assert().success();
    assert_eq!(id_counts(&catalog.read_both("db.trips_lisbon")).len(), 3);
    assert_eq!(id_counts(&catalog.read_both("db.trips_porto")).len(), 2);
}

/// `outflow run` killed (SIGKILL, no cleanup) at moments spread over a run, each time run
/// again to the end: the table holds each row of each file exactly once.
#[test]
fn a_run_killed_at_any_moment_and_run_again_loads_each_row_once() {
    const FILES: i64 = 12;
    const ROWS: i64 = 4000;
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for f in 0..FILES {
        text.clear();
        text.push_str("id,name\n");
        for r in 0..ROWS {
            text.push_str(&format!("{},name-{r}\n", f * ROWS + r));
        }
        write(dir.path(), &format!("in/part-{f:02}.csv"), &text);
    }
    let kills = crate::killed_then_run_again(
        Duration::from_millis(30),
        |round| {
            job(
                dir.path(),
                &format!("job-{round}.yaml"),
                "in/*.csv",
                &format!("db.round_{round}"),
                "",
            )
        },
        |round| {
            let counts = catalog(dir.path()).column_stats(&format!("db.round_{round}"), "id");
            assert_eq!(counts["rows"], FILES * ROWS, "round {round}: {counts}");
            assert_eq!(counts["distinct"], FILES * ROWS, "round {round}: {counts}");
        },
    );
    assert!(
        kills >= 3,
        "the runs were killed {kills} times; the test needs a few kills to mean anything"
    );
}

/// A job with an engine section records its files in the statement's snapshot. A query
/// that reads row by row runs again over the new files only; one that combines rows
/// across files (an aggregate) refuses to run over some of them, in `plan` and in `run`,
/// until told to load them all again.
#[cfg(feature = "engine")]
#[test]
fn an_engine_job_loads_each_file_once_and_an_aggregate_refuses_to_run_over_some() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "in/a.csv", "id,name\n1,ada\n2,alan\n");
    write(dir.path(), "in/b.csv", "id,name\n3,grace\n");
    let by_row = "engine:\n  sql: SELECT id, upper(name) AS name FROM source WHERE id > 0\n";
    let rows_job = job(dir.path(), "rows.yaml", "in/*.csv", "db.people", by_row);
    let counts = "engine:\n  sql: SELECT count(*) AS n FROM source\n";
    let counts_job = job(dir.path(), "counts.yaml", "in/*.csv", "db.counts", counts);
    for job in [&rows_job, &counts_job] {
        outflow().args(["run", "--quiet"]).arg(job).assert().success();
    }
    let read = catalog(dir.path()).read_both("db.people");
    assert_eq!(recorded_files(&read), ["a.csv", "b.csv"]);
    assert_eq!(id_counts(&read), (1..=3).map(|id| (id, 1)).collect());

    // Nothing new: neither statement runs.
    for (job, table) in [(&rows_job, "db.people"), (&counts_job, "db.counts")] {
        outflow()
            .arg("run")
            .arg(job)
            .assert()
            .success()
            .stdout(contains(format!(
                "Skipped 2 files {table} already holds from an earlier run"
            )));
        let read = catalog(dir.path()).read_both(table);
        assert_eq!(read["snapshots"].as_array().unwrap().len(), 1, "{table}");
    }

    // A new file: the row-by-row query loads it alone.
    write(dir.path(), "in/c.csv", "id,name\n4,edsger\n");
    outflow()
        .args(["run", "--quiet"])
        .arg(&rows_job)
        .assert()
        .success()
        .stdout(contains("Skipped 2 files db.people"));
    let read = catalog(dir.path()).read_both("db.people");
    assert_eq!(id_counts(&read), (1..=4).map(|id| (id, 1)).collect());
    assert_eq!(recorded_files(&read), ["a.csv", "b.csv", "c.csv"]);

    // The count would be over c.csv alone: refused, by plan as by run, naming the reason.
    let plan = outflow()
        .arg("plan")
        .arg(&counts_job)
        .arg("--json")
        .assert()
        .code(1);
    let plan: Value = serde_json::from_slice(&plan.get_output().stdout).unwrap();
    let error = plan["destinations"][0]["error"].to_string();
    assert!(
        error.contains("an aggregate") && error.contains("--reload"),
        "{plan}"
    );
    let refused = outflow().arg("run").arg(&counts_job).assert().code(1);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).to_string();
    assert!(
        stderr.contains("db.counts holds 2 of the 3 files the query reads")
            && stderr.contains("combines rows across files (an aggregate)"),
        "{stderr}"
    );
    let counted = |read: &Value| -> Vec<i64> {
        let mut n: Vec<i64> = rows(read).iter().map(|r| r["n"].as_i64().unwrap()).collect();
        n.sort();
        n
    };
    assert_eq!(counted(&catalog(dir.path()).read_both("db.counts")), [3]);
    // Told to, it counts every file again; the next run has nothing new.
    outflow()
        .args(["run", "--quiet", "--reload"])
        .arg(&counts_job)
        .assert()
        .success();
    assert_eq!(counted(&catalog(dir.path()).read_both("db.counts")), [3, 4]);
    outflow()
        .arg("run")
        .arg(&counts_job)
        .assert()
        .success()
        .stdout(contains("Skipped 3 files db.counts"));
}
