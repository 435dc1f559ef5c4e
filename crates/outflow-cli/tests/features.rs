//! An `outflow` built without some features: a job that needs one exits 2 and says which
//! command builds it. Run against a build with the Iceberg sink only: `cargo test -p
//! outflow-cli --no-default-features --features iceberg --test features` (docs/testing.md
//! says why the test command leaves it out); in a build with every feature it has nothing
//! to test.
#![cfg(any(not(feature = "engine"), not(feature = "bigquery")))]

use std::path::Path;

use assert_cmd::cargo::cargo_bin_cmd;
use predicates::prelude::*;
use predicates::str::contains;

fn outflow() -> assert_cmd::Command {
    let mut cmd = cargo_bin_cmd!("outflow");
    cmd.env_remove("OUTFLOW_LOG").env("NO_COLOR", "1");
    cmd
}

/// A job file reading one small CSV file, with `rest` appended.
fn job(dir: &Path, rest: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("in.csv"), "id,name\n1,a\n").unwrap();
    let path = dir.join("job.yaml");
    std::fs::write(&path, format!("source:\n  path: in.csv\n{rest}")).unwrap();
    path
}

#[cfg(not(feature = "engine"))]
#[test]
fn an_engine_job_says_how_to_build_the_engine_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = job(
        dir.path(),
        "engine:\n  sql: SELECT * FROM source\nsink:\n  iceberg: {catalog: {type: memory}, table: db.t}\n",
    );
    // check and plan cannot plan the query without it either.
    for command in ["run", "check", "plan"] {
        outflow().arg(command).arg(&path).assert().code(2).stderr(
            contains("built without engine")
                .and(contains(format!(
                    "cargo run -p outflow-cli --features engine -- {command}"
                )))
                .and(contains("job.yaml")),
        );
    }
}

#[cfg(not(feature = "bigquery"))]
#[test]
fn a_sink_left_out_says_how_to_build_it_and_check_finds_it_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = job(
        dir.path(),
        "sink:\n  bigquery: {table: p.d.t, create_disposition: create_never}\n",
    );
    for command in ["run", "check", "plan"] {
        outflow().arg(command).arg(&path).assert().code(2).stderr(
            contains("built without the bigquery sink").and(contains(format!(
                "cargo run -p outflow-cli --features bigquery -- {command}"
            ))),
        );
    }
}
