#!/usr/bin/env bash
# Engine benchmark (issue 8): one INSERT INTO ... SELECT of ROWS (default 20,000,000) rows
# from Parquet files into a new Iceberg table (SQLite catalog), run four ways:
#   outflow-datafusion         Outflow's spec-built table in DataFusion, one process
#   outflow-datafusion-single  Outflow's closure-built table: one stream, one sink
#   outflow-ballista           the same statement on an outflow-scheduler + 2 outflow-executors
#   iceberg-datafusion         iceberg-rust's own DataFusion insert
# Peak RSS is the process's (for Ballista: the largest of the scheduler and executors).
# Writes docs/bench/engine.json and its chart; prints a table.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
ROWS=${ROWS:-20000000}
FILES=${FILES:-8}
PARTITIONS=${PARTITIONS:-2}
WORK=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do pkill -TERM -P "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --release -p outflow-ballista --bins --quiet
cargo bench -p outflow-ballista --bench engine --no-run --quiet 2>/dev/null
bench=$(ls -t target/release/deps/engine-* | grep -v '\.d$' | head -n 1)

echo "generating $ROWS rows in $FILES Parquet files" >&2
"$bench" generate "$WORK/source" "$ROWS" "$FILES" --bench
du -sh "$WORK/source" >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Runs the bench binary; prints its JSON with the peak RSS (MiB) of the process added.
measure() {
    /usr/bin/time -f '%M' -o "$WORK/rss" "$bench" "$@" --bench > "$WORK/out.json"
    python3 - "$WORK/out.json" "$WORK/rss" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
out["peak_rss_mib"] = int(open(sys.argv[2]).read().split()[-1]) / 1024
print(json.dumps(out))
PY
}

results=()
for mode in datafusion datafusion-single iceberg-datafusion; do
    echo "running $mode" >&2
    rm -rf "$WORK/lake"
    results+=("$(measure "$mode" "$WORK/source" "$WORK/lake" "$PARTITIONS")")
done

echo "running ballista (scheduler + 2 executors)" >&2
rm -rf "$WORK/lake"
sport=$(free_port)
/usr/bin/time -f '%M' -o "$WORK/rss-scheduler" target/release/outflow-scheduler \
    --bind-host 127.0.0.1 --external-host 127.0.0.1 --bind-port "$sport" \
    --scheduler-policy pull-staged > "$WORK/scheduler.log" 2>&1 &
pids+=($!)
for i in 0 1; do
    mkdir -p "$WORK/executor-$i"
    /usr/bin/time -f '%M' -o "$WORK/rss-executor-$i" target/release/outflow-executor \
        --bind-host 127.0.0.1 --external-host 127.0.0.1 \
        --bind-port "$(free_port)" --bind-grpc-port "$(free_port)" \
        --scheduler-host 127.0.0.1 --scheduler-port "$sport" \
        --concurrent-tasks 1 --task-scheduling-policy pull-staged \
        --work-dir "$WORK/executor-$i" > "$WORK/executor-$i.log" 2>&1 &
    pids+=($!)
done
for _ in $(seq 1 200); do
    [ "$(cat "$WORK"/executor-*.log 2>/dev/null | grep -c 'Starting poll work loop')" = 2 ] && break
    sleep 0.1
done
"$bench" ballista "$WORK/source" "$WORK/lake" "$PARTITIONS" "df://127.0.0.1:$sport" --bench > "$WORK/out.json"
# The PIDs are /usr/bin/time's, which ignores SIGINT: signal the servers under them.
for pid in "${pids[@]}"; do pkill -TERM -P "$pid" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
results+=("$(python3 - "$WORK" <<'PY'
import glob, json, os, sys
work = sys.argv[1]
out = json.load(open(os.path.join(work, "out.json")))
rss = [int(open(f).read().split()[-1]) / 1024 for f in glob.glob(os.path.join(work, "rss-*")) if open(f).read().strip()]
out["peak_rss_mib"] = max(rss) if rss else None
print(json.dumps(out))
PY
)")

printf '%s\n' "${results[@]}" | tee "$WORK/runs.ndjson" >&2
python3 - "$ROWS" "$FILES" "$PARTITIONS" "$WORK/runs.ndjson" <<'PY'
import json, os, sys
rows, files, partitions, runs_file = sys.argv[1:5]
runs = [json.loads(line) for line in open(runs_file) if line.strip()]
names = {
    "datafusion": "outflow (DataFusion)",
    "datafusion-single": "outflow (one stream)",
    "ballista": "outflow (Ballista)",
    "iceberg-datafusion": "iceberg-datafusion",
}
peers = []
for r in runs:
    assert r["rows"] == int(rows), f"{r['mode']} committed {r['rows']} rows, not {rows}"
    peers.append({"peer": names[r["mode"]], "mode": r["mode"], "rows_per_s": r["rows_per_second"],
                  "seconds": r["seconds"], "peak_rss_mib": r.get("peak_rss_mib")})
base = next(p for p in peers if p["mode"] == "datafusion")
peer = next(p for p in peers if p["mode"] == "iceberg-datafusion")
doc = {
    "title": f"INSERT ... SELECT of {int(rows):,} rows into Iceberg",
    "note": f"{files} Parquet source files, target_partitions={partitions}, 2 cores",
    "peers": peers,
    "ratio_outflow_vs_iceberg_datafusion": base["rows_per_s"] / peer["rows_per_s"],
}
with open("docs/bench/engine.json", "w") as f:
    json.dump(doc, f, indent=2)
print(f"{'way':32} {'seconds':>8} {'rows/s':>12} {'peak MiB':>9}")
for p in peers:
    rss = p["peak_rss_mib"]
    print(f"{p['peer']:32} {p['seconds']:8.2f} {p['rows_per_s']:12,.0f} {rss if rss is None else round(rss):>9}")
print(f"outflow (DataFusion) / iceberg-datafusion: {doc['ratio_outflow_vs_iceberg_datafusion']:.2f}x")
PY
python3 scripts/bench/charts.py
