//! `outflow iceberg add-files` against a real SQLite catalog: files written by pyarrow, the
//! table read back by PyIceberg and Java Iceberg, and the exit codes scripts rely on.

use crate::outflow;
use std::path::Path;

use outflow_testkit::iceberg::TestCatalog;
use predicates::str::contains;
use serde_json::{Value, json};

fn pyarrow(dir: &Path, code: &str) {
    let preamble = "import sys, os\nimport pyarrow as pa, pyarrow.parquet as pq\nD = sys.argv[1]\n";
    outflow_testkit::run(
        std::process::Command::new(outflow_testkit::python())
            .arg("-c")
            .arg(format!("{preamble}{code}"))
            .arg(dir),
    );
}

fn add_files(dir: &Path) -> assert_cmd::Command {
    let mut cmd = outflow();
    cmd.current_dir(dir).args([
        "iceberg",
        "add-files",
        "--catalog-uri",
        "catalog.db",
        "--warehouse",
        "warehouse",
        "--table",
        "db.events",
    ]);
    cmd
}

#[test]
fn add_files_registers_evolves_and_reports_with_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    pyarrow(
        d,
        r#"
pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])}), f"{D}/a.parquet")
pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "v": pa.array(["c"]), "w": pa.array([1.5])}), f"{D}/b.parquet")
pq.write_table(pa.table({"id": pa.array(["x"]), "v": pa.array(["d"])}), f"{D}/bad.parquet")
open(f"{D}/notes.parquet", "w").write("not parquet")
"#,
    );

    // Creates the table; the human output is a short table.
    add_files(d)
        .arg("a.parquet")
        .assert()
        .success()
        .stdout(contains("Table db.events"))
        .stdout(contains("1 given, 1 added, 0 skipped, 0 failed"));

    // Under fail (the default), an incompatible file rejects the whole window: exit 3.
    let out = add_files(d)
        .args(["--allow", "field-addition", "--json", "b.parquet", "bad.parquet"])
        .assert()
        .code(3)
        .get_output()
        .stdout
        .clone();
    let doc: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(doc["command"], "iceberg add-files");
    assert_eq!(
        (doc["status"].clone(), doc["rejected"].clone()),
        (json!("rejected"), json!(true))
    );
    assert_eq!(doc["errors"][0]["kind"], json!("incompatible"));
    assert!(doc["snapshots"].as_array().unwrap().is_empty());

    // A dry run lists the change and commits nothing.
    add_files(d)
        .args([
            "--allow",
            "field-addition",
            "--on-incompatible",
            "route-to-errors",
            "--dry-run",
            "b.parquet",
        ])
        .assert()
        .success()
        .stdout(contains("dry run"))
        .stdout(contains("└── + w: double\n"))
        .stdout(contains("files: b.parquet\n"));

    // Routed: the good file is registered from stdin, the bad ones listed (one not
    // Parquet, one incompatible): files rejected, exit 3, as rejected records are for run.
    let out = add_files(d)
        .args([
            "--allow",
            "field-addition",
            "--on-incompatible",
            "route-to-errors",
            "--json",
            "-",
        ])
        .write_stdin("b.parquet\nbad.parquet\nnotes.parquet\na.parquet\n")
        .assert()
        .code(3)
        .get_output()
        .stdout
        .clone();
    let doc: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(doc["files_added"], json!(1));
    let kinds: Vec<&str> = doc["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["not_parquet", "incompatible"]);
    assert_eq!(doc["skipped"][0]["reason"], json!("already_registered"));

    let read = TestCatalog::sql_in(d).read_both("db.events");
    let mut rows = outflow_testkit::iceberg::rows(&read).clone();
    rows.sort_by_key(|r| r["id"].as_i64());
    assert_eq!(
        rows,
        vec![
            json!({"id": 1, "v": "a", "w": null}),
            json!({"id": 2, "v": "b", "w": null}),
            json!({"id": 3, "v": "c", "w": 1.5})
        ]
    );
}

#[test]
fn add_files_usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    add_files(dir.path())
        .args(["--allow", "teleportation", "x.parquet"])
        .assert()
        .code(2)
        .stderr(contains("--allow"));
    outflow()
        .args([
            "iceberg",
            "add-files",
            "--catalog-uri",
            "c.db",
            "--table",
            "db.t",
            "x.parquet",
        ])
        .assert()
        .code(2)
        .stderr(contains("--warehouse"));
}

#[test]
fn a_dry_run_prints_a_change_as_plan_does_and_flags_take_the_job_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    pyarrow(
        d,
        r#"
pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), f"{D}/a.parquet")
pq.write_table(pa.table({"id": pa.array([2], pa.int64()), "w": pa.array([1.5])}), f"{D}/b.parquet")
"#,
    );
    add_files(d).arg("a.parquet").assert().success();

    // The same change, the same line, whether add-files or plan prints it.
    let change = "  └── + w: double\n";
    for spelling in ["allow_field_addition", "field-addition", "ALLOW_FIELD_ADDITION"] {
        add_files(d)
            .args(["--allow", spelling, "--dry-run", "b.parquet"])
            .assert()
            .success()
            .stdout(contains(change));
    }
    let job = d.join("job.yaml");
    std::fs::write(
        &job,
        "source: {path: b.parquet}\nsink:\n  iceberg:\n    catalog: {type: sql, uri: catalog.db, warehouse: warehouse}\n    \
         table: db.events\n    schema_evolution: {options: [allow_field_addition]}\n",
    )
    .unwrap();
    outflow()
        .arg("plan")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains("db.events: update\n"))
        .stdout(contains(change));

    // Flags named after the job file's keys; the old names still work, and values take the
    // job file's spellings.
    for flags in [
        [
            "--on-unverifiable",
            "accept",
            "--max-concurrent-reads",
            "4",
            "--on-incompatible",
            "route_to_errors",
            "--create-disposition",
            "create_never",
        ],
        [
            "--unverifiable",
            "accept",
            "--concurrency",
            "4",
            "--on-incompatible",
            "route-to-errors",
            "--create-disposition",
            "create-never",
        ],
    ] {
        add_files(d)
            .args(["--allow", "allow_field_addition", "--dry-run"])
            .args(flags)
            .arg("b.parquet")
            .assert()
            .success()
            .stdout(contains(change));
    }
}
