//! The `outflow` binary's integration tests, one module per area, in one test binary: each
//! binary links the whole command line, so one is far quicker to build than five.
//! (`features.rs` stays apart: it checks a binary built with fewer features.)

mod bigquery;
mod bigtable;
mod cli;
mod iceberg;
mod iceberg_add_files;
mod object_sources;
mod pipes;
mod plan_then_run;
mod reruns;
#[cfg(feature = "kafka")]
mod streaming;
mod strict;
mod types;

/// `outflow` as a script runs it: no log filter from the environment, no colours.
fn outflow() -> assert_cmd::Command {
    let mut cmd = assert_cmd::cargo::cargo_bin_cmd!("outflow");
    cmd.env_remove("OUTFLOW_LOG").env("NO_COLOR", "1");
    cmd
}

/// Runs `outflow run JOB --quiet` with `envs`, sends it SIGINT (what Ctrl-C sends) as soon
/// as `ready()` says so, and returns its exit code and stderr. Fails when the run ends
/// before it is interrupted, when `ready()` is not true within 60 s, or when the run does
/// not stop within 60 s of the signal.
fn interrupted_run(
    job: &std::path::Path,
    envs: &[(&str, &str)],
    ready: impl Fn() -> bool,
) -> (Option<i32>, String) {
    use std::time::{Duration, Instant};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_outflow"))
        .arg("run")
        .arg(job)
        .arg("--quiet")
        .env_remove("OUTFLOW_LOG")
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not ready to interrupt after 60 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it was interrupted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the run did not stop within 60 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

/// Runs each round's job (`job(round)`) killed (SIGKILL, no cleanup) after a delay that
/// grows by 1.6 each round from `first_delay`, then runs it again to the end twice (the
/// second has nothing new) and calls `check(round)`. Stops after the first round whose
/// first run finished before its kill; returns how many runs were killed.
fn killed_then_run_again(
    first_delay: std::time::Duration,
    mut job: impl FnMut(u32) -> std::path::PathBuf,
    mut check: impl FnMut(u32),
) -> u32 {
    use std::time::Instant;
    let mut delay = first_delay;
    for round in 0.. {
        let job = job(round);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_outflow"))
            .args(["run", "--quiet"])
            .arg(&job)
            .env_remove("OUTFLOW_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let finished = loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "round {round}: the first run failed");
                break true;
            }
            if started.elapsed() >= delay {
                child.kill().unwrap();
                child.wait().unwrap();
                break false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        for _ in 0..2 {
            outflow().args(["run", "--quiet"]).arg(&job).assert().success();
        }
        check(round);
        if finished {
            // Every round before this one was killed.
            return round;
        }
        delay = delay.mul_f64(1.6);
    }
    unreachable!("the rounds end when a run finishes")
}

/// Writes `in/{name}.csv` in `dir`, header `id,city,rides`, a row per id, for jobs reading
/// `in/*.csv`.
fn city_part(dir: &std::path::Path, name: &str, ids: std::ops::Range<i64>) {
    std::fs::create_dir_all(dir.join("in")).unwrap();
    let csv: String = std::iter::once("id,city,rides\n".to_string())
        .chain(ids.map(|i| format!("{i},city {i},1\n")))
        .collect();
    std::fs::write(dir.join(format!("in/{name}.csv")), csv).unwrap();
}

/// Writes the job `{name}.yaml` in `dir`, reading `in/*.csv` (the files of [`city_part`])
/// into `sink`, the sink section's YAML (indented by two spaces).
fn city_parts_job(dir: &std::path::Path, name: &str, sink: &str) -> std::path::PathBuf {
    let job = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &job,
        format!(
            "source:\n  path: in/*.csv\n  csv: {{ schema: [ {{name: id, type: long, required: true}}, {{name: city, type: string}}, {{name: rides, type: long}} ] }}\n\
             sink:\n{sink}"
        ),
    )
    .unwrap();
    job
}

/// Writes `in.csv` in `dir`: a header `id,city` and a row per id, then, with `bad_line`, a
/// line whose id is not a number.
fn city_csv(dir: &std::path::Path, ids: std::ops::Range<u64>, bad_line: bool) {
    let mut csv: String = std::iter::once("id,city\n".to_string())
        .chain(ids.map(|i| format!("{i},city number {i}\n")))
        .collect();
    if bad_line {
        csv.push_str("oops,Evora\n");
    }
    std::fs::write(dir.join("in.csv"), csv).unwrap();
}

/// Writes the job `{name}.yaml` in `dir`, reading `in.csv` (`id` long and required, `city`
/// string) in batches of `batch_size` into `sink`, the sink section's YAML (`bigquery:\n
/// ...`, indented by two spaces).
fn city_job(dir: &std::path::Path, name: &str, batch_size: usize, sink: &str) -> std::path::PathBuf {
    let job = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &job,
        format!(
            "source:\n  path: in.csv\n  batch_size: {batch_size}\n  csv: {{ schema: [ {{name: id, type: long, required: true}}, {{name: city, type: string}} ] }}\n\
             sink:\n{sink}"
        ),
    )
    .unwrap();
    job
}
