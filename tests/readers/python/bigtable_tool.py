#!/usr/bin/env python3
"""Independent reader for Outflow's Bigtable tests, on Google's Python client.

    bigtable_tool.py read --project P --instance I --table T [--host HOST:PORT]
    bigtable_tool.py tables --project P --instance I [--host HOST:PORT]
    bigtable_tool.py serve   (the same subcommands, one request a line: the arguments
                              separated by tabs; one JSON answer a line,
                              {"ok": true, "doc": ...} or {"ok": false, "error": ...})

`tables` prints {"tables": [TABLE_ID, ...]}, the instance's tables, sorted. `read` prints
one line of compact JSON with sorted keys:

    {"families": {NAME: {"gc_rule": RULE, "value_type": TYPE}},
     "rows": [{"key": KEY, "cells": {FAMILY: {QUALIFIER: [{"ts": MICROS, "value_hex": HEX}]}}}]}

- RULE is null (no rule: nothing is collected), {"max_versions": N}, {"max_age": "Ns"}
  (a protobuf Duration in its JSON form, e.g. "604800s" or "1.5s"), {"union": [RULE...]}
  or {"intersection": [RULE...]}.
- TYPE is "raw" for a family without a value type, "sum", "min", "max" or "hll" for an
  aggregate over Int64 with big-endian encoding (hll: HyperLogLog++ unique count), and the
  Type message as protobuf JSON for anything else, so that a surprise is visible.
- Rows come in key order. KEY is the row key as a string when it is valid UTF-8; otherwise the
  row has "key_hex" instead of "key". QUALIFIER likewise, prefixed "hex:" when not UTF-8.
  Cells of a column are newest first, as Bigtable returns them.

Family value types come from the low-level admin client's GetTable (SCHEMA_VIEW): the
high-level `ColumnFamily` of google-cloud-bigtable does not expose them. The data come from the
classic `Table.read_rows()`, whose chunk merging is Google's own.

Only talks to an emulator: --host, or else BIGTABLE_EMULATOR_HOST, names it. A served tool
keeps one client per emulator, so a test binary pays for Python and the client's imports
once, not once a read.
"""

import argparse
import json
import os
import sys
import warnings

from google.api_core import exceptions
from google.cloud import bigtable
from google.cloud.bigtable_admin_v2.types import bigtable_table_admin, table as table_pb
from google.protobuf import json_format


def duration_json(duration) -> str:
    """A protobuf Duration (or the datetime.timedelta proto-plus gives) as "Ns"."""
    if hasattr(duration, "total_seconds"):
        micros = round(duration.total_seconds() * 1_000_000)
        seconds, rest = divmod(micros, 1_000_000)
        nanos = rest * 1000
    else:
        seconds, nanos = duration.seconds, duration.nanos
    if nanos == 0:
        return f"{seconds}s"
    return f"{seconds}.{nanos:09d}".rstrip("0") + "s"


def gc_rule_json(rule):
    """A GcRule message in the readable form the module docstring describes."""
    if rule is None:
        return None
    which = table_pb.GcRule.pb(rule).WhichOneof("rule")
    if which is None:
        return None
    if which == "max_num_versions":
        return {"max_versions": rule.max_num_versions}
    if which == "max_age":
        return {"max_age": duration_json(rule.max_age)}
    if which == "union":
        return {"union": [gc_rule_json(r) for r in rule.union.rules]}
    if which == "intersection":
        return {"intersection": [gc_rule_json(r) for r in rule.intersection.rules]}
    raise ValueError(f"unknown GC rule kind {which!r}")


# The Python types rename the proto fields `min` and `max` to `min_` and `max_`.
AGGREGATES = {
    "sum": "sum",
    "min": "min",
    "min_": "min",
    "max": "max",
    "max_": "max",
    "hllpp_unique_count": "hll",
}


def value_type_json(column_family):
    """The family's value type: "raw", an aggregate name, or the Type message as JSON."""
    pb = table_pb.ColumnFamily.pb(column_family)
    if not pb.HasField("value_type"):
        return "raw"
    value_type = pb.value_type
    kind = value_type.WhichOneof("kind")
    if kind == "aggregate_type":
        aggregate = value_type.aggregate_type
        input_type = aggregate.input_type
        big_endian_int64 = (
            input_type.WhichOneof("kind") == "int64_type"
            and input_type.int64_type.encoding.WhichOneof("encoding") == "big_endian_bytes"
        )
        name = AGGREGATES.get(aggregate.WhichOneof("aggregator"))
        if big_endian_int64 and name is not None:
            return name
    return json_format.MessageToDict(value_type)


def text_or_hex(data: bytes):
    """(text, is_text): the UTF-8 text of `data` when it is valid UTF-8, else its hex."""
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.hex(), False


_CLIENTS = {}


def client_for(host: str, project: str):
    """The admin client of `project` on the emulator at `host`, made once per pair."""
    key = (host, project)
    if key not in _CLIENTS:
        # The client reads the emulator's address from the environment when it is made,
        # and warns on stderr that it talks to an emulator: that is the point here.
        os.environ["BIGTABLE_EMULATOR_HOST"] = host
        warnings.filterwarnings("ignore", message="Connecting to Bigtable emulator")
        _CLIENTS[key] = bigtable.Client(project=project, admin=True)
    return _CLIENTS[key]


def read(client, project: str, instance: str, table: str) -> dict:
    table_name = f"projects/{project}/instances/{instance}/tables/{table}"
    described = client.table_admin_client.get_table(
        request=bigtable_table_admin.GetTableRequest(
            name=table_name, view=table_pb.Table.View.SCHEMA_VIEW
        )
    )
    families = {
        name: {"gc_rule": gc_rule_json(family.gc_rule), "value_type": value_type_json(family)}
        for name, family in described.column_families.items()
    }

    rows = []
    for row in client.instance(instance).table(table).read_rows():
        key, key_is_text = text_or_hex(row.row_key)
        cells = {}
        for family, columns in row.cells.items():
            out_columns = {}
            for qualifier, column_cells in columns.items():
                name, is_text = text_or_hex(qualifier)
                out_columns[name if is_text else f"hex:{name}"] = [
                    {"ts": cell.timestamp_micros, "value_hex": cell.value.hex()}
                    for cell in column_cells
                ]
            cells[family] = out_columns
        rows.append({"key" if key_is_text else "key_hex": key, "cells": cells})
    return {"families": families, "rows": rows}


def tables(client, instance: str) -> list:
    return sorted(t.table_id for t in client.instance(instance).list_tables())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    read_cmd = commands.add_parser("read", help="print a table's families and rows as JSON")
    read_cmd.add_argument("--table", required=True)
    tables_cmd = commands.add_parser("tables", help="list the instance's tables as JSON")
    for cmd in (read_cmd, tables_cmd):
        cmd.add_argument("--project", required=True)
        cmd.add_argument("--instance", required=True)
        cmd.add_argument("--host", default=os.environ.get("BIGTABLE_EMULATOR_HOST"))
    args = parser.parse_args(argv)

    if not args.host:
        print("bigtable_tool.py: neither --host nor BIGTABLE_EMULATOR_HOST is set", file=sys.stderr)
        return 2
    client = client_for(args.host, args.project)
    try:
        if args.command == "tables":
            result = {"tables": tables(client, args.instance)}
        else:
            result = read(client, args.project, args.instance, args.table)
    except exceptions.GoogleAPICallError as error:
        print(f"bigtable_tool.py: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result, sort_keys=True, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        import served

        served.serve(main)
    else:
        sys.exit(main())
