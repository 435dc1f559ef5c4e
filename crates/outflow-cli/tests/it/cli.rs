//! The `outflow` binary as a user runs it: help, exit codes and error messages.
//!
//! Runs against real sinks live with the sink crates' wiring; these tests cover what needs
//! no sink: help, bad job files (exit 2), and the source through `outflow check` (exit 1
//! for data that does not read, 2 for a path that matches nothing).

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use assert_cmd::cargo::cargo_bin_cmd;
use predicates::prelude::*;
use predicates::str::contains;

/// A sink that needs no service: an in-memory Iceberg catalog.
pub(crate) const SINK: &str = "sink:\n  iceberg: { catalog: { type: memory }, table: db.t }\n";

fn outflow() -> assert_cmd::Command {
    let mut cmd = cargo_bin_cmd!("outflow");
    cmd.env_remove("NO_COLOR").env_remove("OUTFLOW_LOG");
    cmd
}

/// Writes `text` to `dir/name` (a job file, or its data) and returns the path.
pub(crate) fn job(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn help_lists_the_commands_examples_and_exit_codes() {
    outflow()
        .arg("--help")
        .assert()
        .success()
        .stdout(contains("run").and(contains("plan")).and(contains("check")))
        .stdout(contains("outflow run examples/jobs/quickstart.yaml"))
        .stdout(contains("Exit codes").and(contains("3   rejected: finished")));
    for (command, example) in [
        ("run", "outflow run nightly.yaml --json"),
        ("plan", "outflow plan job.yaml --json"),
        ("check", "outflow check job.yaml --schema-only"),
    ] {
        outflow()
            .args([command, "--help"])
            .assert()
            .success()
            .stdout(contains("Examples:").and(contains(example)));
    }
    // One meaning per exit code: every command's help ends with the same block.
    let block = |args: &[&str]| {
        let out = outflow()
            .args(args)
            .arg("--help")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let start = text
            .find("Exit codes (the same for every outflow command):")
            .unwrap_or_else(|| panic!("{args:?} --help has no exit codes:\n{text}"));
        text[start..].trim_end().to_string()
    };
    let top = block(&[]);
    assert!(
        top.contains("3   rejected: finished, but some inputs were rejected and not written"),
        "{top}"
    );
    for command in [
        &["run"][..],
        &["plan"],
        &["check"],
        &["iceberg", "add-files"],
        &["bigquery", "ensure-table"],
        &["bigtable", "ensure-table"],
    ] {
        assert_eq!(block(command), top, "{command:?}");
    }
    outflow()
        .arg("--version")
        .assert()
        .success()
        .stdout(contains("outflow"));
}

#[test]
fn bad_arguments_are_usage_errors() {
    outflow()
        .arg("run")
        .assert()
        .code(2)
        .stderr(contains("<JOB.yaml>"));
    outflow().arg("frobnicate").assert().code(2);
}

#[test]
fn a_missing_job_file_is_named() {
    outflow()
        .args(["run", "no/such/job.yaml"])
        .assert()
        .code(2)
        .stderr(contains("cannot read job file no/such/job.yaml"));
}

#[test]
fn an_unknown_key_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = job(
        dir.path(),
        "job.yaml",
        &format!("source:\n  path: in.csv\n  fromat: csv\n{SINK}"),
    );
    for command in ["run", "plan", "check"] {
        outflow()
            .arg(command)
            .arg(&path)
            .assert()
            .code(2)
            .stderr(contains(
                "job.yaml: line 3, column 3: source: unknown field `fromat`",
            ));
    }
}

#[test]
fn a_wrong_type_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = job(
        dir.path(),
        "job.yaml",
        &format!(
            "source:\n  path: in.csv\ntransforms:\n  - filter: {{ column: a, op: gt, value: [1] }}\n{SINK}"
        ),
    );
    outflow()
        .arg("run")
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains("line 4").and(contains("transforms[0]")));
}

#[test]
fn a_missing_or_unknown_sink_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = job(dir.path(), "job.yaml", "source:\n  path: in.csv\n");
    outflow()
        .arg("run")
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains("missing field `sink`"));
    let path = job(
        dir.path(),
        "other.yaml",
        "source:\n  path: in.csv\nsink:\n  kafka: { topic: t }\n",
    );
    outflow()
        .arg("plan")
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains("line 4").and(contains(
            "unknown sink `kafka`, expected one of iceberg, bigquery, bigtable",
        )));
}

#[test]
fn variables_are_required_and_secrets_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let path = job(
        dir.path(),
        "job.yaml",
        &format!("source:\n  path: in.csv\n  batch_size: ${{BATCH_TOKEN}}\n{SINK}"),
    );
    outflow()
        .arg("check")
        .arg(&path)
        .env_remove("BATCH_TOKEN")
        .assert()
        .code(2)
        .stderr(contains("line 3: environment variable BATCH_TOKEN is not set"));
    outflow()
        .args(["check", "--json"])
        .arg(&path)
        .env("BATCH_TOKEN", "hunter2-very-secret")
        .assert()
        .code(2)
        .stderr(contains("${BATCH_TOKEN}").and(contains("hunter2").not()))
        .stdout(contains("hunter2").not());
}

#[test]
fn a_source_path_that_matches_nothing_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = job(
        dir.path(),
        "job.yaml",
        &format!("source:\n  path: missing/*.csv\n{SINK}"),
    );
    outflow()
        .arg("check")
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains("source.path: no file matches").and(contains("missing/*.csv")));
    let path = job(
        dir.path(),
        "file.yaml",
        &format!("source:\n  path: gone.parquet\n{SINK}"),
    );
    outflow()
        .arg("check")
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains("gone.parquet does not exist"));
}

#[test]
fn an_unreadable_source_file_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("broken.parquet"), "PAR1 but not really").unwrap();
    let path = job(
        dir.path(),
        "job.yaml",
        &format!("source:\n  path: broken.parquet\n{SINK}"),
    );
    outflow()
        .arg("check")
        .arg(&path)
        .assert()
        .code(1)
        .stderr(contains("cannot read").and(contains("broken.parquet")));
}

#[test]
fn a_malformed_csv_row_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.csv"), "id,name\n1,a\n2,b\n3,c,extra\n").unwrap();
    let path = job(
        dir.path(),
        "job.yaml",
        &format!("source:\n  path: in.csv\n  csv: {{ infer_rows: 1 }}\n{SINK}"),
    );
    outflow()
        .arg("check")
        .arg(&path)
        .assert()
        .code(1)
        .stderr(contains("in.csv, line 4:").and(contains("incorrect number of fields")));
}

#[test]
fn check_reads_the_source_through_the_transforms() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/b.csv"), "id,name\n3,cy\n4,dee\n").unwrap();
    std::fs::write(dir.path().join("data/a.csv"), "id,name\n1,ann\n2,bob\n").unwrap();
    let path = job(
        dir.path(),
        "job.yaml",
        &format!(
            "source:\n  path: data\n  format: csv\ntransforms:\n  - filter: {{ column: id, op: ge, value: 2 }}\n  - rename: {{ name: who }}\n{SINK}"
        ),
    );
    outflow()
        .arg("check")
        .arg(&path)
        .assert()
        .success()
        .stdout(contains("Source: 2 csv files"))
        .stdout(contains("Schema after transforms:\n  id: long\n  who: string\n"))
        .stdout(contains("Read 2 files").and(contains("4 rows, 3 after transforms")));

    let output = outflow().args(["check", "--json"]).arg(&path).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (doc["version"].clone(), doc["command"].clone()),
        (1.into(), "check".into())
    );
    assert_eq!(doc["status"], "ok");
    assert_eq!(doc["source"]["format"], "csv");
    let files: Vec<String> = doc["source"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert!(
        files[0].ends_with("data/a.csv") && files[1].ends_with("data/b.csv"),
        "{files:?}"
    );
    assert_eq!(
        doc["schema"][1],
        serde_json::json!({"name": "who", "type": "string", "nullable": true})
    );
    assert_eq!(doc["read"]["rows_read"], 4);
    assert_eq!(doc["read"]["rows_out"], 3);
}

#[test]
fn check_validates_the_sink_options_without_reaching_the_service() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.csv"), "id,name\n1,a\n").unwrap();
    let bigtable = "sink:\n  bigtable:\n    project: p\n    instance: i\n    table: t\n    \
                    endpoint: 127.0.0.1:9\n    table_options: {column_families: [{name: cf}]}\n    \
                    row_key: id\n    columns: {family: cf}\n";
    // Valid options and an endpoint where nothing listens: check never connects.
    let good = job(
        dir.path(),
        "good.yaml",
        &format!("source:\n  path: in.csv\n{bigtable}"),
    );
    outflow()
        .arg("check")
        .arg(&good)
        .assert()
        .success()
        .stdout(contains("1 rows"));

    let unknown = job(
        dir.path(),
        "unknown.yaml",
        &format!("source:\n  path: in.csv\n{bigtable}    colums: x\n"),
    );
    outflow()
        .arg("check")
        .arg(&unknown)
        .assert()
        .code(2)
        .stderr(contains("unknown field `colums`").and(contains("sink.bigtable")));
}

#[test]
fn check_reads_parquet_and_ndjson() {
    let dir = tempfile::tempdir().unwrap();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
        (
            "name",
            Arc::new(StringArray::from(vec!["a", "b", "c"])) as ArrayRef,
        ),
    ])
    .unwrap();
    let file = std::fs::File::create(dir.path().join("t.parquet")).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let path = job(
        dir.path(),
        "p.yaml",
        &format!("source:\n  path: t.parquet\n{SINK}"),
    );
    outflow()
        .arg("check")
        .arg(&path)
        .assert()
        .success()
        .stdout(contains("id: long not null").and(contains("3 rows")));

    std::fs::write(
        dir.path().join("e.ndjson"),
        "{\"id\": 1, \"user\": {\"name\": \"a\"}}\n",
    )
    .unwrap();
    let path = job(
        dir.path(),
        "n.yaml",
        &format!("source:\n  path: e.ndjson\ntransforms:\n  - flatten: {{}}\n{SINK}"),
    );
    outflow()
        .arg("check")
        .arg(&path)
        .assert()
        .success()
        .stdout(contains("user_name: string").and(contains("1 rows")));
}

#[test]
fn a_transform_on_a_missing_column_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.csv"), "id\n1\n").unwrap();
    let path = job(
        dir.path(),
        "job.yaml",
        &format!("source:\n  path: in.csv\ntransforms:\n  - rename: {{ idd: key }}\n{SINK}"),
    );
    outflow()
        .args(["check", "--schema-only"])
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains("transforms[0].rename: column \"idd\" does not exist"));
}

#[test]
fn json_errors_are_one_document_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let path = job(dir.path(), "job.yaml", "source:\n  path: in.csv\n  extra: 1\n");
    let output = outflow().args(["run", "--json"]).arg(&path).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["command"], "run");
    assert_eq!(doc["status"], "usage");
    assert_eq!(doc["exit_code"], 2);
    let error = &doc["error"];
    assert_eq!(error["kind"], "invalid_config");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `extra`"),
        "{doc}"
    );
    // Every place key is there, null when the error names none.
    for key in ["file", "line", "key", "column", "table", "row"] {
        assert!(error.get(key).is_some(), "{key} missing from {doc}");
    }
    assert!(error["context"].is_object(), "{doc}");
}

#[test]
fn argument_errors_are_a_json_document_too_when_json_is_asked_for() {
    let output = outflow()
        .args(["run", "--json", "--no-such-flag", "job.yaml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["status"], "usage");
    assert_eq!(doc["error"]["kind"], "usage");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--no-such-flag"),
        "{doc}"
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("--no-such-flag"));
    // Without --json, clap's own message only.
    let plain = outflow().args(["run", "--no-such-flag"]).output().unwrap();
    assert_eq!(plain.status.code(), Some(2));
    assert!(plain.stdout.is_empty());
}
