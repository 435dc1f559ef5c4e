#!/usr/bin/env python3
"""The Python peer of Outflow's BigQuery benchmark: Google's Storage Write client.

    bigquery_python.py setup  --project P --dataset D [--endpoint URL]
    bigquery_python.py write  --project P --dataset D --table T [--rows N] [--batch B] [--window W]
                              [--pregenerate]
    bigquery_python.py encode [--rows N] [--batch B]
    bigquery_python.py count  --project P --dataset D --table T [--endpoint URL]

`write` creates the table (same schema as Outflow's benchmark), then appends the rows to
its default stream as Arrow record batches with `google.cloud.bigquery_storage_v1`'s
AppendRowsStream, keeping at most W requests in flight (default 8). `encode` builds the
same AppendRowsRequests (pyarrow IPC serialization plus the request proto) from batches
made beforehand, and sends nothing. Both print one JSON line: rows/s and peak RSS (getrusage).

`write` generates the rows batch by batch inside the timed loop, with the same formulas as
crates/outflow-bigquery/examples/bigquery_bench.rs; with --pregenerate it makes them all
before the clock starts. Each also prints the process's CPU time (user and system, all
threads) over the timed part, `cpu_s`. Endpoints default to
$OUTFLOW_BIGQUERY_REST and $OUTFLOW_BIGQUERY_GRPC.
"""

import argparse
import collections
import decimal
import json
import os
import resource
import time

import grpc
import pyarrow as pa
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery
from google.cloud.bigquery_storage_v1 import types, writer
from google.cloud.bigquery_storage_v1.services.big_query_write import BigQueryWriteClient
from google.cloud.bigquery_storage_v1.services.big_query_write.transports import BigQueryWriteGrpcTransport

CATEGORIES = ["alpha", "beta", "gamma", "delta"]

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("k", pa.int64()),
        pa.field("x", pa.float64()),
        pa.field("y", pa.float64()),
        pa.field("flag", pa.bool_()),
        pa.field("name", pa.string()),
        pa.field("category", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("d", pa.date32()),
        pa.field("amount", pa.decimal128(38, 9)),
    ]
)

TABLE_SCHEMA = [
    bigquery.SchemaField("id", "INT64", mode="REQUIRED"),
    bigquery.SchemaField("k", "INT64"),
    bigquery.SchemaField("x", "FLOAT64"),
    bigquery.SchemaField("y", "FLOAT64"),
    bigquery.SchemaField("flag", "BOOL"),
    bigquery.SchemaField("name", "STRING"),
    bigquery.SchemaField("category", "STRING"),
    bigquery.SchemaField("ts", "TIMESTAMP"),
    bigquery.SchemaField("d", "DATE"),
    bigquery.SchemaField("amount", "NUMERIC"),
]


def generate(start: int, n: int) -> pa.RecordBatch:
    ids = pa.array(range(start, start + n), pa.int64())
    import pyarrow.compute as pc

    as_float = pc.cast(ids, pa.float64())
    names = pa.array([f"name-{i:010}" for i in range(start, start + n)], pa.string())
    categories = pa.array([CATEGORIES[i % 4] for i in range(start, start + n)], pa.string())
    ts = pc.cast(pc.add(pc.multiply(ids, 1_000), 1_700_000_000_000_000), pa.timestamp("us", tz="UTC"))
    days = pc.cast(pc.add(pc.remainder(ids, 365), 19_000), pa.int32()).cast(pa.date32())
    amounts = pa.array(
        [decimal.Decimal(i) + decimal.Decimal("0.25") for i in range(start, start + n)], pa.decimal128(38, 9)
    )
    return pa.RecordBatch.from_arrays(
        [
            ids,
            pc.remainder(ids, 1000),
            pc.multiply(as_float, 0.5),
            pc.divide(as_float, 3.0),
            pc.equal(pc.remainder(ids, 2), 0),
            names,
            categories,
            ts,
            days,
            amounts,
        ],
        schema=SCHEMA,
    )


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def rest_client(args) -> bigquery.Client:
    endpoint = args.endpoint or os.environ["OUTFLOW_BIGQUERY_REST"]
    return bigquery.Client(
        project=args.project, credentials=AnonymousCredentials(), client_options=ClientOptions(api_endpoint=endpoint)
    )


def request_for(batch: pa.RecordBatch) -> types.AppendRowsRequest:
    return types.AppendRowsRequest(
        arrow_rows=types.AppendRowsRequest.ArrowData(
            rows=types.ArrowRecordBatch(serialized_record_batch=batch.serialize().to_pybytes())
        )
    )


def report(mode: str, args, started: float, cpu_at_start: float, requests: int, size: int) -> None:
    seconds = time.monotonic() - started
    cpu = cpu_seconds() - cpu_at_start
    print(
        json.dumps(
            {
                "tool": "python",
                "mode": mode,
                "rows": args.rows,
                "batch": args.batch,
                "requests": requests,
                "bytes": size,
                "seconds": round(seconds, 3),
                "rows_per_s": round(args.rows / seconds),
                "peak_rss_kib": peak_rss_kib(),
                "pregenerated": mode == "encode" or args.pregenerate,
                "cpu_s": round(cpu, 2),
            }
        )
    )


def encode(args) -> None:
    # The batches are made first: only building the requests is timed.
    batches = [generate(start, min(args.batch, args.rows - start)) for start in range(0, args.rows, args.batch)]
    started, cpu_at_start = time.monotonic(), cpu_seconds()
    requests, size = 0, 0
    for batch in batches:
        request = request_for(batch)
        size += len(types.AppendRowsRequest.serialize(request))
        requests += 1
    report("encode", args, started, cpu_at_start, requests, size)


def write(args) -> None:
    client = rest_client(args)
    table = bigquery.Table(f"{args.project}.{args.dataset}.{args.table}", schema=TABLE_SCHEMA)
    client.create_table(table, exists_ok=True)
    grpc_endpoint = (args.grpc or os.environ["OUTFLOW_BIGQUERY_GRPC"]).removeprefix("http://")
    channel = grpc.insecure_channel(
        grpc_endpoint, options=[("grpc.max_send_message_length", 16 << 20), ("grpc.max_receive_message_length", 16 << 20)]
    )
    write_client = BigQueryWriteClient(transport=BigQueryWriteGrpcTransport(channel=channel))
    stream = f"projects/{args.project}/datasets/{args.dataset}/tables/{args.table}/streams/_default"
    template = types.AppendRowsRequest(
        write_stream=stream,
        arrow_rows=types.AppendRowsRequest.ArrowData(
            writer_schema=types.ArrowSchema(serialized_schema=SCHEMA.serialize().to_pybytes())
        ),
    )
    starts = range(0, args.rows, args.batch)
    made = [generate(start, min(args.batch, args.rows - start)) for start in starts] if args.pregenerate else None
    started, cpu_at_start = time.monotonic(), cpu_seconds()
    append = writer.AppendRowsStream(write_client, template)
    in_flight = collections.deque()
    requests, size = 0, 0
    for i, start in enumerate(starts):
        batch = made[i] if made else generate(start, min(args.batch, args.rows - start))
        request = request_for(batch)
        size += len(request.arrow_rows.rows.serialized_record_batch)
        in_flight.append(append.send(request))
        requests += 1
        while len(in_flight) >= args.window:
            in_flight.popleft().result()
    while in_flight:
        in_flight.popleft().result()
    append.close()
    report("write", args, started, cpu_at_start, requests, size)


def count(args) -> None:
    client = rest_client(args)
    rows = list(client.query(f"SELECT COUNT(*) AS n FROM `{args.project}.{args.dataset}.{args.table}`").result())
    print(json.dumps({"count": rows[0]["n"]}))


def setup(args) -> None:
    rest_client(args).create_dataset(f"{args.project}.{args.dataset}", exists_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("setup", "write", "encode", "count"):
        p = sub.add_parser(name)
        p.add_argument("--rows", type=int, default=1_000_000)
        p.add_argument("--batch", type=int, default=10_000)
        p.add_argument("--window", type=int, default=8)
        p.add_argument("--project", default=os.environ.get("OUTFLOW_BIGQUERY_PROJECT", "test-project"))
        p.add_argument("--dataset")
        p.add_argument("--table")
        p.add_argument("--endpoint")
        p.add_argument("--grpc")
        p.add_argument("--pregenerate", action="store_true")
    args = parser.parse_args()
    {"setup": setup, "write": write, "encode": encode, "count": count}[args.command](args)


if __name__ == "__main__":
    main()
