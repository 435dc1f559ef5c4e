#!/usr/bin/env bash
# Outflow's BigQuery sink against Google's Python Storage Write client, on the same
# local-bigquery emulator: appends ROWS rows (default 1,000,000) of 10 columns in batches
# of 10,000 and prints rows/s and peak RSS for each, and the ratio.
#
#   scripts/bench/bigquery.sh [ROWS]
#   CPU_ONLY=1 scripts/bench/bigquery.sh [ROWS]   # only the CPU runs (rows made beforehand)
#
# Runs, in order: Outflow's request building alone (no service), the Python client's
# request building alone, Outflow at-least-once (default stream), Outflow exactly-once
# (committed stream with offsets), the Python client on the default stream, then the three
# writes again with their rows made before the clock starts, for the clients' CPU time per
# row. Each write is checked with COUNT(*). The emulator's own CPU time is sampled around each write: when it
# is busy close to 100% of the wall time, the emulator, not the client, sets the pace.
#
# It starts its own emulator (instance "bigquery-bench", free ports) and stops it on exit;
# the release example builds into the shared target directory.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
ROWS="${1:-1000000}"
BATCH=10000
export OUTFLOW_BIGQUERY_INSTANCE=bigquery-bench
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
cd "$REPO"

echo "== building the release example" >&2
cargo build --release --quiet -p outflow-bigquery --example bigquery_bench
BENCH="$CARGO_TARGET_DIR/release/examples/bigquery_bench"

stop() { scripts/servers/bigquery.sh stop || true; }
trap stop EXIT
scripts/servers/bigquery.sh start
# shellcheck disable=SC1091
source ".cache/run/$OUTFLOW_BIGQUERY_INSTANCE.env"
EMULATOR_PID="$(cat ".cache/run/$OUTFLOW_BIGQUERY_INSTANCE.pid")"
PY="$OUTFLOW_BIGQUERY_PYTHON"
TOOL="$HERE/bigquery_python.py"
DATASET="bench_$(date +%s)"
"$PY" "$TOOL" setup --dataset "$DATASET"

# CPU seconds (user + system) used so far by the emulator's process group.
emulator_cpu() {
    local ticks=0 pid
    for pid in $(pgrep -g "$EMULATOR_PID" || echo "$EMULATOR_PID"); do
        [[ -r /proc/$pid/stat ]] || continue
        ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}

RESULTS="$(mktemp)"
run() {
    # run LABEL TABLE COMMAND...: runs one measurement and appends its JSON line, with the
    # emulator's CPU share and the row count read back.
    local label="$1" table="$2"
    shift 2
    echo "== $label" >&2
    local before after line
    before="$(emulator_cpu)"
    line="$("$@")"
    after="$(emulator_cpu)"
    local count="null"
    if [[ "$table" != "-" ]]; then
        count="$("$PY" "$TOOL" count --dataset "$DATASET" --table "$table" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["count"])')"
    fi
    echo "$line" | "$PY" -c '
import json, sys
r = json.load(sys.stdin)
r["label"], r["emulator_cpu_s"], r["count"] = sys.argv[1], round(float(sys.argv[3]) - float(sys.argv[2]), 2), json.loads(sys.argv[4])
print(json.dumps(r))' "$label" "$before" "$after" "$count" | tee -a "$RESULTS" >&2
}

run "outflow encode only" - "$BENCH" --mode encode --rows "$ROWS" --batch "$BATCH"
run "python encode only" - "$PY" "$TOOL" encode --rows "$ROWS" --batch "$BATCH"
if [[ -z "${CPU_ONLY:-}" ]]; then
run "outflow at-least-once" outflow_alo "$BENCH" --mode write --method at_least_once --rows "$ROWS" --batch "$BATCH" --dataset "$DATASET" --table outflow_alo
run "outflow exactly-once" outflow_eo "$BENCH" --mode write --method exactly_once --rows "$ROWS" --batch "$BATCH" --dataset "$DATASET" --table outflow_eo
run "python default stream" python_default "$PY" "$TOOL" write --rows "$ROWS" --batch "$BATCH" --dataset "$DATASET" --table python_default
fi
# The clients' own CPU per row, rows made before the clock starts (the emulator sets the
# pace, so wall time cannot compare clients; CPU time can).
run "outflow at-least-once, cpu" outflow_cpu "$BENCH" --mode write --method at_least_once --pregenerate --rows "$ROWS" --batch "$BATCH" --dataset "$DATASET" --table outflow_cpu
run "outflow exactly-once, cpu" outflow_eo_cpu "$BENCH" --mode write --method exactly_once --pregenerate --rows "$ROWS" --batch "$BATCH" --dataset "$DATASET" --table outflow_eo_cpu
run "python default, cpu" python_cpu "$PY" "$TOOL" write --pregenerate --rows "$ROWS" --batch "$BATCH" --dataset "$DATASET" --table python_cpu

"$PY" - "$RESULTS" "$ROWS" "$REPO/docs/bench/bigquery.json" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {r["label"]: r for r in rows}
expected = int(sys.argv[2])
print()
print(f"{'run':<28} {'rows/s':>10} {'seconds':>8} {'peak RSS MiB':>13} {'emulator CPU':>13} {'client CPU s':>13} {'µs CPU/row':>11} {'rows read back':>15}")
for r in rows:
    busy = f"{100 * r['emulator_cpu_s'] / r['seconds']:.0f}%" if r["count"] is not None else "-"
    count = r["count"] if r["count"] is not None else "-"
    per_row = 1e6 * r["cpu_s"] / r["rows"]
    print(f"{r['label']:<28} {r['rows_per_s']:>10,} {r['seconds']:>8.1f} {r['peak_rss_kib'] / 1024:>13.1f} {busy:>13} {r['cpu_s']:>13.2f} {per_row:>11.2f} {count:>15}")
    if r["count"] is not None and r["count"] != expected:
        sys.exit(f"{r['label']}: {r['count']} rows read back, {expected} expected")
print()
for what, a, b, key in [
    ("outflow/python rows/s, writing (at-least-once vs default stream)", "outflow at-least-once", "python default stream", "rows_per_s"),
    ("outflow/python rows/s, writing (exactly-once vs default stream)", "outflow exactly-once", "python default stream", "rows_per_s"),
    ("outflow/python rows/s, building requests only", "outflow encode only", "python encode only", "rows_per_s"),
    ("python/outflow peak RSS, writing (at-least-once)", "python default stream", "outflow at-least-once", "peak_rss_kib"),
    ("python/outflow client CPU, writing rows made beforehand (at-least-once)", "python default, cpu", "outflow at-least-once, cpu", "cpu_s"),
    ("python/outflow client CPU, writing rows made beforehand (exactly-once)", "python default, cpu", "outflow exactly-once, cpu", "cpu_s"),
]:
    if a in by and b in by:
        print(f"{what + ':':<75} {by[a][key] / by[b][key]:.2f}x")
if "python default stream" not in by:
    sys.exit(0)  # a CPU-only run: the chart is of the writes

# The chart's data (docs/bench/bigquery.json): the three writers into the emulator.
peers = [{"peer": label, "rows_per_s": by[label]["rows_per_s"], "seconds": by[label]["seconds"],
          "peak_rss_mib": round(by[label]["peak_rss_kib"] / 1024, 1)}
         for label in ("outflow at-least-once", "outflow exactly-once", "python default stream")]
with open(sys.argv[3], "w") as out:
    json.dump({"title": f"BigQuery Storage Write API (emulator), {expected:,} rows", "unit": "rows/s",
               "peers": peers}, out, indent=1)
PYEOF
"$PY" "$REPO/scripts/bench/charts.py"
