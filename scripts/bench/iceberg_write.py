#!/usr/bin/env python3
"""Iceberg write benchmark: the same rows through Outflow, PyIceberg and bare parquet-rs
(one writer, and one writer a core).

Generates a source Parquet file of N rows x 10 columns of mixed types (once, cached, in a
process of its own), then runs each peer as its own process on it, measuring wall time of the write and the peak
resident memory of the process (ru_maxrss from wait4). Prints a table and one JSON line per
peer; scripts/bench/iceberg_write.sh wraps it.
"""

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROWS = int(os.environ.get("ROWS", "5000000"))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(REPO, ".cache", "bench")


def source_file() -> str:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(CACHE, f"events-{ROWS}.parquet")
    if os.path.exists(path):
        return path
    os.makedirs(CACHE, exist_ok=True)
    rng = np.random.default_rng(42)
    chunks = []
    step = 500_000
    for start in range(0, ROWS, step):
        n = min(step, ROWS - start)
        ids = np.arange(start, start + n, dtype=np.int64)
        chunks.append(pa.table({
            "id": pa.array(ids),
            "user_id": pa.array(rng.integers(0, 100_000, n, dtype=np.int64)),
            "amount": pa.array(rng.integers(0, 10_000_000, n), type=pa.int64()).cast(pa.decimal128(21, 2)).cast(pa.decimal128(12, 2)),
            "price": pa.array(rng.random(n) * 1000),
            "qty": pa.array(rng.integers(1, 50, n, dtype=np.int32)),
            "name": pa.array([f"customer-{i % 977:05d}-{i:09d}" for i in ids]),
            "category": pa.array(rng.choice(["books", "games", "garden", "music", "toys"], n)),
            "ts": pa.array(1_700_000_000_000_000 + ids * 1_000_003, type=pa.timestamp("us", tz="UTC")),
            "day": pa.array((19_000 + ids // 100_000).astype(np.int32), type=pa.date32()),
            "flag": pa.array(ids % 3 == 0),
        }))
    table = pa.concat_tables(chunks)
    pq.write_table(table, path + ".tmp", compression="zstd", row_group_size=1_000_000)
    os.rename(path + ".tmp", path)
    return path


def measure(argv, env=None):
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    if status != 0:
        sys.exit(f"{argv[0]} failed with status {status}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["wall_seconds"] = round(wall, 3)
    result["peak_rss_mib"] = round(usage.ru_maxrss / 1024, 1)
    return result


PYICEBERG_PEER = r"""
import json, os, sys, time
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
source, out = sys.argv[1], sys.argv[2]
warehouse = os.environ.get("OUTFLOW_BENCH_WAREHOUSE")
if warehouse:
    env = os.environ
    catalog = SqlCatalog("bench", uri=f"sqlite:///{out}/catalog.db", warehouse=warehouse, **{
        "s3.endpoint": env["OUTFLOW_S3_ENDPOINT"], "s3.access-key-id": env["OUTFLOW_S3_ACCESS_KEY_ID"],
        "s3.secret-access-key": env["OUTFLOW_S3_SECRET_ACCESS_KEY"], "s3.region": env["OUTFLOW_S3_REGION"],
        "s3.path-style-access": "true"})
else:
    catalog = SqlCatalog("bench", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}/warehouse")
started = time.monotonic()
table = pq.read_table(source)
catalog.create_namespace("bench")
tbl = catalog.create_table("bench.events", schema=table.schema, properties={"write.parquet.compression-codec": "zstd"})
tbl.append(table)
seconds = time.monotonic() - started
print(json.dumps({"peer": "pyiceberg", "rows": table.num_rows, "seconds": round(seconds, 3)}))
"""


def main():
    if sys.argv[1:] == ["--generate"]:
        print(source_file())
        return
    bench_bin, python = sys.argv[1], sys.argv[2]
    # The source is made in a process of its own: a child started from a process that
    # holds it would report that process's memory as its own peak (Linux carries the
    # pre-exec high-water mark into ru_maxrss), so this one stays small.
    source = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--generate"], check=True, stdout=subprocess.PIPE
    ).stdout.decode().strip()
    results = []
    # With OUTFLOW_BENCH_WAREHOUSE (an S3 URL), the two Iceberg writers each write to a
    # warehouse of their own under it; the bare writer stays on the local disk.
    store = os.environ.get("OUTFLOW_BENCH_WAREHOUSE")
    for peer in ["outflow", "parquet-rs", "parquet-rs-cores", "pyiceberg"]:
        out = tempfile.mkdtemp(prefix=f"outflow-bench-{peer}-")
        env = dict(os.environ)
        if store:
            env["OUTFLOW_BENCH_WAREHOUSE"] = f"{store}/{peer}"
        try:
            if peer == "pyiceberg":
                results.append(measure([python, "-c", PYICEBERG_PEER, source, out], env))
            else:
                results.append(measure([bench_bin, peer, source, out, "--bench"], env))
        finally:
            shutil.rmtree(out, ignore_errors=True)
    by = {r["peer"]: r for r in results}
    where = f"into S3 ({store})" if store else "on the local disk"
    print(f"\nIceberg write {where}, {ROWS:,} rows x 10 columns (zstd), source {source}")
    print(f"{'peer':<18}{'seconds':>10}{'rows/s':>14}{'peak RSS MiB':>15}")
    for r in results:
        print(f"{r['peer']:<18}{r['seconds']:>10.2f}{r['rows'] / r['seconds']:>14,.0f}{r['peak_rss_mib']:>15.1f}")
    o = by["outflow"]["seconds"]
    print(f"\nOutflow vs PyIceberg: {by['pyiceberg']['seconds'] / o:.2f}x faster")
    print(f"Outflow vs bare parquet-rs: {o / by['parquet-rs']['seconds']:.2f}x the time")
    cores = os.cpu_count()
    print(f"Outflow vs {cores} bare parquet-rs writers (one a core): {o / by['parquet-rs-cores']['seconds']:.2f}x the time")
    for r in results:
        print(json.dumps(r))
    for r in results:
        r["rows_per_s"] = round(r["rows"] / r["seconds"])
    if store:
        return  # the chart is the local one
    os.makedirs(os.path.join(REPO, "docs", "bench"), exist_ok=True)
    with open(os.path.join(REPO, "docs", "bench", "iceberg_write.json"), "w") as f:
        json.dump({"title": f"Iceberg write, {ROWS:,} rows x 10 columns (zstd)", "unit": "rows/s",
                   "peers": results}, f, indent=1)
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "bench", "charts.py")], check=True)


if __name__ == "__main__":
    main()
