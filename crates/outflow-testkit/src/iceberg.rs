//! Reading Iceberg tables back with PyIceberg and Java Iceberg.
//!
//! Both readers print the same canonical JSON (see `tests/readers/python/README.md`): the
//! current schema, partition spec, properties, snapshots with summaries, and the rows read
//! with the current schema, sorted. Tests compare what Outflow wrote with what both say.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::served::ServedReader;
use crate::{python, require_env};

/// PyIceberg's `iceberg_tool.py serve`, for the whole test binary.
static PYICEBERG: ServedReader = ServedReader::new("pyiceberg");
/// The Java reader's `serve`, for the whole test binary.
static JAVA: ServedReader = ServedReader::new("java");

/// An independent Iceberg implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// PyIceberg 0.12 (with pyarrow).
    PyIceberg,
    /// Java Iceberg 1.12, the reference implementation.
    Java,
}

impl Reader {
    /// Both readers.
    pub const ALL: [Reader; 2] = [Reader::PyIceberg, Reader::Java];
}

/// Where a test's catalog lives.
#[derive(Clone, Debug)]
pub enum TestCatalog {
    /// A SQL catalog in a SQLite file.
    Sql {
        /// The catalog name (rows in `iceberg_tables` are keyed by it).
        name: String,
        /// The SQLite file.
        db: PathBuf,
        /// The warehouse directory.
        warehouse: PathBuf,
    },
    /// A SQL catalog in a SQLite file whose warehouse is in an object store: PyIceberg reads
    /// it through pyarrow's S3 file system, Java Iceberg through its S3FileIO.
    SqlInStore {
        /// The catalog name.
        name: String,
        /// The SQLite file.
        db: PathBuf,
        /// The warehouse URL (`s3://bucket/prefix`).
        warehouse: String,
        /// The store's FileIO properties (endpoint, keys, region).
        properties: std::collections::BTreeMap<String, String>,
    },
    /// A REST catalog: the server `scripts/servers/iceberg-rest.sh` started, or SeaweedFS's.
    Rest {
        /// The catalog name.
        name: String,
        /// The server's URI.
        uri: String,
        /// Catalog properties for the readers (credentials, headers, storage settings).
        properties: std::collections::BTreeMap<String, String>,
    },
}

impl TestCatalog {
    /// A SQL catalog in a fresh directory: `catalog.db` and `warehouse/` inside it.
    pub fn sql_in(dir: &Path) -> TestCatalog {
        let warehouse = dir.join("warehouse");
        std::fs::create_dir_all(&warehouse).expect("create warehouse");
        TestCatalog::Sql {
            name: "outflow".into(),
            db: dir.join("catalog.db"),
            warehouse,
        }
    }

    /// The test REST catalog server (`OUTFLOW_ICEBERG_REST_URI`).
    pub fn rest() -> TestCatalog {
        TestCatalog::Rest {
            name: "rest".into(),
            uri: require_env("OUTFLOW_ICEBERG_REST_URI"),
            properties: Default::default(),
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            TestCatalog::Sql { name, db, warehouse } => {
                sql_args(name, db, format!("file://{}", warehouse.display()))
            }
            TestCatalog::SqlInStore {
                name,
                db,
                warehouse,
                properties,
            } => {
                let mut args = sql_args(name, db, warehouse.clone());
                for (key, value) in properties {
                    args.extend(["--catalog-property".to_string(), format!("{key}={value}")]);
                }
                args
            }
            TestCatalog::Rest {
                name,
                uri,
                properties,
            } => {
                let mut args = vec![
                    "--catalog-type".into(),
                    "rest".into(),
                    "--catalog-name".into(),
                    name.clone(),
                    "--uri".into(),
                    uri.clone(),
                ];
                for (key, value) in properties {
                    args.extend(["--catalog-property".to_string(), format!("{key}={value}")]);
                }
                args
            }
        }
    }

    /// Runs `verb` on `table` with `reader`'s tool (kept running for the test binary),
    /// with `extra` arguments, and returns the JSON document it prints.
    fn call(&self, reader: Reader, verb: &str, table: &str, extra: &[String]) -> Value {
        self.try_call(reader, verb, table, extra)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// The same, with the tool's error returned.
    fn try_call(&self, reader: Reader, verb: &str, table: &str, extra: &[String]) -> Result<Value, String> {
        let mut args = vec![verb.to_string()];
        args.extend(self.args());
        args.extend(["--table".to_string(), table.to_string()]);
        args.extend(extra.iter().cloned());
        match reader {
            Reader::PyIceberg => PYICEBERG.try_request(
                || {
                    let mut c = Command::new(python());
                    c.arg(require_env("OUTFLOW_ICEBERG_TOOL")).arg("serve");
                    c
                },
                &args,
            ),
            Reader::Java => JAVA.try_request(
                || {
                    let mut c = Command::new("java");
                    c.arg("-jar")
                        .arg(require_env("OUTFLOW_JAVA_READER_JAR"))
                        .arg("serve");
                    c
                },
                &args,
            ),
        }
    }

    /// Reads `table` (`ns.name`) with `reader`, as canonical JSON.
    pub fn read(&self, reader: Reader, table: &str) -> Value {
        self.call(reader, "read", table, &[])
    }

    /// [`TestCatalog::read`], or `None` when the table (or the SQLite catalog's file) does
    /// not exist (PyIceberg's `NoSuchTableError`, Java's `NoSuchTableException`); any
    /// other error panics.
    pub fn try_read(&self, reader: Reader, table: &str) -> Option<Value> {
        match self.try_call(reader, "read", table, &[]) {
            Ok(read) => Some(read),
            Err(error) if error.contains("NoSuchTable") || error.contains("does not exist") => None,
            Err(error) => panic!("{error}"),
        }
    }

    /// Reads `table` with both readers, asserts they agree, and returns what they read.
    pub fn read_both(&self, table: &str) -> Value {
        let py = self.read(Reader::PyIceberg, table);
        let java = self.read(Reader::Java, table);
        assert_eq!(py, java, "PyIceberg and Java Iceberg disagree about {table}");
        py
    }

    /// PyIceberg's counts of a table too large to dump: `rows`, `snapshots`, and for the
    /// integer `column` its `distinct`, `min`, `max` and `sum`.
    pub fn column_stats(&self, table: &str, column: &str) -> Value {
        self.call(
            Reader::PyIceberg,
            "column-stats",
            table,
            &["--column".to_string(), column.to_string()],
        )
    }

    /// [`TestCatalog::column_stats`] by `reader`, with `summary_values`: the values of
    /// snapshot summary key `summary_key` along the main branch, newest first.
    pub fn column_stats_with(&self, reader: Reader, table: &str, column: &str, summary_key: &str) -> Value {
        let args = ["--column", column, "--summary-key", summary_key].map(String::from);
        self.call(reader, "column-stats", table, &args)
    }

    /// Has PyIceberg create `table` from a Parquet file's schema (when missing) and append
    /// its rows. `extra` holds further arguments (`--partition-field day(ts)`...).
    pub fn pyiceberg_create_and_append(&self, table: &str, parquet: &Path, extra: &[&str]) -> Value {
        let mut args = vec!["--parquet".to_string(), parquet.display().to_string()];
        args.extend(extra.iter().map(|a| a.to_string()));
        self.call(Reader::PyIceberg, "create-and-append", table, &args)
    }

    /// Has PyIceberg tag the table's oldest snapshot `name`, with a `max-ref-age-ms` when
    /// given; returns `{"snapshot_id"}`.
    pub fn pyiceberg_tag_oldest(&self, table: &str, name: &str, max_ref_age_ms: Option<i64>) -> Value {
        let mut args = vec!["--name".to_string(), name.to_string()];
        if let Some(age) = max_ref_age_ms {
            args.extend(["--max-ref-age-ms".to_string(), age.to_string()]);
        }
        self.call(Reader::PyIceberg, "tag", table, &args)
    }

    /// PyIceberg's view of the current snapshot's data files: `{"files": [{path,
    /// record_count, file_size}]}`, sorted by path.
    pub fn pyiceberg_files(&self, table: &str) -> Value {
        self.call(Reader::PyIceberg, "files", table, &[])
    }

    /// Java Iceberg's view of the current snapshot's data files: `{"files": [{path,
    /// partition, spec_id, record_count, file_size, delete_files, value_counts,
    /// null_counts, lower_bounds, upper_bounds}]}`, sorted by path; counts and bounds by
    /// column name.
    pub fn java_files(&self, table: &str) -> Value {
        self.call(Reader::Java, "files", table, &[])
    }

    /// Every snapshot's row count, each read by Java Iceberg traveling to it:
    /// `{"SNAPSHOT_ID": rows}`. A snapshot whose files are gone fails the read.
    pub fn java_snapshot_rows(&self, table: &str) -> Value {
        self.call(Reader::Java, "snapshot-rows", table, &[])
    }

    /// Has Java Iceberg delete the rows whose `column` (int, long or string) is one of
    /// `values`, by `mode` (`position` or `equality`) delete files in one row delta;
    /// returns `{"delete_files", "positions"}`.
    pub fn java_delete_rows(&self, table: &str, column: &str, values: &[&str], mode: &str) -> Value {
        let args = ["--column", column, "--values", &values.join(","), "--mode", mode].map(String::from);
        self.call(Reader::Java, "delete-rows", table, &args)
    }

    /// Has PyIceberg register existing Parquet files (`add_files`).
    pub fn pyiceberg_add_files(&self, table: &str, files: &[PathBuf]) -> Value {
        let mut args = vec!["--files".to_string()];
        args.extend(files.iter().map(|f| f.display().to_string()));
        self.call(Reader::PyIceberg, "add-files", table, &args)
    }
}

/// The readers' arguments for a SQL catalog `name` in `db` with its `warehouse` URL.
fn sql_args(name: &str, db: &Path, warehouse: String) -> Vec<String> {
    vec![
        "--catalog-type".into(),
        "sql".into(),
        "--catalog-name".into(),
        name.to_string(),
        "--uri".into(),
        format!("sqlite:///{}", db.display()),
        "--warehouse".into(),
        warehouse,
    ]
}

/// The rows of a canonical read.
pub fn rows(read: &Value) -> &Vec<Value> {
    read["rows"].as_array().expect("rows is an array")
}

/// The `id` column of a canonical read, sorted.
pub fn sorted_ids(read: &Value) -> Vec<i64> {
    let mut ids: Vec<i64> = rows(read)
        .iter()
        .map(|r| r["id"].as_i64().expect("id is an integer"))
        .collect();
    ids.sort_unstable();
    ids
}

/// The data file paths of a reader's `files` listing (`{"files": [{path, ...}]}`).
pub fn file_paths(files: &Value) -> Vec<&str> {
    files["files"]
        .as_array()
        .expect("files is an array")
        .iter()
        .map(|f| f["path"].as_str().expect("path is a string"))
        .collect()
}

/// The current schema's fields of a canonical read.
pub fn fields(read: &Value) -> &Vec<Value> {
    read["schema"]["fields"]
        .as_array()
        .expect("schema.fields is an array")
}

/// The GCS store `scripts/servers/fake-gcs.sh` started (fake-gcs-server, which checks no
/// credentials).
#[derive(Clone, Debug)]
pub struct GcsStore {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// A bucket that exists.
    pub bucket: String,
}

impl GcsStore {
    /// The store from `OUTFLOW_GCS_*` (the test script exports them); panics when missing.
    pub fn from_env() -> GcsStore {
        GcsStore {
            endpoint: require_env("OUTFLOW_GCS_ENDPOINT"),
            bucket: require_env("OUTFLOW_GCS_BUCKET"),
        }
    }

    /// Uploads `bytes` as the object `key` through GCS's JSON API with `curl`, as another
    /// tool would: OpenDAL 0.57's GCS writer encodes names twice (apache/opendal#7926), so
    /// objects with `=` in their names are uploaded here instead.
    pub fn upload(&self, key: &str, bytes: &[u8]) {
        use std::io::Write;
        let name: String = key
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let url = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType=media&name={name}",
            self.endpoint, self.bucket
        );
        let mut child = Command::new("curl")
            .args([
                "-sf",
                "--max-time",
                "30",
                "-X",
                "POST",
                "--data-binary",
                "@-",
                &url,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn curl");
        child.stdin.take().unwrap().write_all(bytes).unwrap();
        assert!(child.wait().unwrap().success(), "uploading {key} to {url} failed");
    }

    /// iceberg-rust's FileIO properties for it, which the readers map to their own names.
    pub fn properties(&self) -> std::collections::BTreeMap<String, String> {
        [
            ("gcs.service.path", self.endpoint.as_str()),
            ("gcs.no-auth", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

/// The S3 store `scripts/servers/seaweedfs.sh` started (SeaweedFS, SigV4 with keys).
#[derive(Clone, Debug)]
pub struct S3Store {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The region to sign for.
    pub region: String,
    /// A bucket that exists.
    pub bucket: String,
}

impl S3Store {
    /// The store from `OUTFLOW_S3_*` (the test script exports them); panics when missing.
    pub fn from_env() -> S3Store {
        S3Store {
            endpoint: require_env("OUTFLOW_S3_ENDPOINT"),
            access_key_id: require_env("OUTFLOW_S3_ACCESS_KEY_ID"),
            secret_access_key: require_env("OUTFLOW_S3_SECRET_ACCESS_KEY"),
            region: require_env("OUTFLOW_S3_REGION"),
            bucket: require_env("OUTFLOW_S3_BUCKET"),
        }
    }

    /// iceberg-rust's and PyIceberg's FileIO properties for it (path-style access, which an
    /// endpoint on an IP address needs).
    pub fn properties(&self) -> std::collections::BTreeMap<String, String> {
        [
            ("s3.endpoint", self.endpoint.as_str()),
            ("s3.access-key-id", self.access_key_id.as_str()),
            ("s3.secret-access-key", self.secret_access_key.as_str()),
            ("s3.region", self.region.as_str()),
            ("s3.path-style-access", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

/// A SeaweedFS of one test's own: the `weed` the test script installed (`OUTFLOW_WEED`),
/// with the shared store's keys, on ports and data of its own, so that the test can kill it
/// by its PID and start it again while the shared store serves the other tests.
pub struct OwnSeaweed {
    store: S3Store,
    dir: tempfile::TempDir,
    base: u16,
    child: Option<std::process::Child>,
}

impl OwnSeaweed {
    /// Starts one and returns once its S3 answers a signed listing of its bucket.
    pub fn start() -> OwnSeaweed {
        let shared = S3Store::from_env();
        let base = free_port_block();
        let mut own = OwnSeaweed {
            store: S3Store {
                endpoint: format!("http://127.0.0.1:{base}"),
                ..shared
            },
            dir: tempfile::tempdir().expect("a data directory"),
            base,
            child: None,
        };
        own.start_again();
        own
    }

    /// The store, as [`S3Store::from_env`] describes the shared one.
    pub fn store(&self) -> &S3Store {
        &self.store
    }

    /// Kills the server with SIGKILL, by its PID, and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill weed");
            child.wait().expect("wait for weed");
        }
    }

    /// Starts the server (again) on the same ports and data; returns once S3 answers.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "weed is running already");
        let port = |offset: u16| (self.base + offset).to_string();
        let log = std::fs::File::create(self.dir.path().join("weed.log")).expect("weed.log");
        let child = Command::new(require_env("OUTFLOW_WEED"))
            .args([
                "mini",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                "-master.telemetry=false",
            ])
            .args([
                "-admin.ui=false",
                "-webdav=false",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
            ])
            .arg(format!("-bucket={}", self.store.bucket))
            .arg(format!("-dir={}", self.dir.path().join("data").display()))
            .arg(format!("-s3.port={}", port(0)))
            .arg(format!("-master.port={}", port(1)))
            .arg(format!("-filer.port={}", port(2)))
            .arg(format!("-volume.port={}", port(3)))
            .env("AWS_ACCESS_KEY_ID", &self.store.access_key_id)
            .env("AWS_SECRET_ACCESS_KEY", &self.store.secret_access_key)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("weed.log"))
            .stderr(log)
            .spawn()
            .expect("spawn weed");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.answers() {
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || std::time::Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default();
                panic!(
                    "weed did not answer on {} ({exited:?}): {log}",
                    self.store.endpoint
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// Whether S3 answers a signed listing of the bucket (curl signs with SigV4).
    fn answers(&self) -> bool {
        Command::new("curl")
            .args(["-sf", "--max-time", "2", "--aws-sigv4"])
            .arg(format!("aws:amz:{}:s3", self.store.region))
            .arg("--user")
            .arg(format!(
                "{}:{}",
                self.store.access_key_id, self.store.secret_access_key
            ))
            .arg(format!(
                "{}/{}?list-type=2",
                self.store.endpoint, self.store.bucket
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for OwnSeaweed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port P with P..P+4 free, and their gRPC ports P+10000.. too (SeaweedFS's components
/// each listen on a port and on that port + 10000).
fn free_port_block() -> u16 {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    for _ in 0..200 {
        let base = 20_000 + rand::random::<u16>() % 9_000;
        if (0..4).all(|i| free(base + i) && free(base + 10_000 + i)) {
            return base;
        }
    }
    panic!("no block of free ports for SeaweedFS");
}
