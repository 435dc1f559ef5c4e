#!/usr/bin/env bash
# Memory of `outflow run` on a large CSV (issue 7): generates a CSV of about SIZE_GB
# gigabytes (default 2) once, loads it into a local Iceberg table with the release
# `outflow` binary, and prints the wall time and the peak resident memory of the process.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
SIZE_GB=${SIZE_GB:-2}
cache="$REPO/.cache/bench"
csv="$cache/big-${SIZE_GB}g.csv"
mkdir -p "$cache"
if [ ! -f "$csv" ]; then
    python3 - "$csv" "$SIZE_GB" <<'PY'
import sys
path, gb = sys.argv[1], float(sys.argv[2])
target = int(gb * 1024**3)
cities = ["Lisbon", "Porto", "Madrid", "Seville", "Lyon", "Paris", "Berlin", "Munich"]
with open(path + ".tmp", "w") as f:
    f.write("id,city,started_at,duration_s,distance_km,fare_eur,rider_id,note\n")
    i, size = 0, 0
    while size < target:
        lines = []
        for j in range(i, i + 100_000):
            lines.append(
                f"{j},{cities[j % 8]},2026-11-{1 + j % 28:02d}T{j % 24:02d}:{j % 60:02d}:00Z,"
                f"{60 + j % 3600},{(j % 5000) / 100},{(j % 9000) / 100 + 1},r{j % 40000:05d},"
                f"trip number {j} of the benchmark\n"
            )
        chunk = "".join(lines)
        f.write(chunk)
        size += len(chunk)
        i += 100_000
import os
os.rename(path + ".tmp", path)
PY
fi
cargo build --release -q -p outflow-cli
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/job.yaml" <<YAML
source:
  path: $csv
  csv:
    schema:
      - { name: id, type: long, required: true }
      - { name: city, type: string }
      - { name: started_at, type: timestamptz }
      - { name: duration_s, type: int }
      - { name: distance_km, type: double }
      - { name: fare_eur, type: "decimal(8,2)" }
      - { name: rider_id, type: string }
      - { name: note, type: string }
sink:
  iceberg:
    catalog: { type: sql, uri: $work/catalog.db, warehouse: $work/warehouse }
    table: bench.trips
YAML
size=$(stat -c %s "$csv")
/usr/bin/time -f '%e %M' -o "$work/time" target/release/outflow run "$work/job.yaml" --quiet --json >"$work/out.json"
read -r seconds kib <"$work/time"
# Rows read from the CSV and rows the sink committed must agree, or the figures mean nothing.
read -r rows files < <(python3 -c '
import json, sys
out = json.load(open(sys.argv[1]))
written = out["result"]["destinations"]["bench.trips"]
if written["rows"] != out["read"]["rows_read"]:
    sys.exit("rows read %d but %d written" % (out["read"]["rows_read"], written["rows"]))
print(written["rows"], written["files"])' "$work/out.json")
printf 'outflow run: %s rows, %.2f GiB of CSV in %ss (%s data files), peak RSS %.1f MiB\n' \
    "$rows" "$(echo "$size / 1073741824" | bc -l)" "$seconds" "$files" "$(echo "$kib / 1024" | bc -l)"
printf '{"bench":"cli_csv_memory","bytes":%s,"rows":%s,"seconds":%s,"peak_rss_mib":%.1f}\n' \
    "$size" "$rows" "$seconds" "$(echo "$kib / 1024" | bc -l)"
