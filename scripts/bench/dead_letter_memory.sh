#!/usr/bin/env bash
# Memory of `outflow run` when the sink rejects every row (issue 15): for each row count in
# ROWS (default "10000 1000000"), a CSV whose template field is always empty goes to a local
# Iceberg table `bench.t_{k}`, so every row is a failed record for the dead-letter file.
# Prints, per count, the wall time, the peak resident memory and the dead-letter lines.
# Rejected records are streamed to the file as they happen, so the peak should not grow
# with the count. PROFILE=release measures the release binary (default: the debug build
# the README's first run makes).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
ROWS=${ROWS:-"10000 1000000"}
PROFILE=${PROFILE:-debug}
if [ "$PROFILE" = release ]; then
    cargo build --release -q -p outflow-cli
else
    cargo build -q -p outflow-cli
fi
target=${CARGO_TARGET_DIR:-$REPO/target}
outflow="$target/$PROFILE/outflow"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for rows in $ROWS; do
    python3 - "$work/in-$rows.csv" "$rows" <<'PY'
import sys
path, rows = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    f.write("id,k,note\n")
    for start in range(0, rows, 100_000):
        f.write("".join(f"{i},,row {i} has no table to go to\n" for i in range(start, min(rows, start + 100_000))))
PY
    cat >"$work/job-$rows.yaml" <<YAML
source:
  path: $work/in-$rows.csv
  csv:
    schema:
      - { name: id, type: long, required: true }
      - { name: k, type: string }
      - { name: note, type: string }
sink:
  iceberg:
    catalog: { type: sql, uri: $work/catalog.db, warehouse: $work/warehouse }
    table: bench.t_{k}
dead_letter: $work/rejected-$rows.ndjson
YAML
    # Exit code 3: the run finished with rejected records, which is the point here.
    status=0
    /usr/bin/time -f '%e %M' -o "$work/time" "$outflow" run "$work/job-$rows.yaml" --quiet --json \
        >"$work/out.json" || status=$?
    [ "$status" = 3 ] || { cat "$work/out.json"; echo "expected exit code 3, got $status" >&2; exit 1; }
    # time(1) adds a line about the exit status first; the figures are the last line.
    read -r seconds kib < <(tail -n 1 "$work/time")
    lines=$(wc -l <"$work/rejected-$rows.ndjson")
    counted=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rejected"]["count"])' "$work/out.json")
    [ "$lines" = "$rows" ] && [ "$counted" = "$rows" ] || {
        echo "rows $rows, but $lines dead-letter lines and $counted counted" >&2
        exit 1
    }
    printf 'outflow run (%s): %s rows rejected to the dead-letter file in %ss, peak RSS %.1f MiB\n' \
        "$PROFILE" "$rows" "$seconds" "$(echo "$kib / 1024" | bc -l)"
    printf '{"bench":"dead_letter_memory","profile":"%s","rows":%s,"seconds":%s,"peak_rss_mib":%.1f}\n' \
        "$PROFILE" "$rows" "$seconds" "$(echo "$kib / 1024" | bc -l)"
done
