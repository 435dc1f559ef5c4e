#!/usr/bin/env python3
"""Independent Iceberg reader and helper for Outflow's integration tests (PyIceberg).

Subcommands (all take --catalog-type sql|rest, --catalog-name, --uri, --warehouse, --table):

  read               print one canonical JSON document of the table on stdout
  create-and-append  create the table from a Parquet file's Arrow schema (if missing) and
                     append the file's rows
  add-files          register existing Parquet files with PyIceberg's add_files
  tag                tag the table's oldest snapshot (--name, optionally --max-ref-age-ms), with
                     PyIceberg's manage_snapshots
  serve              answer many of the above in one process: each stdin line is one
                     subcommand's arguments separated by tabs, each answer one stdout line,
                     {"ok": true, "doc": DOCUMENT} or {"ok": false, "error": MESSAGE}

The canonical JSON is byte-identical to what the Java reader (tests/readers/java) prints for
the same table: compact, keys sorted, ASCII only, rows read with the table's CURRENT schema and
sorted by their own canonical text. tests/readers/python/README.md describes the format.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import math
import os
import sys
import uuid
from typing import Any

# PyIceberg warns on stderr in some paths (e.g. a v0 SQL catalog layout); keep stdout clean.
import warnings

warnings.simplefilter("ignore")


def fail(message: str, code: int = 1) -> None:
    print(f"iceberg_tool: {message}", file=sys.stderr)
    sys.exit(code)


# --------------------------------------------------------------------------- catalog


def sqlalchemy_sqlite_uri(uri: str) -> str:
    """Accept sqlite:////abs/catalog.db as is; turn jdbc:sqlite:/abs/catalog.db into it."""
    if uri.startswith("jdbc:sqlite:"):
        path = uri[len("jdbc:sqlite:") :]
        return "sqlite:///" + path
    return uri


def pyiceberg_storage(props: dict[str, str]) -> dict[str, str]:
    """The storage properties in iceberg-rust's names, with PyIceberg's added.

    GCS: PyIceberg names the endpoint gcs.service.host, and has no unsigned mode: for
    gcs.no-auth (a local server that checks no credentials) it gets a placeholder token.
    """
    out = dict(props)
    if "gcs.service.path" in out:
        out.setdefault("gcs.service.host", out["gcs.service.path"])
    if "gcs.no-auth" in out:
        out.setdefault("gcs.oauth2.token", "unchecked")
        out.setdefault("gcs.oauth2.token-expires-at", str(4102444800000))  # 2100-01-01
    return out


def open_catalog(args: argparse.Namespace, *, writable: bool):
    extra = pyiceberg_storage(parse_kv(args.catalog_property, "--catalog-property"))
    if args.catalog_type == "sql":
        from pyiceberg.catalog.sql import SqlCatalog

        if not args.warehouse:
            fail("--warehouse is required for --catalog-type sql", 2)
        uri = sqlalchemy_sqlite_uri(args.uri)
        if not writable and uri.startswith("sqlite:///") and "?" not in uri and ":memory:" not in uri:
            # SQLite would create an empty file on connect; a reader must not.
            path = uri[len("sqlite:///") :]
            if not os.path.exists(path):
                fail(f"catalog file {path} does not exist")
        props = {
            "uri": uri,
            "warehouse": args.warehouse,
            # A reader must not create the catalog tables; writers may.
            "init_catalog_tables": "true" if writable else "false",
        }
        props.update(extra)
        return SqlCatalog(args.catalog_name, **props)
    if args.catalog_type == "rest":
        from pyiceberg.catalog.rest import RestCatalog

        props = {"uri": args.uri}
        if args.warehouse:
            props["warehouse"] = args.warehouse
        props.update(extra)
        return RestCatalog(args.catalog_name, **props)
    fail(f"--catalog-type must be sql or rest, not {args.catalog_type!r}", 2)
    return None


def parse_kv(items: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"{flag} wants KEY=VALUE, got {item!r}", 2)
        out[key] = value
    return out


def split_identifier(name: str) -> tuple[str, ...]:
    parts = tuple(name.split("."))
    if len(parts) < 2 or any(not p for p in parts):
        fail(f"--table must be NAMESPACE.NAME, got {name!r}", 2)
    return parts


# --------------------------------------------------------------------------- canonical JSON


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def type_json(t) -> Any:
    from pyiceberg import types as T

    if isinstance(t, T.StructType):
        return {"type": "struct", "fields": [field_json(f) for f in t.fields]}
    if isinstance(t, T.ListType):
        return {
            "type": "list",
            "element-id": t.element_id,
            "element": type_json(t.element_type),
            "element-required": bool(t.element_required),
        }
    if isinstance(t, T.MapType):
        return {
            "type": "map",
            "key-id": t.key_id,
            "key": type_json(t.key_type),
            "value-id": t.value_id,
            "value": type_json(t.value_type),
            "value-required": bool(t.value_required),
        }
    if isinstance(t, T.DecimalType):
        return f"decimal({t.precision},{t.scale})"
    if isinstance(t, T.FixedType):
        return f"fixed[{len(t)}]"
    simple = {
        T.BooleanType: "boolean",
        T.IntegerType: "int",
        T.LongType: "long",
        T.FloatType: "float",
        T.DoubleType: "double",
        T.DateType: "date",
        T.TimeType: "time",
        T.TimestampType: "timestamp",
        T.TimestamptzType: "timestamptz",
        T.StringType: "string",
        T.UUIDType: "uuid",
        T.BinaryType: "binary",
    }
    for cls, name in simple.items():
        if isinstance(t, cls):
            return name
    return str(t)


def field_json(f) -> dict[str, Any]:
    return {"id": f.field_id, "name": f.name, "required": bool(f.required), "type": type_json(f.field_type)}


def schema_json(schema) -> dict[str, Any]:
    return {"type": "struct", "schema-id": schema.schema_id, "fields": [field_json(f) for f in schema.fields]}


def spec_json(spec) -> list[dict[str, Any]]:
    return [
        {"source_id": f.source_id, "field_id": f.field_id, "name": f.name, "transform": str(f.transform)}
        for f in spec.fields
    ]


_D = decimal.Context(prec=200)


def fmt_date(d: dt.date) -> str:
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"


def fmt_time(t: dt.time) -> str:
    return f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}.{t.microsecond:06d}"


def value_json(t, v: Any) -> Any:
    """Type-directed conversion of one PyArrow-produced Python value to its canonical JSON value."""
    from pyiceberg import types as T

    if v is None:
        return None
    if isinstance(t, T.BooleanType):
        return bool(v)
    if isinstance(t, (T.IntegerType, T.LongType)):
        return int(v)
    if isinstance(t, (T.FloatType, T.DoubleType)):
        f = float(v)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "Infinity" if f > 0 else "-Infinity"
        return f
    if isinstance(t, T.DecimalType):
        d = v if isinstance(v, decimal.Decimal) else decimal.Decimal(str(v))
        q = d.quantize(decimal.Decimal(1).scaleb(-t.scale), context=_D)
        if q.is_zero():
            q = q.copy_abs()
        return format(q, "f")
    if isinstance(t, T.DateType):
        return fmt_date(v)
    if isinstance(t, T.TimeType):
        return fmt_time(v)
    if isinstance(t, T.TimestamptzType):
        if v.tzinfo is None:
            # PyArrow attaches the zone for timestamp[us, tz=...]; a naive value is already UTC.
            utc = v
        else:
            utc = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return f"{fmt_date(utc.date())}T{fmt_time(utc.time())}+00:00"
    if isinstance(t, T.TimestampType):
        if v.tzinfo is not None:
            v = v.replace(tzinfo=None)
        return f"{fmt_date(v.date())}T{fmt_time(v.time())}"
    if isinstance(t, T.StringType):
        return str(v)
    if isinstance(t, T.UUIDType):
        if isinstance(v, uuid.UUID):
            return str(v)
        if isinstance(v, (bytes, bytearray)):
            return str(uuid.UUID(bytes=bytes(v)))
        return str(uuid.UUID(str(v)))
    if isinstance(t, (T.FixedType, T.BinaryType)):
        return bytes(v).hex()
    if isinstance(t, T.StructType):
        return {f.name: value_json(f.field_type, v.get(f.name)) for f in t.fields}
    if isinstance(t, T.ListType):
        return [value_json(t.element_type, item) for item in v]
    if isinstance(t, T.MapType):
        pairs = v.items() if isinstance(v, dict) else v
        entries = []
        for k, val in pairs:
            key = value_json(t.key_type, k)
            entries.append((canonical(key), {"key": key, "value": value_json(t.value_type, val)}))
        entries.sort(key=lambda e: e[0])
        return [e[1] for e in entries]
    raise ValueError(f"unsupported Iceberg type in rows: {t}")


def read_rows(table) -> list[dict[str, Any]]:
    """All rows of the current snapshot, read with the table's CURRENT schema."""
    from pyiceberg.io.pyarrow import ArrowScan

    if table.current_snapshot() is None:
        return []
    schema = table.schema()
    scan = table.scan()
    # table.scan() without a snapshot id already projects the current schema in 0.12; build the
    # ArrowScan with it explicitly so a version that projects the snapshot's schema cannot
    # change what the tests see.
    arrow = ArrowScan(table.metadata, table.io, schema, scan.row_filter, scan.case_sensitive).to_table(
        scan.plan_files()
    )
    out = []
    for row in arrow.to_pylist():
        out.append({f.name: value_json(f.field_type, row.get(f.name)) for f in schema.fields})
    return out


def dump_table(name: str, table) -> str:
    md = table.metadata
    snapshots = []
    for s in md.snapshots:
        if s.summary is None:
            operation, summary = None, {}
        else:
            dumped = s.summary.model_dump()
            operation = dumped.pop("operation", None)
            summary = {str(k): str(v) for k, v in dumped.items()}
        snapshots.append(
            {
                "snapshot_id": s.snapshot_id,
                "parent_id": s.parent_snapshot_id,
                "operation": operation,
                "summary": summary,
            }
        )
    current = table.current_snapshot()
    rows = [(canonical(r), r) for r in read_rows(table)]
    rows.sort(key=lambda e: e[0])
    doc = {
        "table": name,
        "format_version": int(md.format_version),
        "schema": schema_json(table.schema()),
        "partition_spec": spec_json(table.spec()),
        "properties": {str(k): str(v) for k, v in table.properties.items()},
        "snapshots": snapshots,
        "current_snapshot_id": None if current is None else current.snapshot_id,
        "row_count": len(rows),
        "rows": [r for _, r in rows],
    }
    return canonical(doc)


# --------------------------------------------------------------------------- subcommands


def cmd_read(args: argparse.Namespace) -> None:
    catalog = open_catalog(args, writable=False)
    table = catalog.load_table(split_identifier(args.table))
    text = dump_table(args.table, table)
    sys.stdout.write(text + "\n")


def cmd_column_stats(args: argparse.Namespace) -> None:
    """Counts of a large table without dumping its rows: rows, snapshots, and for one
    integer column its distinct count, min, max and sum (enough to show each id once); with
    --summary-key, that key's values along the main branch, newest snapshot first."""
    import pyarrow.compute as pc

    catalog = open_catalog(args, writable=False)
    table = catalog.load_table(split_identifier(args.table))
    column = table.scan(selected_fields=(args.column,)).to_arrow().column(args.column)
    doc = {
        "table": args.table,
        "snapshots": len(table.metadata.snapshots),
        "rows": len(column),
        "nulls": column.null_count,
        "distinct": pc.count_distinct(column).as_py(),
        "min": pc.min(column).as_py(),
        "max": pc.max(column).as_py(),
        "sum": pc.sum(column).as_py(),
    }
    if args.summary_key:
        from pyiceberg.table.snapshots import ancestors_of

        values = []
        for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
            value = snapshot.summary.additional_properties.get(args.summary_key) if snapshot.summary else None
            if value is not None:
                values.append(value)
        doc["summary_values"] = values
    sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")


def parse_partition_field(expr: str):
    """`col`, `identity(col)`, `year(col)`..`hour(col)`, `bucket(N,col)`, `truncate(W,col)`."""
    from pyiceberg import transforms as X

    expr = expr.strip()
    if "(" not in expr:
        return expr, X.IdentityTransform()
    fn, _, rest = expr.partition("(")
    if not rest.endswith(")"):
        fail(f"bad --partition-field {expr!r}", 2)
    inner = [p.strip() for p in rest[:-1].split(",")]
    fn = fn.strip().lower()
    simple = {
        "identity": X.IdentityTransform,
        "year": X.YearTransform,
        "month": X.MonthTransform,
        "day": X.DayTransform,
        "hour": X.HourTransform,
        "void": X.VoidTransform,
    }
    if fn in simple and len(inner) == 1:
        return inner[0], simple[fn]()
    if fn == "bucket" and len(inner) == 2:
        return inner[1], X.BucketTransform(int(inner[0]))
    if fn == "truncate" and len(inner) == 2:
        return inner[1], X.TruncateTransform(int(inner[0]))
    fail(f"bad --partition-field {expr!r}", 2)
    return None


def cmd_create_and_append(args: argparse.Namespace) -> None:
    import pyarrow.parquet as pq

    catalog = open_catalog(args, writable=True)
    ident = split_identifier(args.table)
    data = pq.read_table(args.parquet)
    catalog.create_namespace_if_not_exists(ident[:-1])
    table_props = parse_kv(args.table_property, "--table-property")
    if catalog.table_exists(ident):
        table = catalog.load_table(ident)
        created = False
    else:
        table = catalog.create_table(ident, schema=data.schema, properties=table_props)
        created = True
        if args.partition_field:
            with table.update_spec() as spec:
                for expr in args.partition_field:
                    source, transform = parse_partition_field(expr)
                    spec.add_field(source, transform)
            table = catalog.load_table(ident)
    table.append(data)
    table = catalog.load_table(ident)
    current = table.current_snapshot()
    print(
        canonical(
            {
                "table": args.table,
                "created": created,
                "rows_appended": data.num_rows,
                "snapshot_id": None if current is None else current.snapshot_id,
            }
        )
    )


def cmd_add_files(args: argparse.Namespace) -> None:
    catalog = open_catalog(args, writable=True)
    ident = split_identifier(args.table)
    table = catalog.load_table(ident)
    files = []
    for f in args.files:
        if "://" in f:
            files.append(f)
        else:
            files.append(os.path.abspath(f))
    table.add_files(file_paths=files)
    table = catalog.load_table(ident)
    current = table.current_snapshot()
    print(
        canonical(
            {
                "table": args.table,
                "files_added": len(files),
                "snapshot_id": None if current is None else current.snapshot_id,
            }
        )
    )


def cmd_files(args: argparse.Namespace) -> None:
    table = open_catalog(args, writable=False).load_table(split_identifier(args.table))
    files = [
        {"path": t.file.file_path, "record_count": t.file.record_count, "file_size": t.file.file_size_in_bytes}
        for t in table.scan().plan_files()
    ]
    files.sort(key=lambda f: f["path"])
    print(canonical({"table": args.table, "files": files}))


def cmd_tag(args: argparse.Namespace) -> None:
    catalog = open_catalog(args, writable=True)
    table = catalog.load_table(split_identifier(args.table))
    oldest = min(table.snapshots(), key=lambda s: (s.timestamp_ms, s.snapshot_id))
    table.manage_snapshots().create_tag(
        snapshot_id=oldest.snapshot_id, tag_name=args.name, max_ref_age_ms=args.max_ref_age_ms
    ).commit()
    print(canonical({"table": args.table, "tag": args.name, "snapshot_id": oldest.snapshot_id}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="iceberg_tool.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--catalog-type", required=True, choices=["sql", "rest"])
        p.add_argument("--catalog-name", required=True)
        p.add_argument("--uri", required=True, help="sqlite:////abs/catalog.db (sql) or http://host:port (rest)")
        p.add_argument("--warehouse", help="file:///abs/dir (required for sql)")
        p.add_argument("--table", required=True, help="namespace.name")
        p.add_argument("--catalog-property", action="append", metavar="KEY=VALUE")

    p = sub.add_parser("read", help="print the canonical JSON of a table")
    common(p)
    p.set_defaults(func=cmd_read)

    p = sub.add_parser("column-stats", help="rows, and distinct/min/max/sum of one integer column")
    common(p)
    p.add_argument("--column", required=True)
    p.add_argument("--summary-key", default=None)
    p.set_defaults(func=cmd_column_stats)

    p = sub.add_parser("create-and-append", help="create a table from a Parquet file and append it")
    common(p)
    p.add_argument("--parquet", required=True)
    p.add_argument("--table-property", action="append", metavar="KEY=VALUE", help="used only on creation")
    p.add_argument(
        "--partition-field", action="append", metavar="EXPR", help="e.g. day(ts), bucket(16,id); on creation"
    )
    p.set_defaults(func=cmd_create_and_append)

    p = sub.add_parser("add-files", help="PyIceberg add_files")
    common(p)
    p.add_argument("--files", required=True, nargs="+")
    p.set_defaults(func=cmd_add_files)

    p = sub.add_parser("files", help="the current snapshot's data files: path, record_count, file_size")
    common(p)
    p.set_defaults(func=cmd_files)

    p = sub.add_parser("tag", help="tag the oldest snapshot")
    common(p)
    p.add_argument("--name", required=True)
    p.add_argument("--max-ref-age-ms", type=int, default=None)
    p.set_defaults(func=cmd_tag)

    args = parser.parse_args(argv)
    try:
        args.func(args)
    except SystemExit:
        raise
    except Exception as e:  # one clear line for the test's failure message, then the trace
        import traceback

        traceback.print_exc(file=sys.stderr)
        fail(f"{args.command} failed: {type(e).__name__}: {e}")


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        import served

        served.serve(main)
    else:
        main()
