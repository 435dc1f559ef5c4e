//! The BigQuery emulator (`local-bigquery`, started by `scripts/servers/bigquery.sh`) and
//! the independent reader on Google's Python client (`tests/readers/python/bigquery_tool.py`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::served::ServedReader;
use crate::{repo_root, require_env};

/// `bigquery_tool.py serve`, for the whole test binary.
static TOOL: ServedReader = ServedReader::new("bigquery");

/// A test's dataset, deleted with its tables when dropped: the emulator's every lookup
/// scans its whole catalog, so the last test of a binary is as fast as the first only when
/// the datasets before it are gone. A test that fails (panics) keeps its dataset to be
/// looked at; the reader deletes it when the test binary ends.
#[derive(Debug)]
pub struct Dataset {
    env: BigQueryEnv,
    name: String,
}

impl Dataset {
    /// The dataset's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The emulator the dataset is on.
    pub fn env(&self) -> &BigQueryEnv {
        &self.env
    }
}

impl std::ops::Deref for Dataset {
    type Target = str;

    fn deref(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Display for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl Drop for Dataset {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.env.delete_dataset(&self.name);
        }
    }
}

/// Where the emulator listens, and the Python that runs the reader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BigQueryEnv {
    /// REST endpoint URL (`OUTFLOW_BIGQUERY_REST`).
    pub rest: String,
    /// Storage Write/Read gRPC endpoint URL (`OUTFLOW_BIGQUERY_GRPC`).
    pub grpc: String,
    /// The emulator's project (`OUTFLOW_BIGQUERY_PROJECT`).
    pub project: String,
    /// The Python of the emulator's venv, which has Google's client (`OUTFLOW_BIGQUERY_PYTHON`).
    pub python: String,
}

impl BigQueryEnv {
    /// Reads the environment the test script exports; panics naming what is missing.
    pub fn from_env() -> Self {
        BigQueryEnv {
            rest: require_env("OUTFLOW_BIGQUERY_REST"),
            grpc: require_env("OUTFLOW_BIGQUERY_GRPC"),
            project: require_env("OUTFLOW_BIGQUERY_PROJECT"),
            python: require_env("OUTFLOW_BIGQUERY_PYTHON"),
        }
    }

    /// The reader script.
    pub fn tool() -> PathBuf {
        repo_root().join("tests/readers/python/bigquery_tool.py")
    }

    /// Runs one of the tool's subcommands (kept running for the test binary) against the
    /// emulator and returns the JSON document it prints.
    fn call(&self, args: &[&str]) -> serde_json::Value {
        self.try_call(args).unwrap_or_else(|error| panic!("{error}"))
    }

    /// The same, with the tool's error returned.
    fn try_call(&self, args: &[&str]) -> Result<serde_json::Value, String> {
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend(["--endpoint".to_string(), self.rest.clone()]);
        TOOL.try_request(
            || {
                let mut c = Command::new(&self.python);
                c.arg(Self::tool()).arg("serve");
                c
            },
            &args,
        )
    }

    /// Creates `dataset` with Google's Python client (tables need one; sinks create tables
    /// only). The client deletes it, tables and all, when the test binary ends.
    pub fn create_dataset(&self, dataset: &str) {
        self.call(&["create-dataset", "--project", &self.project, "--dataset", dataset]);
    }

    /// Deletes `dataset` and its tables (nothing when it is gone already).
    pub fn delete_dataset(&self, dataset: &str) {
        self.call(&["delete-dataset", "--project", &self.project, "--dataset", dataset]);
    }

    /// A new dataset with a unique name starting with `prefix`, created as
    /// [`BigQueryEnv::create_dataset`] does, and deleted when the test is done with it.
    pub fn new_dataset(&self, prefix: &str) -> Dataset {
        let name = crate::unique_name(prefix);
        self.create_dataset(&name);
        Dataset {
            env: self.clone(),
            name,
        }
    }

    /// The primary key columns of a table, as Google's Python client reads them (empty when
    /// it has none).
    pub fn primary_key(&self, dataset: &str, table: &str) -> Vec<String> {
        let read = self.call(&self.table_args("primary-key", dataset, table));
        serde_json::from_value(read["primary_key"].clone()).expect("a list of column names")
    }

    /// Protobuf `rows` of message type `descriptor` (a serialized DescriptorProto), decoded
    /// by Google's protobuf runtime: one JSON object per row, as `json_format.MessageToDict`
    /// renders it with the fields' own names (int64 values as decimal strings).
    pub fn decode_rows(&self, descriptor: &[u8], rows: &[Vec<u8>]) -> Vec<serde_json::Value> {
        let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let given = serde_json::json!({
            "descriptor": hex(descriptor),
            "rows": rows.iter().map(|r| hex(r)).collect::<Vec<_>>(),
        });
        let file = tempfile::NamedTempFile::new().expect("a temporary file");
        std::fs::write(file.path(), given.to_string()).expect("writing the rows to decode");
        let path = file.path().display().to_string();
        let decoded = self.call(&["decode-rows", "--file", &path]);
        serde_json::from_value(decoded["rows"].clone()).expect("a list of rows")
    }

    /// A table as Google's Python client reads it: `{"schema": [...], "num_rows": N,
    /// "rows": [...]}` (see the script for the value conventions).
    pub fn read_table(&self, dataset: &str, table: &str) -> serde_json::Value {
        self.try_read_table(dataset, table)
            .unwrap_or_else(|| panic!("table {}.{dataset}.{table} does not exist", self.project))
    }

    /// The `id` column of every row of `dataset.table`, sorted, as Google's Python client
    /// reads them.
    pub fn sorted_ids(&self, dataset: &str, table: &str) -> Vec<i64> {
        ids_of(&self.read_table(dataset, table))
    }

    /// [`BigQueryEnv::read_table`], or `None` when the table does not exist (the client's
    /// `NotFound`); any other error panics.
    pub fn try_read_table(&self, dataset: &str, table: &str) -> Option<serde_json::Value> {
        match self.try_call(&self.table_args("read", dataset, table)) {
            Ok(read) => Some(read),
            Err(error) if error.contains("NotFound") => None,
            Err(error) => panic!("{error}"),
        }
    }

    /// The tool's arguments for `verb` on `dataset.table` of this project.
    fn table_args<'a>(&'a self, verb: &'a str, dataset: &'a str, table: &'a str) -> [&'a str; 7] {
        [
            verb,
            "--project",
            &self.project,
            "--dataset",
            dataset,
            "--table",
            table,
        ]
    }

    /// Runs one GoogleSQL statement (a query, DML or DDL) with Google's Python client and
    /// returns its rows (`[{COLUMN: VALUE}, ...]`, none for DML and DDL).
    pub fn query(&self, sql: &str) -> serde_json::Value {
        self.call(&["query", "--project", &self.project, "--sql", sql])["rows"].clone()
    }

    /// The name of a pending stream of `dataset.table` that Google's Python client created
    /// and finalized without committing it.
    pub fn uncommitted_stream(&self, dataset: &str, table: &str) -> String {
        let made = self.call(&self.table_args("uncommitted-stream", dataset, table));
        made["stream"].as_str().expect("a stream name").to_string()
    }

    /// The tables of `dataset`, sorted, as Google's Python client lists them.
    pub fn tables(&self, dataset: &str) -> Vec<String> {
        let listed = self.call(&["tables", "--project", &self.project, "--dataset", dataset]);
        crate::strings(&listed["tables"])
    }

    /// Starts a reader that runs `sql` again and again, appending each result to a file,
    /// until [`Poller::stop`].
    pub fn poll(&self, sql: &str, max_seconds: u32) -> Poller {
        let dir = std::env::temp_dir().join(format!("outflow-bq-poll-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let out = dir.join("results.jsonl");
        let stop = dir.join("stop");
        let max = max_seconds.to_string();
        let child = Command::new(&self.python)
            .arg(Self::tool())
            .args([
                "poll",
                "--project",
                &self.project,
                "--sql",
                sql,
                "--out",
                out.to_str().expect("utf-8 path"),
                "--stop-file",
                stop.to_str().expect("utf-8 path"),
                "--max-seconds",
                &max,
                "--endpoint",
                &self.rest,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the polling reader");
        Poller {
            child,
            dir,
            out,
            stop,
        }
    }
}

/// A running polling reader (see [`BigQueryEnv::poll`]).
#[derive(Debug)]
pub struct Poller {
    child: Child,
    dir: PathBuf,
    out: PathBuf,
    stop: PathBuf,
}

impl Poller {
    /// How many results the reader has written so far.
    pub fn results_so_far(&self) -> usize {
        std::fs::read_to_string(&self.out)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// Waits (at most `timeout`) until the reader has written `n` results.
    pub fn wait_for(&self, n: usize, timeout: Duration) {
        let started = Instant::now();
        while self.results_so_far() < n && started.elapsed() < timeout {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the reader and returns every result it saw, in order.
    pub fn stop(mut self) -> Vec<serde_json::Value> {
        std::fs::write(&self.stop, b"stop").expect("write the stop file");
        let started = Instant::now();
        loop {
            match self.child.try_wait().expect("poll the reader") {
                Some(status) => {
                    assert!(status.success(), "the polling reader failed: {status}");
                    break;
                }
                None if started.elapsed() > Duration::from_secs(30) => {
                    let _ = self.child.kill();
                    panic!("the polling reader did not stop within 30 s");
                }
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let results = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad poll line {l:?}: {e}")))
            .collect();
        let _ = std::fs::remove_dir_all(&self.dir);
        results
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        // A test that panicked before stop(): do not leave the reader running.
        if let Ok(None) = self.child.try_wait() {
            let _ = std::fs::write(&self.stop, b"stop");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The `id` column of every row of a [`BigQueryEnv::read_table`] result, sorted.
pub fn ids_of(read: &serde_json::Value) -> Vec<i64> {
    let mut ids: Vec<i64> = read["rows"]
        .as_array()
        .expect("rows is an array")
        .iter()
        .map(|r| r["id"].as_i64().expect("id is an integer"))
        .collect();
    ids.sort_unstable();
    ids
}
