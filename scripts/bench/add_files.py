#!/usr/bin/env python3
"""The Python side of scripts/bench/add_files.sh: test files, and PyIceberg's add_files.

  add_files.py gen-small DIR N          N files of 1,000 rows (about 30 KB each)
  add_files.py gen-large DIR N MIB      N copies of one file of MIB MiB in 8 row groups
  add_files.py pyiceberg CATALOG_DIR TABLE LIST
                                        create TABLE from the first file's schema, then time
                                        table.add_files() on every path in LIST
  add_files.py gen-small-s3 URL N       the small files, uploaded under URL (s3://bucket/prefix)
  add_files.py pyiceberg-s3 CATALOG_DIR WAREHOUSE TABLE URL
                                        the same as pyiceberg, for every object under URL, the
                                        table in the S3 warehouse WAREHOUSE

The S3 commands reach the store the test script starts, from OUTFLOW_S3_* (source
.cache/run/seaweedfs.env).

Each command prints one JSON line.
"""

import datetime as dt
import decimal
import json
import os
import shutil
import sys
import time


def small_table(f: int):
    """Small file number f: 1,000 rows of id, ts, name, amount, flag, tags."""
    import pyarrow as pa

    rows = 1000
    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table(
        {
            "id": pa.array(range(f * rows, (f + 1) * rows), pa.int64()),
            "ts": pa.array([start + dt.timedelta(seconds=f * rows + i) for i in range(0, rows)], pa.timestamp("us", tz="UTC")),
            "name": pa.array([f"name-{i:05d}" for i in range(rows)]),
            "amount": pa.array([decimal.Decimal(i) / 100 for i in range(rows)], pa.decimal128(12, 2)),
            "flag": pa.array([i % 3 == 0 for i in range(rows)]),
            "tags": pa.array([["a", "b"][: i % 3] for i in range(rows)], pa.list_(pa.string())),
        }
    )


def s3_properties() -> dict:
    env = os.environ
    return {
        "s3.endpoint": env["OUTFLOW_S3_ENDPOINT"],
        "s3.access-key-id": env["OUTFLOW_S3_ACCESS_KEY_ID"],
        "s3.secret-access-key": env["OUTFLOW_S3_SECRET_ACCESS_KEY"],
        "s3.region": env["OUTFLOW_S3_REGION"],
        "s3.path-style-access": "true",
    }


def s3_filesystem():
    from pyarrow import fs

    p = s3_properties()
    scheme, host = p["s3.endpoint"].split("://", 1)
    return fs.S3FileSystem(
        access_key=p["s3.access-key-id"],
        secret_key=p["s3.secret-access-key"],
        region=p["s3.region"],
        endpoint_override=host,
        scheme=scheme,
    )


def gen_small_s3(url: str, n: int) -> None:
    import io
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    s3 = s3_filesystem()
    root = url.removeprefix("s3://").rstrip("/")
    began = time.monotonic()

    def upload(f: int) -> None:
        buf = io.BytesIO()
        pq.write_table(small_table(f), buf)
        with s3.open_output_stream(f"{root}/part-{f:06d}.parquet") as out:
            out.write(buf.getvalue())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(upload, range(n)))
    print(json.dumps({"generated": n, "seconds": round(time.monotonic() - began, 3)}))


def pyiceberg_s3(catalog_dir: str, warehouse: str, table: str, url: str) -> None:
    from pyarrow import fs as pafs
    from pyiceberg.catalog.sql import SqlCatalog

    s3 = s3_filesystem()
    root = url.removeprefix("s3://").rstrip("/")
    # The listing is not timed: PyIceberg's add_files takes the paths, not a prefix.
    infos = s3.get_file_info(pafs.FileSelector(root, recursive=True))
    files = sorted(f"s3://{i.path}" for i in infos if i.path.endswith(".parquet"))
    os.makedirs(catalog_dir, exist_ok=True)
    catalog = SqlCatalog("outflow", uri=f"sqlite:///{catalog_dir}/catalog.db", warehouse=warehouse, **s3_properties())
    namespace, name = table.split(".")
    catalog.create_namespace_if_not_exists(namespace)
    created = catalog.create_table((namespace, name), schema=small_table(0).schema)
    began = time.monotonic()
    created.add_files(file_paths=files)
    seconds = time.monotonic() - began
    records = catalog.load_table((namespace, name)).current_snapshot().summary["total-records"]
    print(json.dumps({"mode": "pyiceberg", "files": len(files), "records": int(records), "seconds": round(seconds, 3)}))


def gen_small(directory: str, n: int) -> None:
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    began = time.monotonic()
    for f in range(n):
        pq.write_table(small_table(f), os.path.join(directory, f"part-{f:06d}.parquet"))
    print(json.dumps({"generated": n, "seconds": round(time.monotonic() - began, 3)}))


def gen_large(directory: str, n: int, mib: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    payload = 1024
    rows = mib * 1024 * 1024 // (payload + 16)
    began = time.monotonic()
    first = os.path.join(directory, "large-000000.parquet")
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "ts": pa.array(range(rows), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            # Random bytes do not compress: the file is about MIB MiB.
            "payload": pa.array([os.urandom(payload) for _ in range(rows)], pa.binary()),
        }
    )
    pq.write_table(table, first, row_group_size=max(1, rows // 8), compression="none")
    for f in range(1, n):
        shutil.copyfile(first, os.path.join(directory, f"large-{f:06d}.parquet"))
    size = os.path.getsize(first)
    print(json.dumps({"generated": n, "bytes_each": size, "seconds": round(time.monotonic() - began, 3)}))


def pyiceberg(catalog_dir: str, table: str, listing: str) -> None:
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog

    with open(listing) as f:
        files = [line.strip() for line in f if line.strip()]
    os.makedirs(os.path.join(catalog_dir, "warehouse"), exist_ok=True)
    catalog = SqlCatalog(
        "outflow",
        uri=f"sqlite:///{catalog_dir}/catalog.db",
        warehouse=f"file://{catalog_dir}/warehouse",
    )
    namespace, name = table.split(".")
    catalog.create_namespace_if_not_exists(namespace)
    created = catalog.create_table((namespace, name), schema=pq.read_schema(files[0]))
    began = time.monotonic()
    created.add_files(file_paths=files)
    seconds = time.monotonic() - began
    records = catalog.load_table((namespace, name)).current_snapshot().summary["total-records"]
    print(json.dumps({"mode": "pyiceberg", "files": len(files), "records": int(records), "seconds": round(seconds, 3)}))


def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    if command == "gen-small":
        gen_small(args[0], int(args[1]))
    elif command == "gen-large":
        gen_large(args[0], int(args[1]), int(args[2]))
    elif command == "pyiceberg":
        pyiceberg(args[0], args[1], args[2])
    elif command == "gen-small-s3":
        gen_small_s3(args[0], int(args[1]))
    elif command == "pyiceberg-s3":
        pyiceberg_s3(args[0], args[1], args[2], args[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
