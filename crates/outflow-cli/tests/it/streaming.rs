//! Streaming jobs against the real Kafka broker (`scripts/servers/kafka.sh`): records from
//! a 4-partition topic into an Iceberg table (read back by PyIceberg and Java Iceberg), a
//! Bigtable table on the emulator and a BigQuery table on the emulator (both read back by
//! Google's Python clients), exactly once across SIGKILLs and restarts.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use outflow_testkit::bigquery::BigQueryEnv;
use outflow_testkit::iceberg::{Reader, TestCatalog};
use outflow_testkit::kafka::Broker;
use outflow_testkit::unique_name;
use rand::Rng;
use serde_json::Value;

const PARTITIONS: i32 = 4;

/// Produces `count` JSON records (ids `first..first + count`) to `topic`, spread over its
/// partitions by id.
fn produce(broker: &Broker, topic: &str, first: i64, count: i64) {
    let producer = broker.producer();
    for id in first..first + count {
        let value = format!(
            r#"{{"id": {id}, "customer": "c{}", "amount": {}.25, "status": "{}", "note": "{}"}}"#,
            id % 977,
            id % 1000,
            ["new", "paid", "shipped"][(id % 3) as usize],
            "x".repeat(100)
        );
        producer.send(topic, (id % PARTITIONS as i64) as i32, &format!("k{id}"), &value);
    }
    producer.flush();
}

/// How a test's streaming job differs from the plain one.
#[derive(Default)]
struct JobShape<'a> {
    /// The checkpoint interval (default 300ms).
    interval: Option<&'a str>,
    /// More keys of the `source` section (`json: ...`).
    source: &'a str,
    /// More top-level keys (`dead_letter: ...`).
    top: &'a str,
}

/// A streaming job from `topic` into `table` of the SQL catalog in `dir`, whose group
/// member keeps one static id across restarts (so a restart after a kill takes the
/// partitions back at once instead of waiting for the dead member's session to expire).
fn write_job(dir: &Path, broker: &Broker, topic: &str, table: &str, shape: JobShape) -> std::path::PathBuf {
    let job = dir.join("stream.yaml");
    let text = format!(
        "id: lake-{topic}\n\
         source:\n  \
           kafka:\n    \
             brokers: \"{}\"\n    \
             topics: [{topic}]\n    \
             group: g-{topic}\n    \
             key_column: key\n    \
             properties: {{ group.instance.id: lake-{topic}-1 }}\n\
         {}\
         checkpoint: {{ interval: {}, rows: 25000 }}\n\
         sink:\n  \
           iceberg:\n    \
             catalog: {{ type: sql, uri: catalog.db, warehouse: warehouse }}\n    \
             table: {table}\n\
         {}",
        broker.brokers,
        shape.source,
        shape.interval.unwrap_or("300ms"),
        shape.top,
    );
    std::fs::write(&job, text).unwrap();
    job
}

fn start(job: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_outflow"))
        .arg("run")
        .arg(job)
        .args(args)
        .env_remove("OUTFLOW_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs the job to the end (`--until-caught-up`), asserting it succeeds; its stdout.
fn run_to_end(job: &Path) -> String {
    let output = start(job, &["--until-caught-up", "--json", "--quiet"])
        .wait_with_output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the job failed ({:?}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The offsets the table holds for `job`, from `reader`'s summary values (newest first;
/// each partition's newest value counts).
fn stored_offsets(stats: &Value) -> BTreeMap<String, i64> {
    let mut merged = BTreeMap::new();
    for text in stats["summary_values"].as_array().unwrap() {
        let topics: BTreeMap<String, BTreeMap<String, i64>> =
            serde_json::from_str(text.as_str().unwrap()).unwrap();
        for (topic, partitions) in topics {
            for (partition, next) in partitions {
                merged.entry(format!("{topic}/{partition}")).or_insert(next);
            }
        }
    }
    merged
}

/// Every record once: both readers count `expected` rows with `expected` distinct ids
/// `0..expected`, and the offsets stored are the topic's end offsets.
fn assert_exactly_once(
    catalog: &TestCatalog,
    table: &str,
    job_id: &str,
    expected: i64,
    ends: &BTreeMap<String, i64>,
) {
    let key = format!("outflow.offsets.{job_id}");
    for reader in Reader::ALL {
        let stats = catalog.column_stats_with(reader, table, "id", &key);
        assert_eq!(stats["rows"], expected, "{reader:?}: {stats}");
        assert_eq!(stats["distinct"], expected, "{reader:?}: {stats}");
        assert_eq!(stats["min"], 0, "{reader:?}");
        assert_eq!(stats["max"], expected - 1, "{reader:?}");
        assert_eq!(&stored_offsets(&stats), ends, "{reader:?}: stored offsets");
    }
}

#[test]
fn a_job_killed_at_random_moments_and_restarted_writes_every_record_once() {
    let broker = Broker::from_env();
    let topic = unique_name("orders");
    broker.create_topic(&topic, PARTITIONS);
    const RECORDS: i64 = 1_000_000;

    produce(&broker, &topic, 0, RECORDS);

    let dir = tempfile::tempdir().unwrap();
    let catalog = TestCatalog::sql_in(dir.path());
    let table = "stream.orders";
    let job = write_job(dir.path(), &broker, &topic, table, JobShape::default());
    let mut rng = rand::rng();
    let mut killed = 0;
    let started = Instant::now();
    while killed < 10 {
        let mut child = start(&job, &["--until-caught-up", "--quiet"]);
        let wait = Duration::from_millis(rng.random_range(300..2500));
        std::thread::sleep(wait);
        if child.try_wait().unwrap().is_some() {
            // It caught up before the kill: the rest of the test still checks the result.
            break;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        killed += 1;
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "ten kills took over 120 s"
        );
    }
    assert!(
        killed >= 3,
        "the job caught up after {killed} kills: too few to test restarts"
    );
    // The restarts went on from what the table held: the last run reads only the rest.
    let before = catalog.column_stats(table, "id")["rows"].as_i64().unwrap();
    assert!(before > 0, "nothing was committed before the kills");
    let out = run_to_end(&job);
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["stream"]["records"], RECORDS - before, "{out}");
    let ends = broker.end_offsets(&topic);
    assert_eq!(ends.values().sum::<i64>(), RECORDS);
    assert_exactly_once(&catalog, table, &format!("lake-{topic}"), RECORDS, &ends);

    // Records produced later are read from where the table is, once.
    produce(&broker, &topic, RECORDS, 1000);
    let out = run_to_end(&job);
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["stream"]["records"], 1000, "{out}");
    let ends = broker.end_offsets(&topic);
    assert_exactly_once(&catalog, table, &format!("lake-{topic}"), RECORDS + 1000, &ends);
}

/// A running job's checkpoint lines, read as they come. A checkpoint's `offsets` name only
/// the partitions it read, so what the job holds is each partition's offset from the newest
/// line naming it.
struct Checkpoints {
    lines: std::sync::mpsc::Receiver<(Instant, String)>,
    held: BTreeMap<String, i64>,
}

impl Checkpoints {
    fn of(child: &mut Child) -> Checkpoints {
        use std::io::BufRead;
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send((Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        Checkpoints {
            lines,
            held: BTreeMap::new(),
        }
    }

    /// Waits (up to `limit`) for the checkpoint after which the job holds `total` records in
    /// all; when it came, and its line.
    fn reaching(&mut self, total: i64, limit: Duration) -> (Instant, Value) {
        use std::sync::mpsc::RecvTimeoutError;
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, line) = match self.lines.recv_timeout(left) {
                Ok(next) => next,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "no checkpoint reached {total} records within {limit:?}; the job holds {:?}",
                    self.held
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "the job's output ended before it held {total} records; it holds {:?}",
                    self.held
                ),
            };
            let Ok(report) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let Some(offsets) = report["offsets"].as_object() else {
                continue;
            };
            for (partition, next) in offsets {
                if let Some(next) = next.as_i64() {
                    self.held.insert(partition.clone(), next);
                }
            }
            if self.held.values().sum::<i64>() >= total {
                return (at, report);
            }
        }
    }

    /// The job's last line (its summary), once it has ended.
    fn summary(self) -> Value {
        let last = self.lines.iter().last().expect("the job printed nothing");
        serde_json::from_str(&last.1).unwrap()
    }
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn records_arriving_while_the_job_runs_are_committed_at_the_next_checkpoints_and_sigterm_stops_it_cleanly() {
    let broker = Broker::from_env();
    let topic = unique_name("live");
    broker.create_topic(&topic, PARTITIONS);
    produce(&broker, &topic, 0, 4000);
    let dir = tempfile::tempdir().unwrap();
    let catalog = TestCatalog::sql_in(dir.path());
    let table = "stream.live";
    let shape = JobShape {
        interval: Some("1s"),
        ..JobShape::default()
    };
    let job = write_job(dir.path(), &broker, &topic, table, shape);

    let mut child = start(&job, &["--json", "--quiet"]);
    let mut checkpoints = Checkpoints::of(&mut child);
    let (_, report) = checkpoints.reaching(4000, Duration::from_secs(60));
    // Every record produced so far is read: no partition lags.
    let lag: BTreeMap<String, i64> = serde_json::from_value(report["lag"].clone()).unwrap();
    assert_eq!(
        lag,
        (0..PARTITIONS).map(|p| (format!("{topic}/{p}"), 0)).collect(),
        "{report}"
    );
    // Offsets of a partition are one past its last record: each of the 4 holds 1000.
    for round in 1..=3 {
        produce(&broker, &topic, 4000 * round, 4000);
        let produced = Instant::now();
        let (committed, _) = checkpoints.reaching(4000 * (round + 1), Duration::from_secs(30));
        let latency = committed.duration_since(produced);
        assert!(
            latency <= Duration::from_millis(2500),
            "records produced were committed {latency:?} later, more than two 1 s intervals"
        );
    }
    let stats = catalog.column_stats(table, "id");
    assert_eq!(stats["rows"], 16000, "{stats}");

    // SIGTERM: the last checkpoint is committed and the job exits 0.
    produce(&broker, &topic, 16000, 400);
    std::thread::sleep(Duration::from_millis(200));
    signal(&child, "TERM");
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "SIGTERM should end the job with 0, got {status:?}"
    );
    let ends = broker.end_offsets(&topic);
    // Whatever was read before the signal is committed; the rest waits for the next run.
    run_to_end(&job);
    assert_exactly_once(&catalog, table, &format!("lake-{topic}"), 16400, &ends);
}

#[test]
fn records_that_do_not_decode_go_to_the_dead_letter_file_with_their_partition_and_offset() {
    let broker = Broker::from_env();
    let topic = unique_name("bad");
    broker.create_topic(&topic, PARTITIONS);
    produce(&broker, &topic, 0, 400);
    let producer = broker.producer();
    producer.send(&topic, 1, "b1", "{not json");
    producer.send(&topic, 2, "b2", r#"{"id": "four hundred", "customer": "c"}"#);
    producer.send(&topic, 3, "b3", "42");
    producer.flush();
    produce(&broker, &topic, 400, 400);

    let dir = tempfile::tempdir().unwrap();
    let catalog = TestCatalog::sql_in(dir.path());
    let table = "stream.bad";
    // The schema is given: the bad records cannot change what is inferred.
    let shape = JobShape {
        source: "  json:\n    schema:\n      - { name: id, type: long, required: true }\n      - { name: customer, type: string }\n",
        top: "dead_letter: dead.ndjson\n",
        ..JobShape::default()
    };
    let job = write_job(dir.path(), &broker, &topic, table, shape);
    let output = start(&job, &["--until-caught-up", "--json", "--quiet"])
        .wait_with_output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let dead = std::fs::read_to_string(dir.path().join("dead.ndjson")).unwrap();
    let mut lines: Vec<Value> = dead.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    lines.sort_by_key(|l| l["source"]["file"].as_str().unwrap().to_string());
    let places: Vec<(String, i64)> = lines
        .iter()
        .map(|l| {
            (
                l["source"]["file"].as_str().unwrap().to_string(),
                l["source"]["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    // Each bad record came after the 100 good ones of its partition.
    assert_eq!(
        places,
        [
            (format!("{topic}/1"), 100),
            (format!("{topic}/2"), 100),
            (format!("{topic}/3"), 100)
        ]
    );
    assert!(
        lines
            .iter()
            .all(|l| l["destination"] == table && l["reason"].as_str().unwrap().contains("not")),
        "{dead}"
    );
    let read = catalog.read_both(table);
    let ids = outflow_testkit::iceberg::sorted_ids(&read);
    assert_eq!(ids, (0..800).collect::<Vec<i64>>());
    let fields: Vec<&str> = outflow_testkit::iceberg::fields(&read)
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["id", "customer", "key"]);
}

/// The dead-letter output may be a Kafka topic: each failed record is one message, keyed
/// by where it was read, holding the same line a dead-letter file would.
#[test]
fn records_that_do_not_decode_go_to_a_dead_letter_topic_keyed_by_where_they_were_read() {
    let broker = Broker::from_env();
    let topic = unique_name("dlq-in");
    let dead = unique_name("dlq");
    broker.create_topic(&topic, PARTITIONS);
    broker.create_topic(&dead, 1);
    produce(&broker, &topic, 0, 100);
    let producer = broker.producer();
    producer.send(&topic, 1, "b1", "{not json");
    producer.send(&topic, 3, "b3", "[1, 2]");
    producer.flush();
    let dir = tempfile::tempdir().unwrap();
    let catalog = TestCatalog::sql_in(dir.path());
    let top = format!("dead_letter: {{ kafka: {{ topic: {dead} }} }}\n");
    let shape = JobShape {
        source: "  json:\n    schema:\n      - { name: id, type: long, required: true }\n",
        top: &top,
        ..JobShape::default()
    };
    let job = write_job(dir.path(), &broker, &topic, "stream.dlq", shape);
    let output = start(&job, &["--until-caught-up", "--quiet"])
        .wait_with_output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let letters = broker.read_all(&dead);
    let mut keys: Vec<&str> = letters.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, [format!("{topic}/1/25"), format!("{topic}/3/25")]);
    for (key, value) in &letters {
        let line: Value = serde_json::from_str(value).unwrap();
        assert_eq!(
            format!(
                "{}/{}",
                line["source"]["file"].as_str().unwrap(),
                line["source"]["offset"]
            ),
            *key
        );
        assert_eq!(line["destination"], "stream.dlq");
        assert!(line["reason"].as_str().unwrap().contains("not"), "{line}");
    }
    let read = catalog.read_both("stream.dlq");
    assert_eq!(
        outflow_testkit::iceberg::sorted_ids(&read),
        (0..100).collect::<Vec<i64>>()
    );

    // A dead-letter topic that does not exist stops the job before anything is read.
    let missing = std::fs::read_to_string(&job)
        .unwrap()
        .replace(&dead, "no-such-topic");
    std::fs::write(&job, missing).unwrap();
    let output = start(&job, &["--until-caught-up", "--quiet"])
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no-such-topic") && stderr.contains("dead_letter"),
        "{stderr}"
    );
}

/// `headers_column` puts each record's headers in a column, as the text of a JSON object.
#[test]
fn record_headers_go_to_a_column_as_a_json_object() {
    let broker = Broker::from_env();
    let topic = unique_name("headers");
    broker.create_topic(&topic, PARTITIONS);
    let producer = broker.producer();
    for id in 0..8i64 {
        let value = format!(r#"{{"id": {id}}}"#);
        let trace = format!("t{id}");
        let headers: &[(&str, &str)] = if id % 2 == 0 {
            &[("trace", &trace), ("source", "shop")]
        } else {
            &[]
        };
        producer.send_with_headers(&topic, (id % 4) as i32, &format!("k{id}"), &value, headers);
    }
    producer.flush();
    let dir = tempfile::tempdir().unwrap();
    let catalog = TestCatalog::sql_in(dir.path());
    let shape = JobShape {
        source: "  json:\n    schema:\n      - { name: id, type: long, required: true }\n",
        ..JobShape::default()
    };
    let job = write_job(dir.path(), &broker, &topic, "stream.headers", shape);
    let text = std::fs::read_to_string(&job).unwrap().replace(
        "key_column: key\n",
        "key_column: key\n    headers_column: headers\n",
    );
    std::fs::write(&job, text).unwrap();
    run_to_end(&job);

    let read = catalog.read_both("stream.headers");
    let rows = outflow_testkit::iceberg::rows(&read);
    assert_eq!(rows.len(), 8);
    for row in rows {
        let id = row["id"].as_i64().unwrap();
        if id % 2 == 0 {
            let headers: Value = serde_json::from_str(row["headers"].as_str().unwrap()).unwrap();
            assert_eq!(
                headers,
                serde_json::json!({"trace": format!("t{id}"), "source": "shop"}),
                "{row}"
            );
        } else {
            assert!(row["headers"].is_null(), "{row}");
        }
    }
}

/// Produces `count` records (ids `first..first + count`) that also have a `coupon` field.
fn produce_with_coupons(broker: &Broker, topic: &str, first: i64, count: i64) {
    let producer = broker.producer();
    for id in first..first + count {
        let value = format!(
            r#"{{"id": {id}, "customer": "c{id}", "amount": 1.5, "status": "new", "note": "n", "coupon": "SAVE{id}"}}"#
        );
        producer.send(topic, (id % PARTITIONS as i64) as i32, &format!("k{id}"), &value);
    }
    producer.flush();
}

/// Records with a field the inferred schema lacks arrive while the job runs: the table
/// gains the column when its schema evolution allows it; otherwise they go to the
/// dead-letter file naming the field. A restart whose first records hold the field (so
/// that it is inferred) decides the same.
#[test]
fn a_field_added_mid_stream_evolves_the_table_when_allowed_and_goes_to_the_dead_letter_file_when_not() {
    let broker = Broker::from_env();
    for allowed in [true, false] {
        let topic = unique_name("grow");
        broker.create_topic(&topic, PARTITIONS);
        produce(&broker, &topic, 0, 400);
        let dir = tempfile::tempdir().unwrap();
        let catalog = TestCatalog::sql_in(dir.path());
        let table = "stream.grown";
        let shape = JobShape {
            source: "  json: { infer_rows: 100 }\n",
            top: "dead_letter: dead.ndjson\n",
            ..JobShape::default()
        };
        let job = write_job(dir.path(), &broker, &topic, table, shape);
        if allowed {
            let text = std::fs::read_to_string(&job).unwrap().replace(
                "    table: stream.grown\n",
                "    table: stream.grown\n    schema_evolution: { options: [allow_field_addition] }\n",
            );
            std::fs::write(&job, text).unwrap();
        }
        let exit = if allowed { 0 } else { 3 };

        let mut child = start(&job, &["--json", "--quiet"]);
        let mut checkpoints = Checkpoints::of(&mut child);
        checkpoints.reaching(400, Duration::from_secs(60));
        produce_with_coupons(&broker, &topic, 400, 40);
        produce(&broker, &topic, 440, 60);
        checkpoints.reaching(500, Duration::from_secs(30));
        signal(&child, "TERM");
        assert_eq!(child.wait().unwrap().code(), Some(exit), "allowed: {allowed}");

        // The next run infers its schema from records that hold the field.
        produce_with_coupons(&broker, &topic, 500, 40);
        let run = start(&job, &["--until-caught-up", "--quiet"])
            .wait_with_output()
            .unwrap();
        assert_eq!(
            run.status.code(),
            Some(exit),
            "allowed: {allowed}: {}",
            String::from_utf8_lossy(&run.stderr)
        );

        let read = catalog.read_both(table);
        let fields: Vec<&str> = outflow_testkit::iceberg::fields(&read)
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        let with_coupon = |id: i64| (400..440).contains(&id) || (500..540).contains(&id);
        let dead = std::fs::read_to_string(dir.path().join("dead.ndjson")).unwrap_or_default();
        if allowed {
            assert_eq!(
                fields,
                ["id", "customer", "amount", "status", "note", "key", "coupon"]
            );
            assert_eq!(
                outflow_testkit::iceberg::sorted_ids(&read),
                (0..540).collect::<Vec<_>>()
            );
            for row in outflow_testkit::iceberg::rows(&read) {
                let id = row["id"].as_i64().unwrap();
                let expected = if with_coupon(id) {
                    Value::from(format!("SAVE{id}"))
                } else {
                    Value::Null
                };
                assert_eq!(row["coupon"], expected, "{row}");
            }
            assert_eq!(dead, "", "nothing goes to the dead-letter file");
        } else {
            assert_eq!(fields, ["id", "customer", "amount", "status", "note", "key"]);
            let expected: Vec<i64> = (0..500).filter(|&id| !with_coupon(id)).collect();
            assert_eq!(outflow_testkit::iceberg::sorted_ids(&read), expected);
            let lines: Vec<Value> = dead.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            let mut ids: Vec<i64> = lines
                .iter()
                .map(|l| l["record"]["id"].as_i64().unwrap())
                .collect();
            ids.sort_unstable();
            assert_eq!(ids, (0..540).filter(|&id| with_coupon(id)).collect::<Vec<_>>());
            for line in &lines {
                let reason = line["reason"].as_str().unwrap();
                assert!(
                    reason.contains("coupon") && reason.contains("schema_evolution"),
                    "{reason}"
                );
                assert!(line["source"]["offset"].is_i64(), "{line}");
            }
        }
    }
}

/// Produces `rounds` rounds of `size` records, from id `first` on, 250 ms apart.
fn produce_rounds(broker: &Broker, topic: &str, first: i64, rounds: i64, size: i64) {
    for round in 0..rounds {
        produce(broker, topic, first + round * size, size);
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Runs two processes of one job: `first`, then, once it has committed, a copy with its
/// own static member id (which forces a rebalance), while `more` produces records; stops
/// both with SIGTERM once `done` says every record is committed (within 120 s). Asserts
/// that both succeeded and both read records; returns what each read.
fn two_processes(first: &Path, more: impl Fn(), done: impl Fn() -> bool) -> (i64, i64) {
    let text = std::fs::read_to_string(first).unwrap();
    let member = text
        .split("group.instance.id: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a static member id")
        .to_string();
    let second = first.with_file_name("second.yaml");
    std::fs::write(
        &second,
        text.replace(&member, &format!("{}-2", member.trim_end_matches("-1"))),
    )
    .unwrap();

    let mut one = start(first, &["--json", "--quiet"]);
    let mut one_lines = Checkpoints::of(&mut one);
    // Joining once the first has committed forces a rebalance: the first checkpoints what
    // it holds of every partition before giving two of them up.
    one_lines.reaching(1, Duration::from_secs(60));
    let mut two = start(&second, &["--json", "--quiet"]);
    let two_lines = Checkpoints::of(&mut two);
    // Records keep coming through the rebalance and after it.
    more();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "not every record was committed within 120 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    signal(&one, "TERM");
    signal(&two, "TERM");
    assert!(one.wait().unwrap().success(), "the first process failed");
    assert!(two.wait().unwrap().success(), "the second process failed");
    let records = |lines: Checkpoints| lines.summary()["stream"]["records"].as_i64().unwrap();
    let read = (records(one_lines), records(two_lines));
    assert!(
        read.0 > 0 && read.1 > 0,
        "the processes read {} and {} records: the partitions were not shared",
        read.0,
        read.1
    );
    read
}

#[test]
fn two_processes_of_one_job_share_the_partitions_through_a_rebalance_without_loss_or_doubles() {
    let broker = Broker::from_env();
    let topic = unique_name("shared");
    broker.create_topic(&topic, PARTITIONS);
    const FIRST: i64 = 100_000;
    const ROUNDS: i64 = 20;
    const ROUND: i64 = 10_000;
    produce(&broker, &topic, 0, FIRST);
    let dir = tempfile::tempdir().unwrap();
    let catalog = TestCatalog::sql_in(dir.path());
    let table = "stream.shared";
    let first = write_job(dir.path(), &broker, &topic, table, JobShape::default());
    let total = FIRST + ROUNDS * ROUND;
    two_processes(
        &first,
        || produce_rounds(&broker, &topic, FIRST, ROUNDS, ROUND),
        || catalog.column_stats(table, "id")["rows"].as_i64().unwrap() >= total,
    );
    let ends = broker.end_offsets(&topic);
    assert_exactly_once(&catalog, table, &format!("lake-{topic}"), total, &ends);
}

/// A streaming job from `topic` into Bigtable table `table` on the emulator: cells timed by
/// each record's Kafka time; `families` are the table's column families (YAML) and
/// `columns` where the fields go.
fn write_bigtable_job(
    dir: &Path,
    broker: &Broker,
    topic: &str,
    table: &str,
    families: &str,
    columns: &str,
) -> std::path::PathBuf {
    let host = outflow_testkit::bigtable::emulator_host();
    let shape = JobShape {
        source: "  json:\n    schema:\n      - { name: id, type: long, required: true }\n      - { name: customer, type: string }\n      - { name: amount, type: double }\n",
        ..JobShape::default()
    };
    let job = write_job(dir, broker, topic, "unused.table", shape);
    let text = std::fs::read_to_string(&job).unwrap();
    let (head, _) = text.split_once("sink:").unwrap();
    let head = head.replace(
        "key_column: key\n",
        "key_column: key\n    timestamp_column: kafka_time\n",
    );
    let text = format!(
        "{head}sink:\n  bigtable:\n    project: {BT_PROJECT}\n    instance: {BT_INSTANCE}\n    table: {table}\n    \
         endpoint: {host}\n    \
         table_options: {{ column_families: [ {families} ] }}\n    \
         row_key: {{ fields: [id] }}\n    \
         columns: {{ explicit: [ {columns} ] }}\n    \
         timestamp: {{ field: kafka_time }}\n"
    );
    std::fs::write(&job, text).unwrap();
    job
}

/// Starts `job` up to `kills` times, killing it (SIGKILL) after a random number of
/// milliseconds in `after_ms` each time; how often it was killed before it caught up.
fn killed_at_random(job: &Path, kills: usize, after_ms: std::ops::Range<u64>) -> usize {
    let mut rng = rand::rng();
    let mut killed = 0;
    while killed < kills {
        let mut child = start(job, &["--until-caught-up", "--quiet"]);
        std::thread::sleep(Duration::from_millis(rng.random_range(after_ms.clone())));
        if child.try_wait().unwrap().is_some() {
            break;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        killed += 1;
    }
    killed
}

const BT_PROJECT: &str = "outflow-stream";
const BT_INSTANCE: &str = "stream";

#[test]
fn a_job_into_bigtable_killed_and_restarted_leaves_each_record_as_one_cell_version() {
    let broker = Broker::from_env();
    let topic = unique_name("cells");
    broker.create_topic(&topic, PARTITIONS);
    const RECORDS: i64 = 20_000;
    produce(&broker, &topic, 0, RECORDS);
    let dir = tempfile::tempdir().unwrap();
    let table = unique_name("orders");
    let job = write_bigtable_job(
        dir.path(),
        &broker,
        &topic,
        &table,
        "{name: info}",
        "{field: customer, family: info}, {field: amount, family: info}",
    );
    let killed = killed_at_random(&job, 5, 300..1500);
    assert!(
        killed >= 2,
        "the job caught up after {killed} kills: too few to test restarts"
    );
    run_to_end(&job);

    // Google's client: every record is one row, each cell one version at the record's time,
    // however often the job wrote it again.
    let host = outflow_testkit::bigtable::emulator_host();
    let read = outflow_testkit::bigtable::python_read(&host, BT_PROJECT, BT_INSTANCE, &table);
    let rows = read["rows"].as_array().unwrap();
    assert_eq!(rows.len() as i64, RECORDS);
    for row in rows {
        for qualifier in ["customer", "amount"] {
            let versions = row["cells"]["info"][qualifier].as_array().unwrap();
            assert_eq!(versions.len(), 1, "{}: {versions:?}", row["key"]);
        }
    }
    // The offsets in the ledger are the topic's end offsets.
    assert_eq!(bigtable_offsets(&table, &topic), broker.end_offsets(&topic));
}

/// The offsets job `lake-{topic}` holds for Bigtable table `table`: its row of the
/// instance's ledger, read with Google's Python client, each partition's newest cell.
fn bigtable_offsets(table: &str, topic: &str) -> BTreeMap<String, i64> {
    let host = outflow_testkit::bigtable::emulator_host();
    let ledger = outflow_testkit::bigtable::python_read(&host, BT_PROJECT, BT_INSTANCE, "_outflow_loads");
    let key = format!("{table}#outflow.offsets.lake-{topic}");
    let Some(row) = ledger["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key.as_str())
    else {
        return BTreeMap::new();
    };
    let mut stored = BTreeMap::new();
    for (partition, versions) in row["cells"]["loads"].as_object().unwrap() {
        stored.insert(partition.clone(), newest_text(versions).parse::<i64>().unwrap());
    }
    stored
}

/// The newest of a cell's versions (as the Python reader lists them), as UTF-8 text.
fn newest_text(versions: &Value) -> String {
    let newest = versions
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|v| v["ts"].as_i64().unwrap())
        .unwrap();
    outflow_testkit::bigtable::text_of_hex(newest["value_hex"].as_str().unwrap())
}

/// Two processes of one job into Bigtable through a rebalance: each record one row, each
/// cell one version, and the ledger holds both processes' offsets.
#[test]
fn two_processes_of_one_job_into_bigtable_share_the_partitions_through_a_rebalance() {
    let broker = Broker::from_env();
    let topic = unique_name("btshared");
    broker.create_topic(&topic, PARTITIONS);
    const FIRST: i64 = 10_000;
    const ROUNDS: i64 = 10;
    const ROUND: i64 = 1_000;
    produce(&broker, &topic, 0, FIRST);
    let dir = tempfile::tempdir().unwrap();
    let table = unique_name("shared");
    let first = write_bigtable_job(
        dir.path(),
        &broker,
        &topic,
        &table,
        "{name: info}",
        "{field: customer, family: info}, {field: amount, family: info}",
    );
    let total = FIRST + ROUNDS * ROUND;
    two_processes(
        &first,
        || produce_rounds(&broker, &topic, FIRST, ROUNDS, ROUND),
        || bigtable_offsets(&table, &topic).values().sum::<i64>() >= total,
    );
    assert_eq!(bigtable_offsets(&table, &topic), broker.end_offsets(&topic));
    let host = outflow_testkit::bigtable::emulator_host();
    let read = outflow_testkit::bigtable::python_read(&host, BT_PROJECT, BT_INSTANCE, &table);
    let rows = read["rows"].as_array().unwrap();
    assert_eq!(rows.len() as i64, total);
    for row in rows {
        let versions = row["cells"]["info"]["customer"].as_array().unwrap();
        assert_eq!(versions.len(), 1, "{}: {versions:?}", row["key"]);
    }
}

#[test]
fn a_job_into_bigtable_refuses_clock_timed_cells_and_aggregate_families_under_exactly_once() {
    let broker = Broker::from_env();
    let topic = unique_name("agg");
    broker.create_topic(&topic, PARTITIONS);
    produce(&broker, &topic, 0, 10);
    let dir = tempfile::tempdir().unwrap();
    let table = unique_name("totals");
    let job = write_bigtable_job(
        dir.path(),
        &broker,
        &topic,
        &table,
        "{name: info}, {name: stats, type: {aggregate: sum}}",
        "{field: customer, family: info}, {field: id, family: stats}",
    );
    let failed = crate::outflow()
        .args(["run", "--until-caught-up"])
        .arg(&job)
        .output()
        .unwrap();
    assert_eq!(
        failed.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&failed.stdout)
    );
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("aggregate family \"stats\""), "{stderr}");

    // Accepted when the job says at-least-once: the sum counts what it reads.
    let text = std::fs::read_to_string(&job)
        .unwrap()
        .replace("rows: 25000 }", "rows: 25000, delivery: at_least_once }");
    std::fs::write(&job, &text).unwrap();
    run_to_end(&job);

    // Cells timed by the clock are refused before anything is read.
    let clock = text
        .replace("    timestamp: { field: kafka_time }\n", "")
        .replace(", delivery: at_least_once", "");
    std::fs::write(&job, clock).unwrap();
    let failed = crate::outflow()
        .args(["run", "--until-caught-up"])
        .arg(&job)
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("timestamp"), "{stderr}");
}

#[test]
fn check_and_plan_of_a_streaming_job_say_what_the_run_would_write_without_reading_the_stream() {
    // No broker is reached: the brokers named here do not exist.
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker {
        brokers: "127.0.0.1:9".into(),
    };
    let columns = JobShape {
        source: "  json:\n    schema:\n      - { name: id, type: long, required: true }\n      - { name: customer, type: string }\n",
        ..JobShape::default()
    };
    let job = write_job(dir.path(), &broker, "orders", "stream.planned", columns);
    let checked = crate::outflow()
        .args(["check", "--json"])
        .arg(&job)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let doc: Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(doc["stream"]["table"], "stream.planned");
    let names: Vec<&str> = doc["stream"]["schema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["id", "customer", "key"]);

    let planned = crate::outflow()
        .args(["plan", "--json"])
        .arg(&job)
        .output()
        .unwrap();
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    let doc: Value = serde_json::from_slice(&planned.stdout).unwrap();
    assert_eq!(doc["destinations"][0]["destination"], "stream.planned");
    assert_eq!(doc["destinations"][0]["action"], "create", "{doc}");

    // Without the columns the schema is only known once records arrive: plan says so.
    let job = write_job(
        dir.path(),
        &broker,
        "orders",
        "stream.planned",
        JobShape::default(),
    );
    let planned = crate::outflow().arg("plan").arg(&job).output().unwrap();
    assert_eq!(planned.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&planned.stderr);
    assert!(stderr.contains("source.json.schema"), "{stderr}");
}

/// A streaming job from `topic` into BigQuery table `dataset.table` on the emulator, the
/// table created with the records' columns and their key.
fn write_bigquery_job(
    dir: &Path,
    broker: &Broker,
    topic: &str,
    env: &BigQueryEnv,
    dataset: &str,
) -> std::path::PathBuf {
    let shape = JobShape {
        source: "  json:\n    schema:\n      - { name: id, type: long, required: true }\n      - { name: customer, type: string }\n      - { name: amount, type: double }\n",
        ..JobShape::default()
    };
    let job = write_job(dir, broker, topic, "unused.table", shape);
    let text = std::fs::read_to_string(&job).unwrap();
    let (head, _) = text.split_once("sink:").unwrap();
    let text = format!(
        "{head}sink:\n  bigquery:\n    project: {project}\n    dataset: {dataset}\n    table: orders\n    \
         schema: [ {{name: id, type: INT64, mode: REQUIRED}}, {{name: customer, type: STRING}}, \
         {{name: amount, type: FLOAT64}}, {{name: key, type: STRING}} ]\n    \
         connection: {{ rest_endpoint: '{rest}', grpc_endpoint: '{grpc}', credentials: anonymous }}\n",
        project = env.project,
        rest = env.rest,
        grpc = env.grpc,
    );
    std::fs::write(&job, text).unwrap();
    job
}

/// The offsets job `lake-{topic}` holds in `dataset`'s `_outflow_offsets`, read with
/// Google's Python client: each partition's furthest among the loaded checkpoints.
fn bigquery_offsets(env: &BigQueryEnv, dataset: &str, topic: &str) -> BTreeMap<String, i64> {
    let ledger = env.query(&format!(
        "SELECT checkpoint, state, offsets FROM `{}.{dataset}._outflow_offsets` WHERE job = 'lake-{topic}'",
        env.project
    ));
    let ledger = ledger.as_array().unwrap();
    let loaded: Vec<&Value> = ledger.iter().filter(|r| r["state"] == "loaded").collect();
    let mut stored = BTreeMap::new();
    for row in ledger.iter().filter(|r| !r["offsets"].is_null()) {
        if !loaded.iter().any(|c| c["checkpoint"] == row["checkpoint"]) {
            continue;
        }
        let topics: BTreeMap<String, BTreeMap<String, i64>> =
            serde_json::from_str(row["offsets"].as_str().unwrap()).unwrap();
        for (partition, next) in &topics[topic] {
            let held = stored.entry(format!("{topic}/{partition}")).or_insert(0);
            *held = (*held).max(*next);
        }
    }
    stored
}

/// Two processes of one job into BigQuery, the second joining once the first has
/// committed: the rebalance checkpoints what the first holds, and the table has each
/// record once, with both processes' offsets.
#[test]
fn two_processes_of_one_job_into_bigquery_share_the_partitions_through_a_rebalance() {
    let broker = Broker::from_env();
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("stream");
    let topic = unique_name("bqshared");
    broker.create_topic(&topic, PARTITIONS);
    const FIRST: i64 = 10_000;
    const ROUNDS: i64 = 10;
    const ROUND: i64 = 2_000;
    produce(&broker, &topic, 0, FIRST);
    let dir = tempfile::tempdir().unwrap();
    let first = write_bigquery_job(dir.path(), &broker, &topic, &env, &dataset);
    let total = FIRST + ROUNDS * ROUND;
    two_processes(
        &first,
        || produce_rounds(&broker, &topic, FIRST, ROUNDS, ROUND),
        || bigquery_offsets(&env, &dataset, &topic).values().sum::<i64>() >= total,
    );
    assert_eq!(
        bigquery_offsets(&env, &dataset, &topic),
        broker.end_offsets(&topic)
    );
    assert_eq!(env.sorted_ids(&dataset, "orders"), (0..total).collect::<Vec<_>>());
}

#[test]
fn a_job_into_bigquery_killed_and_restarted_writes_every_record_once() {
    let broker = Broker::from_env();
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("stream");
    let topic = unique_name("rows");
    broker.create_topic(&topic, PARTITIONS);
    const RECORDS: i64 = 50_000;
    produce(&broker, &topic, 0, RECORDS);
    let dir = tempfile::tempdir().unwrap();
    let job = write_bigquery_job(dir.path(), &broker, &topic, &env, &dataset);
    let text = std::fs::read_to_string(&job)
        .unwrap()
        .replace("rows: 25000", "rows: 2000");
    std::fs::write(&job, text).unwrap();
    // The first checkpoint comes about 4 s after the start, and each takes about a second
    // on the emulator: the kills come later than for Bigtable.
    let killed = killed_at_random(&job, 5, 2500..6000);
    assert!(
        killed >= 2,
        "the job caught up after {killed} kills: too few to test restarts"
    );
    run_to_end(&job);

    // Google's client: every record is one row, with its key.
    assert_eq!(
        env.sorted_ids(&dataset, "orders"),
        (0..RECORDS).collect::<Vec<_>>()
    );
    let read = env.read_table(&dataset, "orders");
    let rows = read["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["key"] == format!("k{}", r["id"])));

    // The offsets of the committed checkpoints add up to the topic's end offsets.
    assert_eq!(
        bigquery_offsets(&env, &dataset, &topic),
        broker.end_offsets(&topic)
    );

    // The default stream's rows are visible as sent, so a restart would double some:
    // refused under exactly-once, before anything is read.
    let text = std::fs::read_to_string(&job).unwrap();
    std::fs::write(
        &job,
        text.replace(
            "table: orders\n",
            "table: orders\n    write_method: at_least_once\n",
        ),
    )
    .unwrap();
    let failed = crate::outflow()
        .args(["run", "--until-caught-up"])
        .arg(&job)
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("write_method"), "{stderr}");
}

/// Produces the shared generated change stream (`count` changes over `keys` keys) to
/// `topic` as Debezium events, each key's events in partition `id % 4` so that they keep
/// their order; returns `id -> value` as the events leave it.
fn produce_changes(broker: &Broker, topic: &str, keys: u64, count: u64) -> BTreeMap<i64, i64> {
    let producer = broker.producer();
    let (changes, state) = outflow_testkit::changes::change_stream(0xcdc, keys, count);
    let image = |id: u64, value: u64| format!(r#"{{"id": {id}, "value": {value}, "label": "v{value}"}}"#);
    for c in &changes {
        let before = c.before.map(|old| image(c.key, old));
        let after = (c.op != "d").then(|| image(c.key, c.value));
        let event = format!(
            r#"{{"before": {}, "after": {}, "op": "{}", "source": {{"db": "crm", "table": "accounts"}}, "ts_ms": {}}}"#,
            before.as_deref().unwrap_or("null"),
            after.as_deref().unwrap_or("null"),
            c.op,
            c.value,
        );
        producer.send(
            topic,
            (c.key % PARTITIONS as u64) as i32,
            &c.key.to_string(),
            &event,
        );
    }
    producer.flush();
    state.into_iter().map(|(k, v)| (k as i64, v as i64)).collect()
}

#[test]
fn debezium_changes_through_a_job_killed_and_restarted_leave_the_exact_state() {
    let broker = Broker::from_env();
    let topic = unique_name("accounts");
    broker.create_topic(&topic, PARTITIONS);
    let expected = produce_changes(&broker, &topic, 10_000, 100_000);

    let dir = tempfile::tempdir().unwrap();
    let catalog = TestCatalog::sql_in(dir.path());
    let table = "cdc.accounts";
    let image = "struct<id: long, value: long, label: string>";
    let shape = JobShape {
        source: &format!(
            "  json:\n    schema:\n      - {{ name: before, type: \"{image}\" }}\n      - {{ name: after, type: \"{image}\" }}\n      - {{ name: op, type: string }}\n"
        ),
        ..JobShape::default()
    };
    let job = write_job(dir.path(), &broker, &topic, table, shape);
    let mut text = std::fs::read_to_string(&job).unwrap();
    text.push_str("    changes: { key: [id], operation: { column: op } }\ntransforms:\n  - debezium: {}\n");
    std::fs::write(&job, text).unwrap();

    let killed = killed_at_random(&job, 5, 300..1500);
    assert!(killed >= 1, "the job caught up before the first kill");
    run_to_end(&job);

    let read = catalog.read(Reader::Java, table);
    let mut state = BTreeMap::new();
    for row in outflow_testkit::iceberg::rows(&read) {
        let (id, value) = (row["id"].as_i64().unwrap(), row["value"].as_i64().unwrap());
        assert_eq!(row["label"], format!("v{value}"), "{row}");
        // The record's Kafka key, carried beside the envelope.
        assert_eq!(row["key"], id.to_string(), "{row}");
        assert!(state.insert(id, value).is_none(), "key {id} read twice");
    }
    assert_eq!(state.len(), expected.len());
    assert_eq!(state, expected);
    let names: Vec<&str> = outflow_testkit::iceberg::fields(&read)
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["id", "value", "label", "key"]);
}

/// Debezium events through a job into Bigtable, killed at random and restarted. The
/// transform carries the record's Kafka time beside the row, which times the cells, as
/// exactly-once needs; a restart applies the changes after the stored offsets again, in
/// order, so the table ends as the changes leave it. Read back with Google's Python client:
/// each key the changes keep holds its last label as the newest cell; no deleted key is
/// left.
#[test]
fn debezium_changes_through_a_job_into_bigtable_killed_and_restarted_leave_the_exact_state() {
    let broker = Broker::from_env();
    let topic = unique_name("bt-changes");
    broker.create_topic(&topic, PARTITIONS);
    let expected: BTreeMap<String, String> = produce_changes(&broker, &topic, 10_000, 100_000)
        .into_iter()
        .map(|(id, value)| (id.to_string(), format!("v{value}")))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let table = unique_name("accounts");
    let job = write_bigtable_job(
        dir.path(),
        &broker,
        &topic,
        &table,
        "{name: info}",
        "{field: label, family: info}",
    );
    let image = "struct<id: long, value: long, label: string>";
    let text = std::fs::read_to_string(&job)
        .unwrap()
        .replace(
            "      - { name: id, type: long, required: true }\n      - { name: customer, type: string }\n      - { name: amount, type: double }\n",
            &format!(
                "      - {{ name: before, type: \"{image}\" }}\n      - {{ name: after, type: \"{image}\" }}\n      - {{ name: op, type: string }}\n"
            ),
        )
        + "    changes: { operation: { column: op } }\ntransforms:\n  - debezium: {}\n";
    std::fs::write(&job, text).unwrap();

    let killed = killed_at_random(&job, 5, 300..1500);
    assert!(killed >= 1, "the job caught up before the first kill");
    run_to_end(&job);

    let host = outflow_testkit::bigtable::emulator_host();
    let read = outflow_testkit::bigtable::python_read(&host, BT_PROJECT, BT_INSTANCE, &table);
    let mut state = BTreeMap::new();
    for row in read["rows"].as_array().unwrap() {
        let key = row["key"].as_str().unwrap().to_string();
        state.insert(key, newest_text(&row["cells"]["info"]["label"]));
    }
    assert_eq!(state.len(), expected.len());
    assert_eq!(state, expected);
    assert_eq!(bigtable_offsets(&table, &topic), broker.end_offsets(&topic));
}
