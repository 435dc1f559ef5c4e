"""Kafka into Iceberg: Outflow's streaming job against Apache Iceberg's Kafka Connect sink.

Run by scripts/bench/kafka_iceberg.sh (which builds Outflow, fetches the Connect worker and
plugin, and starts the broker and the REST catalog), with the readers' Python (PyIceberg).

Two phases, each for both writers on the same broker and catalog:
1. Throughput: RECORDS JSON records (about 200 bytes) produced to a 4-partition topic
   first; each writer then starts and reads them all. The time is from its start to the
   commit that makes the last record visible; memory is the process's peak RSS.
2. Latency: a writer runs with a 1 s commit interval while records are produced at
   RATE per second for SECONDS; each record carries the time it was produced, and its
   latency is the timestamp of the snapshot that first holds it minus that time.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pyiceberg.catalog import load_catalog
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[2]
KAFKA_LIBS = str(REPO / ".cache/kafka/libs/*")
CONNECT = REPO / ".cache/bench-connect"
BROKERS = os.environ["OUTFLOW_KAFKA_BROKERS"]
REST_URI = os.environ["OUTFLOW_ICEBERG_REST_URI"]
OUTFLOW = sys.argv[1]
RECORDS = int(os.environ.get("RECORDS", "1000000"))
RATE = int(os.environ.get("RATE", "5000"))
SECONDS = int(os.environ.get("SECONDS_LIVE", "20"))
PARTITIONS = 4
# More connector properties (`key=value,key=value`), to try the peer's own settings.
CONNECT_EXTRA = [p for p in os.environ.get("CONNECT_EXTRA", "").split(",") if p]
RUN = str(int(time.time()))


def log(message):
    print(message, file=sys.stderr, flush=True)


def kafka_tool(cls, *args):
    subprocess.run(
        ["java", "-Xmx256m", "-cp", KAFKA_LIBS, cls, *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def create_topic(name, partitions):
    kafka_tool(
        "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", BROKERS, "--create",
        "--topic", name, "--partitions", str(partitions), "--replication-factor", "1",
    )


def record(i, produced_ms):
    value = {
        "id": i,
        "produced_ms": produced_ms,
        "customer": f"customer-{i % 9973:05d}",
        "amount": round((i % 100000) / 7.0, 2),
        "status": ("new", "paid", "shipped", "returned")[i % 4],
        "note": "",
    }
    pad = 200 - len(json.dumps(value))
    value["note"] = "x" * max(pad, 0)
    return json.dumps(value)


class Producer:
    """Kafka's console producer, fed lines on stdin (records spread over the partitions)."""

    def __init__(self, topic):
        self.process = subprocess.Popen(
            [
                "java", "-Xmx512m", "-cp", KAFKA_LIBS, "org.apache.kafka.tools.ConsoleProducer",
                "--bootstrap-server", BROKERS, "--topic", topic,
                "--producer-property", "linger.ms=5",
                "--producer-property", "batch.size=262144",
                "--producer-property", "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1 << 20,
        )

    def send(self, line):
        self.process.stdin.write(line + "\n")

    def flush(self):
        self.process.stdin.flush()

    def close(self):
        self.process.stdin.close()
        if self.process.wait() != 0:
            raise SystemExit("the console producer failed")


def catalog():
    return load_catalog("rest", type="rest", uri=REST_URI)


def visible_records(table_name):
    """Records in the table's current snapshot, by its summary; 0 before the first."""
    try:
        table = catalog().load_table(table_name)
    except Exception:
        return 0
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.additional_properties.get("total-records", 0))


def wait_visible(table_name, count, process, limit_s=600, log_file=None):
    while True:
        if visible_records(table_name) >= count:
            return time.time()
        if process.poll() is not None and visible_records(table_name) < count:
            tail = ""
            if log_file is not None and Path(log_file).exists():
                tail = "\n" + "\n".join(Path(log_file).read_text().splitlines()[-40:])
            raise SystemExit(
                f"{table_name}: the writer exited with {process.returncode} before {count} records were visible{tail}"
            )
        if limit_s <= 0:
            raise SystemExit(f"{table_name}: fewer than {count} records visible in time")
        time.sleep(0.2)
        limit_s -= 0.2


def proc_stats(pid):
    """Peak RSS (MiB) and CPU seconds of a live process."""
    hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    return hwm, cpu


def outflow_job(dir, topic, table, interval="1s"):
    job = Path(dir) / f"{table}.yaml"
    job.write_text(
        f"id: bench-{table.replace('.', '-')}\n"
        "source:\n"
        f"  kafka: {{ brokers: \"{BROKERS}\", topics: [{topic}], group: g-{table.replace('.', '-')},\n"
        f"           properties: {{ group.instance.id: {table.replace('.', '-')}-1 }} }}\n"
        f"checkpoint: {{ interval: {interval}, rows: 2000000 }}\n"
        "sink:\n"
        f"  iceberg: {{ catalog: {{ type: rest, uri: \"{REST_URI}\" }}, table: {table} }}\n"
    )
    return job


def start_outflow(job, until_caught_up):
    args = [OUTFLOW, "run", str(job), "--quiet"]
    if until_caught_up:
        args.append("--until-caught-up")
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def start_connect(dir, topic, table, name):
    control = f"control-{name}"
    create_topic(control, 1)
    worker = Path(dir) / f"{name}-worker.properties"
    worker.write_text(
        f"bootstrap.servers={BROKERS}\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.json.JsonConverter\n"
        "value.converter.schemas.enable=false\n"
        f"offset.storage.file.filename={dir}/{name}.offsets\n"
        f"plugin.path={CONNECT}/plugins\n"
        "listeners=http://127.0.0.1:0\n"
        "consumer.auto.offset.reset=earliest\n"
        # As Iceberg's own integration tests of the sink set it: the sink task's consumer
        # polls return at this interval, and with Connect's default (60 s) the first
        # commits wait for it.
        "offset.flush.interval.ms=500\n"
    )
    connector = Path(dir) / f"{name}-connector.properties"
    connector.write_text(
        f"name={name}\n"
        "connector.class=org.apache.iceberg.connect.IcebergSinkConnector\n"
        "tasks.max=1\n"
        f"topics={topic}\n"
        f"iceberg.tables={table}\n"
        "iceberg.tables.auto-create-enabled=true\n"
        "iceberg.catalog.type=rest\n"
        f"iceberg.catalog.uri={REST_URI}\n"
        f"iceberg.control.topic={control}\n"
        "iceberg.control.commit.interval-ms=1000\n"
        + "".join(f"{p}\n" for p in CONNECT_EXTRA)
    )
    log4j = Path(dir) / "connect-log4j2.properties"
    log4j.write_text("rootLogger.level=WARN\n")
    return subprocess.Popen(
        [
            "java", "-Xmx1g", "-XX:+UseG1GC", "-Dlog4j.configuration=",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            f"-Dlog4j2.configurationFile=file:{log4j}",
            "-cp", f"{CONNECT}/worker/*", "org.apache.kafka.connect.cli.ConnectStandalone",
            str(worker), str(connector),
        ],
        stdout=open(Path(dir) / f"{name}.log", "w"),
        stderr=subprocess.STDOUT,
    )


def ensure_namespace():
    try:
        catalog().create_namespace("bench")
    except Exception:
        pass


def throughput(dir):
    topic = f"bench-tp-{RUN}"
    create_topic(topic, PARTITIONS)
    log(f"producing {RECORDS} records to {topic}")
    producer = Producer(topic)
    now = int(time.time() * 1000)
    for i in range(RECORDS):
        producer.send(record(i, now))
    producer.close()
    results = {}

    table = f"bench.outflow_tp_{RUN}"
    job = outflow_job(dir, topic, table)
    log("outflow: reading them all")
    started = time.time()
    timed = subprocess.run(
        ["/usr/bin/time", "-f", "%e %M %U %S", OUTFLOW, "run", str(job), "--until-caught-up", "--quiet"],
        capture_output=True, text=True,
    )
    if timed.returncode != 0:
        raise SystemExit(f"outflow failed: {timed.stderr}")
    wall, rss_kb, user, system = timed.stderr.strip().splitlines()[-1].split()
    seen = visible_records(table)
    assert seen == RECORDS, f"outflow's table holds {seen} records"
    results["outflow"] = {
        "seconds": float(wall),
        "records_per_s": RECORDS / float(wall),
        "peak_rss_mib": int(rss_kb) / 1024,
        "cpu_s": float(user) + float(system),
    }
    log(f"outflow: {results['outflow']}")

    table = f"bench.connect_tp_{RUN}"
    log("kafka connect: reading them all")
    started = time.time()
    worker = start_connect(dir, topic, table, f"tp-{RUN}")
    try:
        done = wait_visible(table, RECORDS, worker, log_file=Path(dir) / f"tp-{RUN}.log")
        rss, cpu = proc_stats(worker.pid)
    finally:
        worker.terminate()
        worker.wait()
    seen = visible_records(table)
    assert seen == RECORDS, f"connect's table holds {seen} records"
    results["connect"] = {
        "seconds": done - started,
        "records_per_s": RECORDS / (done - started),
        "peak_rss_mib": rss,
        "cpu_s": cpu,
    }
    log(f"kafka connect: {results['connect']}")
    return results


def latencies(table_name, since_ms):
    """Per record produced after `since_ms`: the first snapshot holding it minus its time."""
    table = catalog().load_table(table_name)
    stamps = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots}
    entries = table.inspect.entries().to_pylist()
    out = []
    for entry in entries:
        path = entry["data_file"]["file_path"]
        added = stamps[entry["snapshot_id"]]
        local = path.removeprefix("file://")
        produced = pq.read_table(local, columns=["produced_ms"]).column("produced_ms").to_pylist()
        out.extend(added - p for p in produced if p >= since_ms)
    out.sort()
    return out


def live(dir, writer):
    topic = f"bench-live-{writer}-{RUN}"
    create_topic(topic, PARTITIONS)
    table = f"bench.{writer}_live_{RUN}"
    producer = Producer(topic)
    # One warm-up record: the writer is ready once it is visible.
    producer.send(record(0, 0))
    producer.flush()
    if writer == "outflow":
        process = start_outflow(outflow_job(dir, topic, table), until_caught_up=False)
    else:
        process = start_connect(dir, topic, table, f"live-{RUN}")
    try:
        wait_visible(table, 1, process)
        log(f"{writer}: producing {RATE}/s for {SECONDS} s")
        since = int(time.time() * 1000)
        start = time.time()
        sent = 0
        while time.time() - start < SECONDS:
            target = int((time.time() - start) * RATE)
            while sent < target:
                sent += 1
                producer.send(record(sent, int(time.time() * 1000)))
            producer.flush()
            time.sleep(0.005)
        producer.close()
        wait_visible(table, sent + 1, process, limit_s=120)
    finally:
        process.terminate()
        process.wait()
    found = latencies(table, since)
    assert len(found) == sent, f"{writer}: {len(found)} of {sent} records found"
    pick = lambda q: found[min(len(found) - 1, int(q * len(found)))]
    result = {"records": sent, "median_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": found[-1]}
    log(f"{writer} latency: {result}")
    return result


def main():
    ensure_namespace()
    with tempfile.TemporaryDirectory() as dir:
        results = {"records": RECORDS, "throughput": throughput(dir)}
        results["latency"] = {w: live(dir, w) for w in ("outflow", "connect")}
    tp = results["throughput"]
    results["ratios"] = {
        "records_per_s": tp["outflow"]["records_per_s"] / tp["connect"]["records_per_s"],
        "memory": tp["outflow"]["peak_rss_mib"] / tp["connect"]["peak_rss_mib"],
    }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
