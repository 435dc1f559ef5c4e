//! `outflow run` with the Bigtable sink and `outflow bigtable ensure-table`, against
//! Google's emulator the test script starts, read back with Google's Python client.

use crate::outflow;
use outflow_testkit::bigtable::{cbt, emulator_host, python_read, python_tables};
use outflow_testkit::unique_name;
use predicates::prelude::*;
use predicates::str::contains;

const PROJECT: &str = "outflow-cli";
const INSTANCE: &str = "cli";

#[test]
fn a_job_loads_csv_rows_into_bigtable() {
    let host = emulator_host();
    let table = unique_name("trips");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("in.csv"),
        "id,city,rides\n1,Lisbon,3\n2,Porto,5\n",
    )
    .unwrap();
    let job = format!(
        "source:\n  path: in.csv\n  csv: {{ schema: [ {{name: id, type: long, required: true}}, {{name: city, type: string}}, {{name: rides, type: long}} ] }}\n\
         sink:\n  bigtable:\n    project: {PROJECT}\n    instance: {INSTANCE}\n    table: {table}\n\
         \x20   endpoint: {host}\n\
         \x20   table_options: {{ column_families: [ {{name: info, gc_rule: {{max_versions: 1}}}}, {{name: stats, type: {{aggregate: sum}}}} ] }}\n\
         \x20   row_key: {{ fields: [id] }}\n\
         \x20   columns: {{ explicit: [ {{field: city, family: info}}, {{field: rides, family: stats}} ] }}\n"
    );
    std::fs::write(dir.path().join("job.yaml"), job).unwrap();
    outflow()
        .arg("run")
        .arg(dir.path().join("job.yaml"))
        .assert()
        .success()
        .stdout(contains("2"));
    let read = python_read(&host, PROJECT, INSTANCE, &table);
    assert_eq!(read["families"]["stats"]["value_type"], "sum");
    assert_eq!(
        read["families"]["info"]["gc_rule"],
        serde_json::json!({"max_versions": 1})
    );
    let rows = read["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let city = &rows[0]["cells"]["info"]["city"][0]["value_hex"];
    assert_eq!(city, &serde_json::json!(hex("Lisbon")));
    // A second run skips the file the table holds; one told to load it again adds to the
    // sum family: 3 + 3.
    outflow()
        .arg("run")
        .arg(dir.path().join("job.yaml"))
        .assert()
        .success()
        .stdout(contains("Skipped 1 file"));
    outflow()
        .args(["run", "--reload", "--quiet"])
        .arg(dir.path().join("job.yaml"))
        .assert()
        .success();
    let read = python_read(&host, PROJECT, INSTANCE, &table);
    let rides = read["rows"][0]["cells"]["stats"]["rides"][0]["value_hex"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(i64::from_str_radix(&rides, 16).unwrap(), 6);
}

/// `outflow bigtable ensure-table` in this file's instance, before the table's flags.
const ENSURE_TABLE: [&str; 6] = [
    "bigtable",
    "ensure-table",
    "--project",
    PROJECT,
    "--instance",
    INSTANCE,
];

/// `outflow bigtable ensure-table` of `table` on the emulator at `host`, with the families
/// of the `options` file.
fn ensure_table(host: &str, table: &str, options: &std::path::Path) -> assert_cmd::Command {
    let mut cmd = outflow();
    cmd.args(ENSURE_TABLE)
        .args(["--table", table, "--endpoint", host])
        .arg("--options")
        .arg(options);
    cmd
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn ensure_table_creates_then_adds_only_missing_families() {
    let host = emulator_host();
    let table = unique_name("events");
    let dir = tempfile::tempdir().unwrap();
    let v1 = dir.path().join("v1.yaml");
    std::fs::write(
        &v1,
        "column_families:\n  - {name: cf, gc_rule: {max_versions: 3}}\n",
    )
    .unwrap();
    let v2 = dir.path().join("v2.yaml");
    std::fs::write(
        &v2,
        "column_families:\n  - {name: cf, gc_rule: {max_versions: 1}}\n  - {name: clicks, type: {aggregate: sum}}\n",
    )
    .unwrap();
    let base = |options: &std::path::Path| ensure_table(&host, &table, options);
    base(&v1)
        .assert()
        .success()
        .stdout(contains("created").and(contains("cf")));
    base(&v2)
        .arg("--dry-run")
        .assert()
        .success()
        .stdout(contains("update (dry run: nothing changed)").and(contains("clicks")));
    base(&v2)
        .assert()
        .success()
        .stdout(contains("updated").and(contains("clicks")));
    let read = python_read(&host, PROJECT, INSTANCE, &table);
    // The existing family's GC rule is left as it was.
    assert_eq!(
        read["families"]["cf"]["gc_rule"],
        serde_json::json!({"max_versions": 3})
    );
    assert_eq!(read["families"]["clicks"]["value_type"], "sum");
    base(&v2).assert().success().stdout(contains("unchanged"));
    // Flags named as the job file's keys (`app_profile_id`); the old --app-profile, and
    // --emulator-host for --endpoint as the BigQuery command spells it, still work.
    base(&v2)
        .args(["--app-profile-id", "default"])
        .assert()
        .success()
        .stdout(contains(": unchanged"));
    let mut aliases = outflow();
    aliases
        .args(ENSURE_TABLE)
        .args(["--table", &table, "--emulator-host", &host]);
    aliases.args(["--app-profile", "default", "--options"]).arg(&v2);
    aliases.assert().success().stdout(contains(": unchanged"));
    // Declaring an existing raw family as an aggregate is refused, naming it.
    let v3 = dir.path().join("v3.yaml");
    std::fs::write(&v3, "column_families:\n  - {name: cf, type: {aggregate: max}}\n").unwrap();
    base(&v3).assert().code(1).stdout(contains("cf"));
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "column_families: []\n").unwrap();
    base(&bad).assert().code(2).stderr(contains("column_families"));
    // With --json, the error is also one document on stdout, as every subcommand writes it.
    let out = base(&bad)
        .arg("--json")
        .assert()
        .code(2)
        .stderr(contains("error:"));
    let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["command"], "bigtable ensure-table");
    assert_eq!(doc["status"], "usage");
    assert_eq!(doc["exit_code"], 2);
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("column_families"),
        "{doc}"
    );
}

/// A job loading `in.csv` in batches of `batch_size` into `table`, created if needed with
/// family `info`, with more sink `options` (YAML lines indented as sink keys).
fn city_job(
    dir: &std::path::Path,
    host: &str,
    table: &str,
    batch_size: usize,
    options: &str,
) -> std::path::PathBuf {
    let sink = format!(
        "  bigtable:\n    project: {PROJECT}\n    instance: {INSTANCE}\n    table: {table}\n\
         \x20   endpoint: {host}\n\
         \x20   table_options: {{ column_families: [ {{name: info}} ] }}\n\
         \x20   row_key: {{ fields: [id] }}\n\
         \x20   columns: {{ family: info }}\n{options}"
    );
    crate::city_job(dir, table, batch_size, &sink)
}

/// A run that fails on a bad CSV line after good ones: when no request went out (rows wait
/// for a full request) the table it created is deleted; when requests did, Bigtable applied
/// those rows, so the table stays and the error says how many rows it keeps (and that the
/// row still waiting for its request was discarded); a table that existed is never deleted.
#[test]
fn a_failed_run_removes_the_table_it_created_or_says_what_it_keeps() {
    let host = emulator_host();
    let dir = tempfile::tempdir().unwrap();
    // Batches of 2: the first two reach the sink before the third fails on line 6.
    crate::city_csv(dir.path(), 1..5, true);
    let run = |table: &str, batching: &str| {
        let job = city_job(dir.path(), &host, table, 2, batching);
        let failed = outflow().arg("run").arg(&job).arg("--quiet").assert().code(1);
        String::from_utf8_lossy(&failed.get_output().stderr).to_string()
    };
    let tables = || python_tables(&host, PROJECT, INSTANCE);

    let unsent = unique_name("unsent");
    let stderr = run(&unsent, "");
    assert!(stderr.contains("in.csv, line 6"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "removed table {unsent}, created by this run and never committed to"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("discarded 4 rows not visible yet"), "{stderr}");
    assert!(!tables().contains(&unsent));

    let applied = unique_name("applied");
    // A request per row: each goes out when the next row arrives, so the last one waits.
    let stderr = run(&applied, "    batching: { max_entries: 1 }\n");
    assert!(
        stderr.contains(&format!(
            "discarded 1 row not visible yet; left behind: table {applied} (created by this run) \
             keeps 3 rows applied before the run stopped"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("removed table"), "{stderr}");
    let keys: Vec<String> = python_read(&host, PROJECT, INSTANCE, &applied)["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(keys, ["1", "2", "3"]);

    // An empty table made before the run, by ensure-table, stays.
    let existing = unique_name("existing");
    let families = dir.path().join("families.yaml");
    std::fs::write(&families, "column_families:\n  - {name: info}\n").unwrap();
    ensure_table(&host, &existing, &families)
        .assert()
        .success()
        .stdout(contains("created"));
    let stderr = run(&existing, "");
    assert!(!stderr.contains("removed table"), "{stderr}");
    assert!(tables().contains(&existing));
    assert_eq!(
        python_read(&host, PROJECT, INSTANCE, &existing)["rows"],
        serde_json::json!([])
    );
}

/// Ctrl-C during a run, once rows are in the table: Bigtable applied what was
/// acknowledged, so the table stays, holding exactly the rows the error says it keeps.
#[test]
fn ctrl_c_leaves_exactly_the_rows_the_error_says_bigtable_applied() {
    let host = emulator_host();
    let dir = tempfile::tempdir().unwrap();
    crate::city_csv(dir.path(), 0..1_000_000, false);
    let table = unique_name("interrupted");
    let job = city_job(
        dir.path(),
        &host,
        &table,
        1000,
        "    batching: { max_entries: 1000 }\n",
    );
    let count = || {
        cbt(&host, PROJECT, INSTANCE, &["count", &table])
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let exists = || cbt(&host, PROJECT, INSTANCE, &["ls"]).lines().any(|t| t == table);
    let (code, stderr) = crate::interrupted_run(&job, &[], || exists() && count() > 0);
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted (Ctrl-C) before the commit"),
        "{stderr}"
    );
    let kept = format!("table {table} (created by this run) keeps ");
    let said: u64 = stderr
        .split_once(&kept)
        .and_then(|(_, rest)| rest.split_once(" rows applied before the run stopped"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of the rows kept: {stderr}"));
    assert!(said > 0 && said < 1_000_000, "{stderr}");
    assert_eq!(count(), said, "{stderr}");
}

/// A job reading `in/*.csv` (`id`, `city`) into `table`, family `info`, with more sink
/// `options`.
fn parts_job(dir: &std::path::Path, host: &str, table: &str, options: &str) -> std::path::PathBuf {
    let sink = format!(
        "  bigtable:\n    project: {PROJECT}\n    instance: {INSTANCE}\n    table: {table}\n\
         \x20   endpoint: {host}\n\
         \x20   table_options: {{ column_families: [ {{name: info}}, {{name: stats, type: {{aggregate: sum}}}} ] }}\n\
         \x20   row_key: {{ fields: [id] }}\n{options}"
    );
    crate::city_parts_job(dir, table, &sink)
}

const INFO_ONLY: &str = "    columns: { explicit: [ {field: city, family: info} ] }\n";

/// Per row key, the timestamps of its `info:city` versions, as Google's Python client reads
/// them.
fn city_versions(host: &str, table: &str) -> std::collections::BTreeMap<String, Vec<i64>> {
    let read = python_read(host, PROJECT, INSTANCE, table);
    read["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let versions = row["cells"]["info"]["city"]
                .as_array()
                .map(|cells| cells.iter().map(|c| c["ts"].as_i64().unwrap()).collect())
                .unwrap_or_default();
            (row["key"].as_str().unwrap().to_string(), versions)
        })
        .collect()
}

/// Reruns load only new files: `_outflow_loads` in the instance records which files each
/// table holds. A load's cells all have one write time.
#[test]
fn a_rerun_into_bigtable_loads_only_the_new_files() {
    let host = emulator_host();
    let table = unique_name("reruns");
    let dir = tempfile::tempdir().unwrap();
    crate::city_part(dir.path(), "a", 0..3);
    crate::city_part(dir.path(), "b", 3..5);
    let job = parts_job(dir.path(), &host, &table, INFO_ONLY);
    outflow().arg("run").arg(&job).assert().success();
    let first = city_versions(&host, &table);
    assert_eq!(first.len(), 5);
    let times: std::collections::BTreeSet<i64> = first.values().flatten().copied().collect();
    assert_eq!(times.len(), 1, "one write time for the load: {first:?}");

    outflow()
        .arg("run")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains(format!(
            "Skipped 2 files {table} already holds from an earlier run"
        )));
    assert_eq!(city_versions(&host, &table), first);

    crate::city_part(dir.path(), "c", 5..6);
    outflow().arg("run").arg(&job).assert().success();
    let after = city_versions(&host, &table);
    assert_eq!(after.len(), 6);
    assert!(after.values().all(|v| v.len() == 1), "{after:?}");
}

/// `outflow run` killed (SIGKILL) at moments spread over a run, each time run again to
/// the end: the killed run's write time is reused, so each cell has one version.
#[test]
fn a_bigtable_run_killed_at_any_moment_and_run_again_writes_each_cell_once() {
    let host = emulator_host();
    let dir = tempfile::tempdir().unwrap();
    for f in 0..4 {
        crate::city_part(dir.path(), &format!("p{f}"), f * 2500..(f + 1) * 2500);
    }
    let prefix = unique_name("killed");
    let kills = crate::killed_then_run_again(
        std::time::Duration::from_millis(30),
        |round| {
            parts_job(
                dir.path(),
                &host,
                &format!("{prefix}_{round}"),
                &format!("{INFO_ONLY}    batching: {{ max_entries: 250 }}\n"),
            )
        },
        |round| {
            let versions = city_versions(&host, &format!("{prefix}_{round}"));
            assert_eq!(versions.len(), 10_000, "round {round}");
            let doubled: Vec<_> = versions.iter().filter(|(_, v)| v.len() != 1).take(3).collect();
            assert!(doubled.is_empty(), "round {round}: {doubled:?}");
        },
    );
    assert!(kills >= 2, "killed {kills} times");
}

/// A stopped load into an aggregate family cannot be written again without counting twice:
/// the rerun refuses, naming the file, until told to load it again.
#[test]
fn a_rerun_refuses_to_count_a_stopped_aggregate_load_twice() {
    let host = emulator_host();
    let table = unique_name("counted");
    let dir = tempfile::tempdir().unwrap();
    crate::city_part(dir.path(), "a", 0..3);
    let job = parts_job(
        dir.path(),
        &host,
        &table,
        "    columns: { explicit: [ {field: city, family: info}, {field: rides, family: stats} ] }\n",
    );
    outflow().arg("run").arg(&job).assert().success();
    // What a kill after the rows and before the record leaves: the load is open.
    let ledger = cbt(
        &host,
        PROJECT,
        INSTANCE,
        &["read", "_outflow_loads", &format!("prefix={table}#")],
    );
    let key = ledger
        .lines()
        .find(|l| l.starts_with(&format!("{table}#")))
        .unwrap_or_else(|| panic!("no ledger row for {table}: {ledger}"))
        .trim()
        .to_string();
    cbt(
        &host,
        PROJECT,
        INSTANCE,
        &["deletecolumn", "_outflow_loads", &key, "loads", "loaded"],
    );

    let refused = outflow().arg("run").arg(&job).assert().failure();
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).to_string();
    assert!(stderr.contains("stopped while loading 1 file into"), "{stderr}");
    assert!(
        stderr.contains("a.csv") && stderr.contains("aggregate"),
        "{stderr}"
    );
    assert!(stderr.contains("--reload"), "{stderr}");
    outflow().arg("plan").arg(&job).assert().failure();
    let rides = |read: &serde_json::Value| -> i64 {
        let hex = read["rows"][0]["cells"]["stats"]["rides"][0]["value_hex"]
            .as_str()
            .unwrap();
        i64::from_str_radix(hex, 16).unwrap()
    };
    assert_eq!(rides(&python_read(&host, PROJECT, INSTANCE, &table)), 1);
    outflow()
        .args(["run", "--reload", "--quiet"])
        .arg(&job)
        .assert()
        .success();
    assert_eq!(rides(&python_read(&host, PROJECT, INSTANCE, &table)), 2);
    outflow()
        .arg("run")
        .arg(&job)
        .assert()
        .success()
        .stdout(contains("Skipped 1 file"));
}

#[test]
fn a_job_of_debezium_events_deletes_and_updates_rows_by_key_and_plan_says_so() {
    let host = emulator_host();
    let table = unique_name("accounts");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("events.ndjson"),
        concat!(
            "{\"before\": null, \"after\": {\"id\": \"a\", \"name\": \"ada\"}, \"op\": \"c\"}\n",
            "{\"before\": null, \"after\": {\"id\": \"b\", \"name\": \"alan\"}, \"op\": \"c\"}\n",
            "{\"before\": {\"id\": \"a\", \"name\": \"ada\"}, \"after\": {\"id\": \"a\", \"name\": \"ada l\"}, \"op\": \"u\"}\n",
            "{\"before\": {\"id\": \"b\", \"name\": \"alan\"}, \"after\": null, \"op\": \"d\"}\n",
        ),
    )
    .unwrap();
    let job = format!(
        "source:\n  path: events.ndjson\n\
         transforms:\n  - debezium: {{}}\n\
         sink:\n  bigtable:\n    project: {PROJECT}\n    instance: {INSTANCE}\n    table: {table}\n\
         \x20   endpoint: {host}\n\
         \x20   table_options: {{ column_families: [ {{name: info}} ] }}\n\
         \x20   row_key: {{ fields: [id] }}\n\
         \x20   columns: {{ explicit: [ {{field: name, family: info}} ] }}\n\
         \x20   changes: {{ operation: {{ column: op }} }}\n"
    );
    std::fs::write(dir.path().join("job.yaml"), job).unwrap();
    outflow()
        .arg("plan")
        .arg(dir.path().join("job.yaml"))
        .assert()
        .success()
        .stdout(contains("upsert by row key [id]"));
    outflow()
        .args(["run", "--quiet"])
        .arg(dir.path().join("job.yaml"))
        .assert()
        .success();
    let read = python_read(&host, PROJECT, INSTANCE, &table);
    let rows = read["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{read}");
    assert_eq!(rows[0]["key"], "a");
    let name = &rows[0]["cells"]["info"]["name"][0]["value_hex"];
    assert_eq!(name, &serde_json::json!(hex("ada l")));
}
