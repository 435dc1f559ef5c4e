#!/usr/bin/env python3
"""Writes N rows of 5 columns into a Bigtable table through Google's Python client and its
MutationsBatcher, for Outflow's benchmark (scripts/bench/bigtable.sh).

    bigtable_python.py --table T [--rows N] [--flush-count ROWS]

The data matches the Outflow and Go writers: row keys user%08d, family cf, columns c0..c4
holding "v<col>-<row %012d>", all at one explicit timestamp. Talks to the emulator named by
BIGTABLE_EMULATOR_HOST. Prints one JSON line: {"writer": "python", "rows": N, "seconds": S}.
"""

import argparse
import datetime
import json
import os
import sys
import time
import warnings

from google.cloud import bigtable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="bench")
    parser.add_argument("--instance", default="bench")
    parser.add_argument("--table", required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--flush-count", type=int, default=10_000)
    args = parser.parse_args()
    if not os.environ.get("BIGTABLE_EMULATOR_HOST"):
        print("bigtable_python.py: BIGTABLE_EMULATOR_HOST is not set", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", message="Connecting to Bigtable emulator")

    client = bigtable.Client(project=args.project)
    table = client.instance(args.instance).table(args.table)
    stamp = datetime.datetime.fromtimestamp(1_700_000_000, tz=datetime.timezone.utc)
    columns = [f"c{c}".encode() for c in range(5)]

    start = time.monotonic()
    batcher = table.mutations_batcher(flush_count=args.flush_count, max_row_bytes=16 * 1024 * 1024)
    for i in range(args.rows):
        row = table.direct_row(f"user{i:08d}".encode())
        for c, qualifier in enumerate(columns):
            row.set_cell("cf", qualifier, f"v{c}-{i:012d}".encode(), timestamp=stamp)
        batcher.mutate(row)
    batcher.close()
    seconds = time.monotonic() - start
    print(json.dumps({"writer": "python", "rows": args.rows, "seconds": round(seconds, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
