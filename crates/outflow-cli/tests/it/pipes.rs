//! `outflow` in a shell pipeline: a reader that stops early, stderr that is not a terminal,
//! a wrong file given as the job. Needs no server.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use predicates::prelude::*;
use predicates::str::contains;

use crate::cli::{SINK, job as write};
use crate::outflow;

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    // Two schemas of 5,000 columns print more than a pipe holds, so the command is still
    // writing when the reader goes.
    let header: Vec<String> = (0..5000).map(|i| format!("column_{i}")).collect();
    let row = vec!["1"; 5000].join(",");
    write(dir.path(), "wide.csv", &format!("{}\n{row}\n", header.join(",")));
    let job = write(
        dir.path(),
        "job.yaml",
        &format!("source:\n  path: wide.csv\n{SINK}"),
    );

    // `outflow check job.yaml | head -3`
    let mut child = Command::new(env!("CARGO_BIN_EXE_outflow"))
        .arg("check")
        .arg(&job)
        .env_remove("OUTFLOW_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..3 {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty());
    }
    drop(stdout);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "");
}

#[test]
fn a_file_that_is_not_a_job_is_quoted_short() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..500).map(|i| format!("{i},city_{i},2026-11-01\n")).collect();
    let csv = write(dir.path(), "trips.csv", &format!("id,city,day\n{rows}"));
    let output = outflow().arg("check").arg(&csv).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("trips.csv: line 1, column 1: invalid type: string \"id,city,day"),
        "{stderr}"
    );
    assert!(stderr.contains("...\", expected struct Job"), "{stderr}");
    assert!(
        stderr.contains("a job file is a YAML mapping with `source` and `sink`"),
        "{stderr}"
    );
    assert!(!stderr.contains("city_20"), "{stderr}");
    assert!(stderr.len() < 400, "{} bytes: {stderr}", stderr.len());
}

#[test]
fn logs_stay_behind_outflow_log_and_are_plain_in_pipes() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "in.csv", "id\n1\n");
    // A REST catalog where nothing listens: each failed attempt is logged as a warning.
    let job = write(
        dir.path(),
        "job.yaml",
        "source:\n  path: in.csv\nsink:\n  iceberg: { catalog: { type: rest, uri: 'http://127.0.0.1:1' }, \
         table: db.t, retry: { max_attempts: 2 } }\n",
    );
    outflow()
        .arg("plan")
        .arg(&job)
        .env_remove("NO_COLOR")
        .assert()
        .code(1)
        .stderr(contains("cannot reach the REST catalog at http://127.0.0.1:1"))
        .stderr(contains("WARN").not().and(contains("retrying").not()));
    // Asked for, logs come, without colour codes: stderr is a pipe here.
    outflow()
        .arg("plan")
        .arg(&job)
        .env_remove("NO_COLOR")
        .env("OUTFLOW_LOG", "warn")
        .assert()
        .code(1)
        .stderr(contains("WARN").and(contains("retrying")))
        .stderr(contains("\x1b[").not());
}
