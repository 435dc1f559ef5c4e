#!/usr/bin/env python3
"""Independent reader for Outflow's BigQuery tests, on Google's Python client.

    bigquery_tool.py read --project P --dataset D --table T [--endpoint URL]
    bigquery_tool.py query --project P --sql SQL [--endpoint URL]
    bigquery_tool.py poll --project P --sql SQL --out FILE --stop-file F [--max-seconds N]
    bigquery_tool.py tables --project P --dataset D [--endpoint URL]
    bigquery_tool.py create-dataset --project P --dataset D [--endpoint URL]
    bigquery_tool.py delete-dataset --project P --dataset D [--endpoint URL]
    bigquery_tool.py uncommitted-stream --project P --dataset D --table T
    bigquery_tool.py primary-key --project P --dataset D --table T [--endpoint URL]
    bigquery_tool.py decode-rows --file F
    bigquery_tool.py serve   (read, query, tables and create-dataset, one request a line: the
                              arguments separated by tabs; one answer a line,
                              {"ok": true, "doc": ...} or {"ok": false, "error": ...})

`read` prints one line of compact JSON with sorted keys:

    {"schema": [{"name": N, "type": T, "mode": M, "fields": [...]}],
     "num_rows": N,
     "rows": [{COLUMN: VALUE, ...}, ...]}

- "schema" is tables.get's schema. Types use the standard SQL names (INT64, FLOAT64, BOOL,
  RECORD, ...: the API's legacy INTEGER, FLOAT, BOOLEAN and STRUCT are renamed); a missing
  mode reads as NULLABLE; "fields" is [] for a column that is not a RECORD.
- "num_rows" is tables.get's numRows; "rows" come from tabledata.list (list_rows), every
  row, sorted by their own canonical JSON text so that write order does not matter.
  local-bigquery's numRows is DuckDB's size estimate: after DELETE, TRUNCATE TABLE or a
  WRITE_TRUNCATE copy it can be larger than the real count, so count len(rows) instead.
- VALUE: INT64 as an integer; FLOAT64 as a number ("NaN", "Infinity", "-Infinity" as
  strings); NUMERIC and BIGNUMERIC as plain decimal strings (never exponent notation);
  BOOL; STRING; BYTES as lowercase hex; DATE "YYYY-MM-DD"; TIME "HH:MM:SS.ffffff";
  DATETIME "YYYY-MM-DDTHH:MM:SS.ffffff"; TIMESTAMP in UTC as "YYYY-MM-DDTHH:MM:SS.ffffffZ";
  JSON as its JSON text, re-serialized compactly with sorted keys; RECORD as an object;
  REPEATED as a list; NULL as null.

`query` runs one standard SQL query (jobs.query) and prints {"rows": [{COLUMN: VALUE}, ...]}
with values converted as above, rows in the order the query returns them.

`tables` prints {"tables": [TABLE_ID, ...]}, the dataset's tables (tables.list), sorted.

`poll` runs the query again and again until the stop file exists (or --max-seconds pass,
default 120), appending one line per run to --out: {"t": SECONDS, "rows": [...]} or
{"t": SECONDS, "error": MESSAGE}. Tests use it to watch a table while Outflow writes.

`primary-key` prints {"primary_key": [COLUMN, ...]}, the table's primary key as tables.get
returns it ([] when it has none).

`decode-rows` decodes protobuf rows as the Storage Write API would, with Google's protobuf
runtime: F holds {"descriptor": HEX, "rows": [HEX, ...]} (a serialized
DescriptorProto and serialized messages of that type); it prints {"rows": [{FIELD: VALUE}]},
each message as json_format.MessageToDict renders it with the fields' own names (int64 as
a decimal string, bytes as base64, unset fields absent).

The endpoint defaults to $OUTFLOW_BIGQUERY_REST (see scripts/servers/bigquery.sh); the
credentials are anonymous, so this only talks to an emulator.
"""

import argparse
import base64
import datetime
import decimal
import json
import math
import os
import sys

from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery

STANDARD = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL", "STRUCT": "RECORD"}


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def type_name(field) -> str:
    name = (field.field_type or "STRING").upper()
    return STANDARD.get(name, name)


def describe(fields) -> list:
    return [
        {
            "name": f.name,
            "type": type_name(f),
            "mode": (f.mode or "NULLABLE").upper(),
            "fields": describe(f.fields or ()),
        }
        for f in fields
    ]


def scalar(kind: str, value):
    if value is None:
        return None
    if kind == "FLOAT64":
        value = float(value)
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if kind in ("NUMERIC", "BIGNUMERIC"):
        return format(decimal.Decimal(value), "f")
    if kind == "INT64":
        return int(value)
    if kind == "BYTES":
        if isinstance(value, str):  # defensive: base64 text
            value = base64.b64decode(value)
        return bytes(value).hex()
    if kind == "DATE":
        return value.isoformat()
    if kind == "TIME":
        return value.isoformat(timespec="microseconds")
    if kind == "DATETIME":
        return value.isoformat(timespec="microseconds")
    if kind == "TIMESTAMP":
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        utc = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return utc.isoformat(timespec="microseconds") + "Z"
    if kind == "JSON":
        # The client parses JSON columns; serialize back to canonical text.
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return value
        return canonical(value)
    return value


def convert(field, value):
    kind = type_name(field)
    if (field.mode or "").upper() == "REPEATED":
        return [convert_one(field, kind, item) for item in (value or [])]
    return convert_one(field, kind, value)


def convert_one(field, kind, value):
    if value is None:
        return None
    if kind == "RECORD":
        return {sub.name: convert(sub, value.get(sub.name)) for sub in field.fields}
    return scalar(kind, value)


def relaxed(fields) -> list:
    """The schema with every non-repeated field NULLABLE, for parsing rows only.

    The Python client does not null-check REQUIRED cells and crashes on a null in one (the
    emulator does not enforce REQUIRED inside a RECORD); parsing with relaxed modes prints
    such a null instead, so the test that looks at it can fail with a clear diff.
    """
    return [
        bigquery.SchemaField(
            f.name,
            f.field_type,
            mode="REPEATED" if (f.mode or "").upper() == "REPEATED" else "NULLABLE",
            fields=relaxed(f.fields or ()),
        )
        for f in fields
    ]


def client_for(args) -> bigquery.Client:
    endpoint = args.endpoint or os.environ.get("OUTFLOW_BIGQUERY_REST")
    if not endpoint:
        sys.exit("bigquery_tool.py: pass --endpoint or set OUTFLOW_BIGQUERY_REST")
    return bigquery.Client(
        project=args.project,
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=endpoint),
    )


def read(args) -> dict:
    client = client_for(args)
    table = client.get_table(f"{args.project}.{args.dataset}.{args.table}")
    rows = [
        {field.name: convert(field, row.get(field.name)) for field in table.schema}
        for row in client.list_rows(table, selected_fields=relaxed(table.schema))
    ]
    rows.sort(key=canonical)
    return {
        "schema": describe(table.schema),
        "num_rows": int(table.num_rows or 0),
        "rows": rows,
    }


def query(client: bigquery.Client, sql: str) -> list:
    result = client.query(sql).result()
    return [{f.name: convert(f, row.get(f.name)) for f in result.schema} for row in result]


def poll(args) -> None:
    import time

    client = client_for(args)
    started = time.monotonic()
    with open(args.out, "a", encoding="utf-8") as out:
        while not os.path.exists(args.stop_file) and time.monotonic() - started < args.max_seconds:
            t = round(time.monotonic() - started, 3)
            try:
                line = {"t": t, "rows": query(client, args.sql)}
            except Exception as error:  # a table being replaced may answer with an error
                line = {"t": t, "error": str(error)}
            out.write(canonical(line) + "\n")
            out.flush()


def uncommitted_stream(args) -> dict:
    """Creates a PENDING write stream on the table over the Storage Write API (at
    $OUTFLOW_BIGQUERY_GRPC) and finalizes it without committing: what a run killed before
    its commit leaves behind."""
    import grpc
    from google.cloud.bigquery_storage_v1 import BigQueryWriteClient, types
    from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
        BigQueryWriteGrpcTransport,
    )

    target = os.environ["OUTFLOW_BIGQUERY_GRPC"].removeprefix("http://")
    client = BigQueryWriteClient(transport=BigQueryWriteGrpcTransport(channel=grpc.insecure_channel(target)))
    parent = f"projects/{args.project}/datasets/{args.dataset}/tables/{args.table}"
    stream = client.create_write_stream(
        parent=parent, write_stream=types.WriteStream(type_=types.WriteStream.Type.PENDING)
    )
    client.finalize_write_stream(name=stream.name)
    return {"stream": stream.name}


def primary_key(args) -> dict:
    table = client_for(args).get_table(f"{args.project}.{args.dataset}.{args.table}")
    constraints = table.table_constraints
    key = constraints.primary_key if constraints else None
    return {"primary_key": list(key.columns) if key else []}


def decode_rows(args) -> dict:
    from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

    with open(args.file) as f:
        given = json.load(f)
    descriptor = descriptor_pb2.DescriptorProto.FromString(bytes.fromhex(given["descriptor"]))
    # In a file of its own, as the service does with a writer schema.
    file = descriptor_pb2.FileDescriptorProto(name="decoded.proto", package="decoded")
    file.message_type.add().CopyFrom(descriptor)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    message = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"decoded.{descriptor.name}"))
    return {
        "rows": [
            json_format.MessageToDict(
                message.FromString(bytes.fromhex(row)), preserving_proto_field_name=True
            )
            for row in given["rows"]
        ]
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("read", help="print a table's schema, numRows and rows as JSON")
    r.add_argument("--project", required=True)
    r.add_argument("--dataset", required=True)
    r.add_argument("--table", required=True)
    r.add_argument("--endpoint", help="REST endpoint (default: $OUTFLOW_BIGQUERY_REST)")
    q = sub.add_parser("query", help="run one query and print its rows as JSON")
    q.add_argument("--project", required=True)
    q.add_argument("--sql", required=True)
    q.add_argument("--endpoint", help="REST endpoint (default: $OUTFLOW_BIGQUERY_REST)")
    w = sub.add_parser("poll", help="run a query repeatedly, appending its rows to a file")
    w.add_argument("--project", required=True)
    w.add_argument("--sql", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--stop-file", required=True)
    w.add_argument("--max-seconds", type=float, default=120.0)
    w.add_argument("--endpoint", help="REST endpoint (default: $OUTFLOW_BIGQUERY_REST)")
    t = sub.add_parser("tables", help="list a dataset's tables as JSON")
    t.add_argument("--project", required=True)
    t.add_argument("--dataset", required=True)
    t.add_argument("--endpoint", help="REST endpoint (default: $OUTFLOW_BIGQUERY_REST)")
    d = sub.add_parser("create-dataset", help="create a dataset (sinks create tables only)")
    d.add_argument("--project", required=True)
    d.add_argument("--dataset", required=True)
    d.add_argument("--endpoint", help="REST endpoint (default: $OUTFLOW_BIGQUERY_REST)")
    x = sub.add_parser("delete-dataset", help="delete a dataset and its tables")
    x.add_argument("--project", required=True)
    x.add_argument("--dataset", required=True)
    x.add_argument("--endpoint", help="REST endpoint (default: $OUTFLOW_BIGQUERY_REST)")
    u = sub.add_parser("uncommitted-stream", help="a finalized, uncommitted pending stream")
    u.add_argument("--project", required=True)
    u.add_argument("--dataset", required=True)
    u.add_argument("--table", required=True)
    u.add_argument("--endpoint", help="ignored (the stream is made over gRPC)")
    k = sub.add_parser("primary-key", help="print a table's primary key columns as JSON")
    k.add_argument("--project", required=True)
    k.add_argument("--dataset", required=True)
    k.add_argument("--table", required=True)
    k.add_argument("--endpoint", help="REST endpoint (default: $OUTFLOW_BIGQUERY_REST)")
    dr = sub.add_parser("decode-rows", help="decode protobuf rows with Google's protobuf runtime")
    dr.add_argument("--file", required=True)
    dr.add_argument("--endpoint", help="ignored (nothing is asked of the service)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "read":
        print(canonical(read(args)))
    elif args.command == "query":
        print(canonical({"rows": query(client_for(args), args.sql)}))
    elif args.command == "tables":
        tables = client_for(args).list_tables(f"{args.project}.{args.dataset}")
        print(canonical({"tables": sorted(t.table_id for t in tables)}))
    elif args.command == "poll":
        poll(args)
    elif args.command == "primary-key":
        print(canonical(primary_key(args)))
    elif args.command == "decode-rows":
        print(canonical(decode_rows(args)))
    elif args.command == "uncommitted-stream":
        print(canonical(uncommitted_stream(args)))
    elif args.command == "create-dataset":
        client_for(args).create_dataset(args.dataset)
        print(canonical({"dataset": args.dataset}))
    elif args.command == "delete-dataset":
        client_for(args).delete_dataset(args.dataset, delete_contents=True, not_found_ok=True)
        print(canonical({"dataset": args.dataset}))


def serve() -> None:
    """Runs subcommands read from stdin (served.py), so a test binary starts Python once.

    When stdin ends (the test binary is done), the datasets it created and did not delete
    are deleted with their tables: the emulator's every lookup scans its whole catalog, so
    BigQuery calls of the binaries after it would take a quarter longer with them left in
    place.
    """
    import contextlib

    import served

    created = {}

    def run(argv):
        main(argv)
        if argv[:1] == ["create-dataset"]:
            created[build_parser().parse_args(argv).dataset] = argv
        elif argv[:1] == ["delete-dataset"]:
            created.pop(build_parser().parse_args(argv).dataset, None)

    served.serve(run)
    for argv in created.values():
        args = build_parser().parse_args(argv)
        with contextlib.suppress(Exception):  # the emulator may be gone already
            client_for(args).delete_dataset(args.dataset, delete_contents=True, not_found_ok=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        main()
