//! `outflow run` with the BigQuery sink and `outflow bigquery ensure-table`, against the
//! local-bigquery emulator the test script starts, read back with Google's Python client.

use crate::outflow;
use outflow_testkit::bigquery::BigQueryEnv;
use outflow_testkit::unique_name;
use predicates::prelude::*;
use predicates::str::contains;
use serde_json::Value;
use std::time::Duration;

fn names(read: &Value) -> Vec<String> {
    read["schema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect()
}

/// The `id` of every row the Python reader read, sorted.
fn ids(read: &Value) -> Vec<i64> {
    outflow_testkit::bigquery::ids_of(read)
}

#[test]
fn a_job_loads_csv_rows_into_bigquery() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("in.csv"),
        "id,city,fare\n1,Lisbon,8.30\n2,Porto,\n3,Faro,12.00\n",
    )
    .unwrap();
    let job = format!(
        "source:\n  path: in.csv\n  csv: {{ schema: [ {{name: id, type: long, required: true}}, {{name: city, type: string}}, {{name: fare, type: \"decimal(10,2)\"}} ] }}\n\
         sink:\n  bigquery:\n    project: {project}\n    dataset: {dataset}\n    table: trips\n\
         \x20   schema: [ {{name: id, type: INT64, mode: REQUIRED}}, {{name: city, type: STRING}}, {{name: fare, type: NUMERIC}} ]\n\
         \x20   connection: {{ rest_endpoint: '${{OUTFLOW_BIGQUERY_REST}}', grpc_endpoint: '${{OUTFLOW_BIGQUERY_GRPC}}', credentials: anonymous }}\n",
        project = env.project,
    );
    std::fs::write(dir.path().join("job.yaml"), job).unwrap();
    outflow()
        .arg("run")
        .arg(dir.path().join("job.yaml"))
        .env("OUTFLOW_BIGQUERY_REST", &env.rest)
        .env("OUTFLOW_BIGQUERY_GRPC", &env.grpc)
        .assert()
        .success()
        .stdout(
            contains("trips")
                .and(contains("3"))
                .and(contains("Not recorded").not()),
        );
    let read = env.read_table(&dataset, "trips");
    assert_eq!(names(&read), ["id", "city", "fare"]);
    assert_eq!(ids(&read), [1, 2, 3]);
    let lisbon = read["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == 1)
        .unwrap();
    assert_eq!(lisbon["city"], "Lisbon");
}

#[test]
fn ensure_table_creates_then_evolves_as_allowed() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    let v1 = dir.path().join("v1.json");
    std::fs::write(
        &v1,
        r#"[{"name": "id", "type": "INT64", "mode": "REQUIRED"}, {"name": "ts", "type": "TIMESTAMP"}]"#,
    )
    .unwrap();
    let v2 = dir.path().join("v2.yaml");
    std::fs::write(&v2, "- {name: id, type: INT64, mode: REQUIRED}\n- {name: ts, type: TIMESTAMP}\n- {name: note, type: STRING}\n")
        .unwrap();
    let host = env.rest.trim_start_matches("http://").to_string();
    let grpc = env.grpc.trim_start_matches("http://").to_string();
    let base = |schema: &std::path::Path| {
        let mut cmd = outflow();
        cmd.args([
            "bigquery",
            "ensure-table",
            "--project",
            &env.project,
            "--dataset",
            &dataset,
        ])
        .args([
            "--table",
            "events",
            "--emulator-host",
            &host,
            "--emulator-grpc-host",
            &grpc,
        ])
        .arg("--schema")
        .arg(schema);
        cmd
    };
    base(&v1)
        .args(["--time-partitioning", "DAY:ts"])
        .assert()
        .success()
        .stdout(contains("created"));
    base(&v1).assert().success().stdout(contains("unchanged"));
    // A new column without --allow is refused and changes nothing.
    base(&v2).assert().code(1).stdout(contains("note"));
    assert_eq!(names(&env.read_table(&dataset, "events")), ["id", "ts"]);
    base(&v2)
        .arg("--dry-run")
        .args(["--allow", "field-addition"])
        .assert()
        .success();
    assert_eq!(names(&env.read_table(&dataset, "events")), ["id", "ts"]);
    base(&v2).args(["--allow", "field-addition"]).assert().success();
    assert_eq!(names(&env.read_table(&dataset, "events")), ["id", "ts", "note"]);
}

/// `plan` says what the run then does: a column the input adds under allow_field_addition
/// is an update, which the run makes; a dataset that does not exist fails the plan, naming
/// it, as it would fail the run.
#[test]
fn plan_agrees_with_the_run_on_added_columns_and_missing_datasets() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    let job = |dataset: &str| {
        let text = format!(
            "source: {{ path: in.csv }}\n\
             sink:\n  bigquery:\n    project: {project}\n    dataset: {dataset}\n    table: visits\n\
             \x20   schema: [ {{name: id, type: INT64}}, {{name: city, type: STRING}} ]\n\
             \x20   schema_evolution: {{ options: [allow_field_addition] }}\n\
             \x20   connection: {{ rest_endpoint: '{rest}', grpc_endpoint: '{grpc}', credentials: anonymous }}\n",
            project = env.project,
            rest = env.rest,
            grpc = env.grpc,
        );
        let path = dir.path().join(format!("{dataset}.yaml"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let plan = |path: &std::path::Path| -> (Option<i32>, Value) {
        let out = outflow().arg("plan").arg(path).arg("--json").output().unwrap();
        let doc = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), doc)
    };
    let path = job(&dataset);
    std::fs::write(dir.path().join("in.csv"), "id,city\n1,Lisbon\n").unwrap();
    outflow().arg("run").arg(&path).assert().success();
    assert_eq!(names(&env.read_table(&dataset, "visits")), ["id", "city"]);

    std::fs::write(dir.path().join("in.csv"), "id,city,fare\n2,Porto,7.5\n").unwrap();
    let (code, doc) = plan(&path);
    assert_eq!(code, Some(0), "{doc}");
    let planned = &doc["destinations"][0];
    assert_eq!(planned["action"], "update", "{doc}");
    assert!(planned["evolution"].to_string().contains("fare"), "{doc}");
    outflow().arg("run").arg(&path).assert().success();
    assert_eq!(names(&env.read_table(&dataset, "visits")), ["id", "city", "fare"]);
    let (code, doc) = plan(&path);
    assert_eq!(
        (code, &doc["destinations"][0]["action"]),
        (Some(0), &Value::from("unchanged")),
        "{doc}"
    );

    let missing = unique_name("missing");
    let path = job(&missing);
    let (code, doc) = plan(&path);
    assert_eq!(code, Some(1), "{doc}");
    let planned = &doc["destinations"][0];
    assert_eq!(planned["action"], "fail", "{doc}");
    assert!(
        planned["error"]
            .as_str()
            .unwrap()
            .contains(&format!("dataset {}.{missing} does not exist", env.project)),
        "{doc}"
    );
    outflow()
        .arg("run")
        .arg(&path)
        .assert()
        .code(1)
        .stderr(contains(format!("{}.{missing}", env.project)));
}

#[test]
fn without_credentials_a_job_fails_fast_saying_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    // HOME without gcloud's credentials file, no emulator variable: nothing to authenticate
    // with (and no metadata server here).
    let home = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.csv"), "id\n1\n").unwrap();
    std::fs::write(
        dir.path().join("job.yaml"),
        "source:\n  path: in.csv\nsink:\n  bigquery: { project: p, dataset: d, table: t, create_disposition: create_never }\n",
    )
    .unwrap();
    for command in ["run", "plan"] {
        let started = std::time::Instant::now();
        let output = outflow()
            .arg(command)
            .arg(dir.path().join("job.yaml"))
            .env_remove("BIGQUERY_EMULATOR_HOST")
            .env_remove("BIGQUERY_EMULATOR_GRPC_HOST")
            .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
            .env_remove("GCE_METADATA_HOST")
            .env("HOME", home.path())
            .output()
            .unwrap();
        let elapsed = started.elapsed();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command}: {stderr}");
        assert!(elapsed.as_secs() < 8, "{command} took {elapsed:?}");
        assert!(
            stderr.contains("no Application Default Credentials found"),
            "{stderr}"
        );
        assert!(
            stderr.contains("run `gcloud auth application-default login`, or set BIGQUERY_EMULATOR_HOST"),
            "{stderr}"
        );
        assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
        assert!(
            !stderr.contains("transient") && !stderr.contains("retrying"),
            "{stderr}"
        );
    }
}

#[test]
fn ensure_table_flags_are_named_as_the_job_keys() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    let v1 = dir.path().join("v1.yaml");
    std::fs::write(&v1, "- {name: id, type: INT64, mode: REQUIRED}\n").unwrap();
    let v2 = dir.path().join("v2.yaml");
    std::fs::write(
        &v2,
        "- {name: id, type: INT64, mode: REQUIRED}\n- {name: note, type: STRING}\n",
    )
    .unwrap();
    let host = env.rest.trim_start_matches("http://").to_string();
    let grpc = env.grpc.trim_start_matches("http://").to_string();
    // connection.rest_endpoint and connection.grpc_endpoint, and the emulator flags.
    let endpoints = [
        "--rest-endpoint",
        env.rest.as_str(),
        "--grpc-endpoint",
        env.grpc.as_str(),
    ];
    let emulator = [
        "--emulator-host",
        host.as_str(),
        "--emulator-grpc-host",
        grpc.as_str(),
    ];
    let base = |connection: &[&str; 4], schema: &std::path::Path| {
        let mut cmd = outflow();
        cmd.args(["bigquery", "ensure-table", "--project", &env.project])
            .args(["--dataset", &dataset, "--table", "events"])
            .args(connection)
            .arg("--schema")
            .arg(schema);
        cmd
    };
    base(&endpoints, &v1)
        .args(["--create-disposition", "create_if_needed"])
        .assert()
        .success()
        .stdout(contains("events: created"));
    // --allow takes the job file's spelling and the short one; the change prints as plan
    // prints it.
    for (connection, spelling) in [
        (&endpoints, "allow_field_addition"),
        (&emulator, "field-addition"),
    ] {
        base(connection, &v2)
            .args(["--allow", spelling, "--dry-run"])
            .assert()
            .success()
            .stdout(contains("update (dry run: nothing changed)"))
            .stdout(contains("  └── + note: string\n"));
    }
    assert_eq!(names(&env.read_table(&dataset, "events")), ["id"]);
}

/// A job loading `in.csv` in batches of `batch_size` into `table`, created if needed, with
/// more sink `options` (YAML lines indented as sink keys).
fn city_job(
    dir: &std::path::Path,
    env: &BigQueryEnv,
    dataset: &str,
    table: &str,
    batch_size: usize,
    options: &str,
) -> std::path::PathBuf {
    let sink = format!(
        "  bigquery:\n    project: {project}\n    dataset: {dataset}\n    table: {table}\n\
         \x20   schema: [ {{name: id, type: INT64, mode: REQUIRED}}, {{name: city, type: STRING}} ]\n{options}\
         \x20   connection: {{ rest_endpoint: '{rest}', grpc_endpoint: '{grpc}', credentials: anonymous }}\n",
        project = env.project,
        rest = env.rest,
        grpc = env.grpc,
    );
    crate::city_job(dir, table, batch_size, &sink)
}

/// A run that fails on a bad CSV line after good ones: with pending streams nothing of it
/// became visible, so the table it created is deleted; with committed streams (the
/// default) the rows written are visible and stay, and the error says so; a table that
/// existed, empty, is never deleted.
#[test]
fn a_failed_run_removes_the_table_it_created_or_says_what_it_keeps() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    // Batches of 2: the first two are written before the third fails on line 6.
    crate::city_csv(dir.path(), 1..5, true);
    let run = |table: &str, options: &str| {
        let job = city_job(dir.path(), &env, &dataset, table, 2, options);
        let failed = outflow().arg("run").arg(&job).arg("--quiet").assert().code(1);
        String::from_utf8_lossy(&failed.get_output().stderr).to_string()
    };
    let full = |table: &str| format!("{}.{dataset}.{table}", env.project);

    let stderr = run("pending", "    stream_type: pending\n");
    assert!(stderr.contains("in.csv, line 6"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "removed table {}, created by this run and never committed to",
            full("pending")
        )),
        "{stderr}"
    );
    assert!(stderr.contains("discarded 4 rows not visible yet"), "{stderr}");
    assert!(!env.tables(&dataset).contains(&"pending".to_string()));

    let stderr = run("committed", "    stream_type: committed\n");
    assert!(
        stderr.contains(&format!(
            "left behind: table {} (created by this run) keeps 4 rows committed before the run stopped",
            full("committed")
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("removed table"), "{stderr}");
    assert_eq!(ids(&env.read_table(&dataset, "committed")), [1, 2, 3, 4]);

    // An empty table made before the run, by ensure-table, stays as it was.
    let schema_file = dir.path().join("schema.yaml");
    std::fs::write(
        &schema_file,
        "- {name: id, type: INT64, mode: REQUIRED}\n- {name: city, type: STRING}\n",
    )
    .unwrap();
    outflow()
        .args(["bigquery", "ensure-table", "--project", &env.project])
        .args(["--dataset", &dataset, "--table", "existing"])
        .args(["--emulator-host", env.rest.trim_start_matches("http://")])
        .args(["--emulator-grpc-host", env.grpc.trim_start_matches("http://")])
        .arg("--schema")
        .arg(&schema_file)
        .assert()
        .success()
        .stdout(contains("created"));
    let stderr = run("existing", "    stream_type: pending\n");
    assert!(!stderr.contains("removed table"), "{stderr}");
    assert!(stderr.contains("discarded 4 rows not visible yet"), "{stderr}");
    assert!(env.tables(&dataset).contains(&"existing".to_string()));
    assert_eq!(
        env.read_table(&dataset, "existing")["rows"],
        serde_json::json!([])
    );
}

/// Ctrl-C during a run into pending streams: none of its rows became visible, so the table
/// it created is deleted, and stderr says so.
#[test]
fn ctrl_c_on_a_pending_run_removes_the_table_it_created() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    crate::city_csv(dir.path(), 0..1_000_000, false);
    let job = city_job(
        dir.path(),
        &env,
        &dataset,
        "t",
        8192,
        "    stream_type: pending\n",
    );
    // The table is created before the first row is read: interrupted as soon as it exists.
    let (code, stderr) = crate::interrupted_run(&job, &[], || env.tables(&dataset) == ["t"]);
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted (Ctrl-C) before the commit"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "removed table {}.{dataset}.t, created by this run and never committed to",
            env.project
        )),
        "{stderr}"
    );
    assert_eq!(env.tables(&dataset), Vec::<String>::new());
}

/// A job reading `in/*.csv` (`id`, `city`, `rides`) into `table`, with more sink `options`.
fn parts_job(
    dir: &std::path::Path,
    env: &BigQueryEnv,
    dataset: &str,
    table: &str,
    options: &str,
) -> std::path::PathBuf {
    let sink = format!(
        "  bigquery:\n    project: {project}\n    dataset: {dataset}\n    table: {table}\n\
         \x20   schema: [ {{name: id, type: INT64, mode: REQUIRED}}, {{name: city, type: STRING}}, {{name: rides, type: INT64}} ]\n{options}\
         \x20   connection: {{ rest_endpoint: '{rest}', grpc_endpoint: '{grpc}', credentials: anonymous }}\n",
        project = env.project,
        rest = env.rest,
        grpc = env.grpc,
    );
    crate::city_parts_job(dir, table, &sink)
}

/// Reruns load only new files: the dataset's `_outflow_loads` records which files each
/// table holds, and the summary says what was skipped.
#[test]
fn a_rerun_into_bigquery_loads_only_the_new_files() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    crate::city_part(dir.path(), "a", 0..3);
    crate::city_part(dir.path(), "b", 3..5);
    let job = parts_job(dir.path(), &env, &dataset, "t", "");
    outflow().arg("run").arg(&job).assert().success();
    assert_eq!(ids(&env.read_table(&dataset, "t")), [0, 1, 2, 3, 4]);

    outflow()
        .arg("run")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains("Skipped 2 files t already holds from an earlier run"));
    assert_eq!(ids(&env.read_table(&dataset, "t")).len(), 5);

    crate::city_part(dir.path(), "c", 5..6);
    outflow().arg("run").arg(&job).assert().success();
    assert_eq!(ids(&env.read_table(&dataset, "t")), [0, 1, 2, 3, 4, 5]);
    let loads = env.query(&format!(
        "SELECT state, COUNT(*) AS n FROM `{}.{dataset}._outflow_loads` GROUP BY state ORDER BY state",
        env.project
    ));
    // Pending streams (a job's default): an intent with the stream before each commit, and
    // the outcome after; the run that loaded nothing wrote nothing.
    assert_eq!(
        loads,
        serde_json::json!([{"state": "intent", "n": 2}, {"state": "loaded", "n": 2}]),
        "{loads}"
    );
}

/// A run stopped between committing its rows and recording that it did (the `loaded` row
/// deleted, as a kill would leave it) is settled by the next run from BigQuery's record of
/// the stream: committed, so nothing is loaded again. A stream BigQuery never committed
/// means the rows are not there, and they are loaded. Rows visible as they were sent
/// (committed streams) cannot be told apart, so the rerun stops and says what to do.
#[test]
fn a_rerun_settles_a_stopped_bigquery_load_from_its_streams() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    crate::city_part(dir.path(), "a", 0..4);
    let job = parts_job(dir.path(), &env, &dataset, "t", "");
    let ledger = format!("`{}.{dataset}._outflow_loads`", env.project);
    let table = format!("`{}.{dataset}.t`", env.project);
    outflow().arg("run").arg(&job).assert().success();

    // Stopped after the commit: the stream has a commit time.
    env.query(&format!("DELETE FROM {ledger} WHERE state = 'loaded'"));
    outflow()
        .arg("run")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains("Skipped 1 file"));
    assert_eq!(ids(&env.read_table(&dataset, "t")), [0, 1, 2, 3]);

    // Stopped before the commit: the stream was finalized and never committed, and the
    // table does not hold the rows.
    env.query(&format!("DELETE FROM {table} WHERE TRUE"));
    env.query(&format!("DELETE FROM {ledger} WHERE state != 'intent'"));
    let stream = env.uncommitted_stream(&dataset, "t");
    env.query(&format!(
        "UPDATE {ledger} SET visibility = '{{\"streams\":[\"{stream}\"]}}' WHERE TRUE"
    ));
    outflow()
        .arg("run")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains("Skipped").not());
    assert_eq!(ids(&env.read_table(&dataset, "t")), [0, 1, 2, 3]);

    // Rows visible as sent: refused, naming the file and what to do.
    env.query(&format!("DELETE FROM {ledger} WHERE state != 'intent'"));
    env.query(&format!(
        "UPDATE {ledger} SET visibility = '\"as_sent\"' WHERE TRUE"
    ));
    let refused = outflow().arg("run").arg(&job).assert().failure();
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).to_string();
    assert!(stderr.contains("stopped while loading 1 file into"), "{stderr}");
    assert!(stderr.contains("a.csv"), "{stderr}");
    assert!(stderr.contains("--reload"), "{stderr}");
    outflow().arg("plan").arg(&job).assert().failure();
    assert_eq!(ids(&env.read_table(&dataset, "t")), [0, 1, 2, 3]);
    // Loading again settles it; the next run skips the file.
    env.query(&format!("DELETE FROM {table} WHERE TRUE"));
    outflow().args(["run", "--reload"]).arg(&job).assert().success();
    outflow()
        .arg("run")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains("Skipped 1 file"));
    assert_eq!(ids(&env.read_table(&dataset, "t")), [0, 1, 2, 3]);
}

/// `outflow run` killed (SIGKILL) at moments spread over a run into pending streams, each
/// time run again to the end: the table holds each row exactly once.
#[test]
fn a_bigquery_run_killed_at_any_moment_and_run_again_loads_each_row_once() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    for f in 0..4 {
        crate::city_part(dir.path(), &format!("p{f}"), f * 2000..(f + 1) * 2000);
    }
    let kills = crate::killed_then_run_again(
        Duration::from_millis(200),
        |round| parts_job(dir.path(), &env, &dataset, &format!("t{round}"), ""),
        |round| {
            let got = ids(&env.read_table(&dataset, &format!("t{round}")));
            assert_eq!(got, (0..8000).collect::<Vec<i64>>(), "round {round}");
        },
    );
    assert!(kills >= 2, "killed {kills} times");
}

/// A job with an engine section into BigQuery: the committer records the statement's files
/// in the ledger with its streams, so a rerun loads only the new file.
#[cfg(feature = "engine")]
#[test]
fn an_engine_job_into_bigquery_loads_each_file_once() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    crate::city_part(dir.path(), "a", 0..3);
    let job = parts_job(dir.path(), &env, &dataset, "t", "");
    // The typed CSV schema gives way to SQL (an engine infers types).
    let text = std::fs::read_to_string(&job).unwrap().replace(
        "  csv: { schema: [ {name: id, type: long, required: true}, {name: city, type: string}, {name: rides, type: long} ] }\n",
        "engine:\n  sql: SELECT id, city, rides FROM source WHERE id >= 0\n",
    );
    assert!(text.contains("engine:"), "{text}");
    std::fs::write(&job, text).unwrap();
    outflow().args(["run", "--quiet"]).arg(&job).assert().success();
    crate::city_part(dir.path(), "b", 3..5);
    outflow()
        .arg("run")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains("Skipped 1 file t already holds from an earlier run"));
    assert_eq!(ids(&env.read_table(&dataset, "t")), [0, 1, 2, 3, 4]);
    outflow()
        .arg("run")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains("Skipped 2 files t"));
    assert_eq!(ids(&env.read_table(&dataset, "t")).len(), 5);
}

/// A BigQuery job of Debezium change events: `plan` says the table would be created with the
/// key as its primary key and that the rows upsert by it (the operation column is not one of
/// its columns), and creates nothing; `check` names a key column the rows lack.
#[test]
fn plan_of_a_change_data_job_into_bigquery_says_it_upserts_by_the_primary_key() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("cli");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("events.ndjson"),
        "{\"before\": null, \"after\": {\"id\": 1, \"city\": \"Lisbon\"}, \"op\": \"c\"}\n\
         {\"before\": {\"id\": 1, \"city\": \"Lisbon\"}, \"after\": null, \"op\": \"d\"}\n",
    )
    .unwrap();
    let job = |key: &str| {
        let text = format!(
            "source: {{ path: events.ndjson }}\n\
             transforms:\n  - debezium: {{}}\n\
             sink:\n  bigquery:\n    project: {project}\n    dataset: {dataset}\n    table: cities\n\
             \x20   schema: [ {{name: id, type: INT64, mode: REQUIRED}}, {{name: city, type: STRING}} ]\n\
             \x20   write_method: at_least_once\n\
             \x20   changes: {{ key: [{key}], operation: {{ column: op }} }}\n\
             \x20   connection: {{ rest_endpoint: '{rest}', grpc_endpoint: '{grpc}', credentials: anonymous }}\n",
            project = env.project,
            dataset = dataset.name(),
            rest = env.rest,
            grpc = env.grpc,
        );
        let path = dir.path().join(format!("{key}.yaml"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let out = outflow()
        .arg("plan")
        .arg(job("id"))
        .arg("--json")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{doc}");
    let planned = &doc["destinations"][0];
    assert_eq!(planned["action"], "create", "{doc}");
    let details = planned["details"].to_string();
    assert!(details.contains("primary key (id) NOT ENFORCED"), "{doc}");
    assert!(
        details.contains("upsert by key [id], operations from column \\\"op\\\""),
        "{doc}"
    );
    assert!(!planned["evolution"].to_string().contains("\"op\""), "{doc}");
    assert_eq!(env.tables(&dataset), Vec::<String>::new(), "plan creates nothing");

    outflow()
        .arg("check")
        .arg(job("region"))
        .assert()
        .failure()
        .stderr(contains("changes.key").and(contains("region")));
}
