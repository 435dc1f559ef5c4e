//! Helpers for Outflow's integration tests.
//!
//! The servers and independent readers the tests use are installed and started by
//! `scripts/test.sh`, which exports their endpoints. [`require_env`] reads one of those
//! variables, falling back to the `.cache/run/*.env` files the scripts write (so a test run
//! by hand after `scripts/test.sh` has installed things still finds them), and panics with
//! instructions when it is nowhere: an integration test never skips silently.

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod bigquery;
pub mod bigtable;
pub mod changes;
pub mod faults;
pub mod iceberg;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod served;

/// The repository root (where `Cargo.toml` of the workspace lies).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .nth(2)
        .expect("crates/outflow-testkit lies two levels down")
        .to_path_buf()
}

/// The value of `var`, from the environment or from the env files `scripts/test.sh` writes.
///
/// Panics, naming the variable and the script to run, when it is set nowhere.
pub fn require_env(var: &str) -> String {
    if let Ok(value) = std::env::var(var)
        && !value.is_empty()
    {
        return value;
    }
    if let Some(value) = from_env_files(var) {
        return value;
    }
    panic!(
        "{var} is not set. Integration tests need the real servers and readers that \
         scripts/test.sh installs and starts; run the tests through scripts/test.sh \
         (or start the servers with scripts/servers/*.sh start and source .cache/run/*.env)."
    );
}

fn from_env_files(var: &str) -> Option<String> {
    let dir = repo_root().join(".cache/run");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "env"))
        .collect();
    files.sort();
    let prefix = format!("export {var}=");
    files.iter().find_map(|f| {
        std::fs::read_to_string(f).ok()?.lines().find_map(|line| {
            line.trim()
                .strip_prefix(&prefix)
                .map(|v| v.trim_matches(|c| c == '"' || c == '\'').to_string())
        })
    })
}

/// A loopback port free at the time of the call, for a server the test starts itself.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// A fresh name for a table, dataset or namespace: `prefix` and a random suffix, so
/// concurrent tests never share one.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}_{:08x}", rand::random::<u32>())
}

/// Runs a command, panicking with its output when it fails, and returns its stdout.
pub fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("could not run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        panic!(
            "{command:?} failed with {}\nstdout:\n{stdout}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    stdout
}

/// Runs a command that prints one JSON document and parses it.
pub fn run_json(command: &mut Command) -> serde_json::Value {
    let stdout = run(command);
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{command:?} printed invalid JSON ({e}):\n{stdout}"))
}

/// A reader's JSON list of strings (table names...), panicking on anything else.
pub fn strings(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("expected a list of strings, got {value}"))
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("expected a string, got {v}"))
                .to_string()
        })
        .collect()
}

/// The Python interpreter of the readers' venv (`OUTFLOW_PYTHON`).
pub fn python() -> String {
    require_env("OUTFLOW_PYTHON")
}
