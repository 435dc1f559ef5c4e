//! Statements on a real Ballista cluster: an `outflow-scheduler` and two `outflow-executor`
//! processes on loopback, started by each test. Iceberg tables on the SQLite catalog are
//! read back by PyIceberg; Bigtable rows are counted by Google's `cbt` in the emulator
//! `scripts/test.sh` starts.

use std::fs::File;
use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use outflow_bigtable::{BigtableSinkOptions, ColumnFamily, ColumnMapping, RowKey, TableCreateOptions};
use outflow_datafusion::{SinkSpec, SinkTable};
use outflow_iceberg::{CatalogConfig, IcebergSinkOptions};
use outflow_testkit::iceberg::TestCatalog;
use outflow_testkit::{free_port, unique_name};

/// One cluster at a time: each runs three processes and millions of rows on a small
/// machine, and executors starved of CPU miss heartbeats.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A scheduler and executors, each its own process with its log in `dir`; killed on drop.
struct Cluster {
    dir: PathBuf,
    scheduler: Child,
    executors: Vec<Child>,
    url: String,
}

fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited early: {status}");
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on port {port} within a minute");
}

fn log_file(dir: &Path, name: &str) -> Stdio {
    Stdio::from(File::create(dir.join(format!("{name}.log"))).unwrap())
}

impl Cluster {
    fn start(dir: &Path, executors: usize) -> Cluster {
        let port = free_port();
        let mut scheduler = Command::new(env!("CARGO_BIN_EXE_outflow-scheduler"))
            .args(["--bind-host", "127.0.0.1", "--external-host", "127.0.0.1"])
            .args(["--bind-port", &port.to_string()])
            // A killed executor is noticed in seconds, not the default three minutes; not
            // so few that a heartbeat late on a loaded machine drops a live executor.
            .args([
                "--executor-timeout-seconds",
                "15",
                "--expire-dead-executor-interval-seconds",
                "1",
            ])
            // Executors ask for work: Ballista 53's push scheduling does not offer the tasks
            // of a lost executor to the others until some other event comes.
            .args(["--scheduler-policy", "pull-staged"])
            .env("RUST_LOG", "info")
            .stdout(log_file(dir, "scheduler"))
            .stderr(log_file(dir, "scheduler.err"))
            .spawn()
            .expect("start outflow-scheduler");
        wait_for_port(port, &mut scheduler, "the scheduler");
        let mut cluster = Cluster {
            dir: dir.to_path_buf(),
            scheduler,
            executors: Vec::new(),
            url: format!("df://127.0.0.1:{port}"),
        };
        for i in 0..executors {
            let (flight, grpc) = (free_port(), free_port());
            let work = dir.join(format!("executor-{i}"));
            std::fs::create_dir_all(&work).unwrap();
            let mut executor = Command::new(env!("CARGO_BIN_EXE_outflow-executor"))
                .args(["--bind-host", "127.0.0.1", "--external-host", "127.0.0.1"])
                .args([
                    "--bind-port",
                    &flight.to_string(),
                    "--bind-grpc-port",
                    &grpc.to_string(),
                ])
                .args([
                    "--scheduler-host",
                    "127.0.0.1",
                    "--scheduler-port",
                    &port.to_string(),
                ])
                .args([
                    "--concurrent-tasks",
                    "2",
                    "--executor-heartbeat-interval-seconds",
                    "1",
                ])
                .args(["--task-scheduling-policy", "pull-staged"])
                .arg("--work-dir")
                .arg(&work)
                .env("RUST_LOG", "info")
                .stdout(log_file(dir, &format!("executor-{i}")))
                .stderr(log_file(dir, &format!("executor-{i}.err")))
                .spawn()
                .expect("start outflow-executor");
            wait_for_port(flight, &mut executor, "an executor");
            cluster.executors.push(executor);
        }
        cluster.wait_for_registrations(executors);
        cluster
    }

    fn log(&self, name: &str) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(self.dir.join(format!("{name}.log"))) {
            file.read_to_string(&mut text).unwrap();
        }
        text
    }

    fn wait_for_registrations(&self, executors: usize) {
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            let registered = (0..executors)
                // (Pulling executors register with their first poll for work.)
                .filter(|i| {
                    self.log(&format!("executor-{i}"))
                        .contains("Starting poll work loop")
                })
                .count();
            if registered == executors {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("executors did not register:\n{}", self.log("scheduler"));
    }

    /// Tasks executor `i` ran.
    fn tasks_run(&self, i: usize) -> usize {
        self.log(&format!("executor-{i}"))
            .matches("Received task")
            .count()
    }

    fn kill_executor(&mut self, i: usize) {
        self.executors[i].kill().unwrap();
        self.executors[i].wait().unwrap();
    }

    async fn connect(&self) -> SessionContext {
        let ctx = outflow_ballista::connect(&self.url)
            .await
            .expect("connect to the scheduler");
        ctx.sql("SET datafusion.execution.target_partitions = 4")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        ctx
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for executor in &mut self.executors {
            let _ = executor.kill();
            let _ = executor.wait();
        }
        let _ = self.scheduler.kill();
        let _ = self.scheduler.wait();
    }
}

/// `files` Parquet files of `id` 1..=rows (a shared source every executor reads), written
/// by DataFusion in this process.
async fn parquet_source(dir: &Path, rows: i64, files: i64) -> PathBuf {
    let source = dir.join("source");
    std::fs::create_dir_all(&source).unwrap();
    let local = SessionContext::new();
    let per_file = rows / files;
    for f in 0..files {
        let (first, last) = (
            f * per_file + 1,
            if f == files - 1 { rows } else { (f + 1) * per_file },
        );
        let path = source.join(format!("part-{f}.parquet"));
        local
            .sql(&format!(
                "COPY (SELECT value AS id, 'city-' || CAST(value % 50 AS VARCHAR) AS city \
                 FROM generate_series({first}, {last})) TO '{}' STORED AS PARQUET",
                path.display()
            ))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }
    source
}

/// A cluster of two executors, and a client session on it with `source` registered:
/// four Parquet files of `rows` ids.
async fn cluster_with_source(dir: &Path, rows: i64) -> (Cluster, SessionContext) {
    let source = parquet_source(dir, rows, 4).await;
    let cluster = Cluster::start(dir, 2);
    let ctx = cluster.connect().await;
    ctx.register_parquet("source", source.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    (cluster, ctx)
}

/// Registers `trips`: the Iceberg table `table` in a SQLite catalog in `dir`.
fn register_iceberg(ctx: &SessionContext, dir: &Path, table: &str) {
    let spec = iceberg_spec(dir, table);
    ctx.register_table("trips", Arc::new(SinkTable::from_spec(trips_schema(), spec)))
        .unwrap();
}

fn trips_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("city", DataType::Utf8, true),
    ]))
}

fn iceberg_spec(dir: &Path, table: &str) -> SinkSpec {
    let options = IcebergSinkOptions::builder()
        .catalog(CatalogConfig::sqlite_in(dir))
        .table(table)
        .writers_per_table(1)
        .build()
        .unwrap();
    SinkSpec::Iceberg(Box::new(options))
}

fn answer(batches: &[RecordBatch]) -> (u64, u64) {
    let value = |name: &str| {
        batches[0]
            .column_by_name(name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", batches[0].schema()))
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap()
            .value(0)
    };
    (value("count"), value("failed"))
}

async fn insert(ctx: &SessionContext, sql: &str) -> (u64, u64) {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    answer(&batches)
}

/// Asserts that column `id` of `table` holds 1..=rows, each once, in `snapshots` snapshots.
fn assert_each_id_once(readers: &TestCatalog, table: &str, rows: i64, snapshots: u64) {
    let stats = readers.column_stats(table, "id");
    assert_eq!(stats["rows"], rows, "{stats}");
    assert_eq!(stats["distinct"], rows, "{stats}");
    assert_eq!(stats["min"], 1, "{stats}");
    assert_eq!(stats["max"], rows, "{stats}");
    assert_eq!(stats["snapshots"], snapshots, "{stats}");
}

/// Rows of the source: enough for every executor to get tasks.
const ROWS: i64 = 500_000;
/// Rows when an executor is killed mid-statement: enough that the statement still runs
/// when the kill comes.
const KILLED_ROWS: i64 = 3_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_select_on_two_executors_commits_each_row_once_in_one_snapshot() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (cluster, ctx) = cluster_with_source(dir.path(), ROWS).await;
    register_iceberg(&ctx, dir.path(), "cluster.trips");

    assert_eq!(
        insert(&ctx, "INSERT INTO trips SELECT id, city FROM source").await,
        (ROWS as u64, 0)
    );
    let readers = TestCatalog::sql_in(dir.path());
    assert_each_id_once(&readers, "cluster.trips", ROWS, 1);
    for i in 0..2 {
        assert!(
            cluster.tasks_run(i) > 0,
            "executor {i} ran no task:\n{}",
            cluster.log(&format!("executor-{i}"))
        );
    }

    // A second statement is a second snapshot.
    assert_eq!(
        insert(
            &ctx,
            &format!("INSERT INTO trips SELECT id + {ROWS}, city FROM source WHERE id <= 1000")
        )
        .await,
        (1000, 0)
    );
    assert_each_id_once(&readers, "cluster.trips", ROWS + 1000, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_executor_s_tasks_are_rerun_and_each_row_is_committed_once() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, ctx) = cluster_with_source(dir.path(), KILLED_ROWS).await;
    register_iceberg(&ctx, dir.path(), "cluster.killed");

    let statement =
        tokio::spawn(async move { insert(&ctx, "INSERT INTO trips SELECT id, city FROM source").await });
    // Kill executor 1 as soon as it is writing.
    let until = Instant::now() + Duration::from_secs(60);
    while cluster.tasks_run(1) == 0 {
        assert!(Instant::now() < until, "executor 1 got no task");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.kill_executor(1);
    let Ok(answer) = tokio::time::timeout(Duration::from_secs(120), statement).await else {
        panic!(
            "the statement did not finish after the executor was lost; scheduler:\n{}\nexecutor 0:\n{}",
            tail(&cluster.log("scheduler"), 80),
            tail(&cluster.log("executor-0"), 40)
        );
    };
    let answer = answer.unwrap();
    assert_eq!(answer, (KILLED_ROWS as u64, 0));

    let readers = TestCatalog::sql_in(dir.path());
    assert_each_id_once(&readers, "cluster.killed", KILLED_ROWS, 1);
    assert!(
        cluster.log("scheduler").contains("Removing executor"),
        "the scheduler did not notice the lost executor:\n{}",
        cluster.log("scheduler")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_select_on_two_executors_writes_every_row_to_bigtable() {
    const KEYS: i64 = 200_000;
    let host = outflow_testkit::bigtable::emulator_host();
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (cluster, ctx) = cluster_with_source(dir.path(), KEYS).await;
    let table = unique_name("cluster");
    let options = BigtableSinkOptions::builder()
        .project("outflow-it")
        .instance("emulated")
        .endpoint(host.clone())
        .table(table.clone())
        .table_options(
            TableCreateOptions::builder()
                .column_family(ColumnFamily::new("cf"))
                .build()
                .unwrap(),
        )
        .row_key(RowKey::field("key"))
        .columns(ColumnMapping::family("cf"))
        .build()
        .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("city", DataType::Utf8, true),
    ]));
    ctx.register_table(
        "users",
        Arc::new(SinkTable::from_spec(
            schema,
            SinkSpec::Bigtable(Box::new(options)),
        )),
    )
    .unwrap();

    let (written, failed) = insert(
        &ctx,
        "INSERT INTO users SELECT 'user' || LPAD(CAST(id AS VARCHAR), 8, '0'), city FROM source",
    )
    .await;
    assert_eq!((written, failed), (KEYS as u64, 0));
    for i in 0..2 {
        assert!(cluster.tasks_run(i) > 0, "executor {i} ran no task");
    }
    let count = outflow_testkit::bigtable::cbt(&host, "outflow-it", "emulated", &["count", &table]);
    assert_eq!(count.trim(), KEYS.to_string(), "cbt count: {count}");
    let row = outflow_testkit::bigtable::cbt(
        &host,
        "outflow-it",
        "emulated",
        &["lookup", &table, "user00000123"],
    );
    assert!(row.contains("city-23"), "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outflow_run_executes_an_engine_job_on_the_cluster() {
    const TRIPS: i64 = 500_000;
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let source = parquet_source(dir.path(), TRIPS, 4).await;
    let cluster = Cluster::start(dir.path(), 2);
    let job = dir.path().join("job.yaml");
    std::fs::write(
        &job,
        format!(
            "source:\n  path: {}\n\
             engine:\n  sql: SELECT id, city FROM source\n  partitions: 4\n  scheduler: {}\n\
             sink:\n  iceberg:\n    catalog: {{ type: sql, uri: lake/catalog.db, warehouse: lake/warehouse }}\n    table: cli.trips\n\
             dead_letter: rejected.ndjson\n",
            source.display(),
            cluster.url
        ),
    )
    .unwrap();
    let status = outflow_cli::commands::run::execute(outflow_cli::commands::run::RunArgs {
        job,
        quiet: true,
        json: true,
        reload: false,
        until_caught_up: false,
    })
    .await;
    assert_eq!(status, outflow_cli::exit::ExitStatus::Ok);
    let readers = TestCatalog::sql_in(&dir.path().join("lake"));
    assert_each_id_once(&readers, "cli.trips", TRIPS, 1);
    assert!(dir.path().join("rejected.ndjson").exists());
    assert!(
        cluster.tasks_run(0) + cluster.tasks_run(1) > 0,
        "the cluster ran no task"
    );
}
