#!/usr/bin/env bash
# Iceberg compaction: Outflow's `compact` against the bare cost of the same rewrite with
# parquet-rs alone (one thread reading every file, another writing files of the target
# size, zstd level 3 both), on the same small files.
#
#   scripts/bench/compact.sh [--files 10000] [--rows 5000] [--target-bytes 536870912]
#                            [--runs 3] [--keep]
#
# The files (--files of --rows rows each: about 1 GiB at the defaults) are written once and
# registered into a fresh SQLite catalog by AddFiles before each Outflow run, so every run
# compacts the same table. Each measurement is its own process, so the peak memory (VmHWM)
# is that of the compaction or the peer alone. The page cache is warm (the files were just
# written or read).
#
# Output: one JSON line per measurement in .cache/bench/compact/results.jsonl, a table of
# the medians and ranges on stdout, and the chart docs/bench/compact.{json,svg}. Builds the
# release example into the shared target directory; the files are deleted unless --keep.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
FILES=10000
ROWS=5000
TARGET=536870912
RUNS=3
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --files) FILES="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    --target-bytes) TARGET="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "compact.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "$REPO"

echo "== building the release example" >&2
cargo build --release --quiet -p outflow-iceberg --example compact_bench
BENCH="$CARGO_TARGET_DIR/release/examples/compact_bench"

WORK="$REPO/.cache/bench/compact"
RESULTS="$WORK/results.jsonl"
rm -rf "$WORK/data" "$WORK/catalog" "$WORK/bare"
mkdir -p "$WORK"
: >"$RESULTS"
cleanup() {
  if [[ $KEEP -eq 0 ]]; then rm -rf "$WORK/data" "$WORK/catalog" "$WORK/bare"; fi
}
trap cleanup EXIT

echo "== writing $FILES files of $ROWS rows" >&2
"$BENCH" gen "$WORK" "$FILES" "$ROWS" | tee -a "$RESULTS" >&2
for run in $(seq 1 "$RUNS"); do
  echo "== run $run of $RUNS" >&2
  "$BENCH" register "$WORK" >/dev/null
  "$BENCH" compact "$WORK" "$TARGET" | tee -a "$RESULTS" >&2
  "$BENCH" bare "$WORK" "$TARGET" | tee -a "$RESULTS" >&2
done

python3 - "$RESULTS" "$REPO/docs/bench/compact.json" "$FILES" "$ROWS" <<'EOF'
import json, statistics, sys
results, chart, files, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
runs = {}
gen = None
for line in open(results):
    r = json.loads(line)
    if r["mode"] == "gen":
        gen = r
    else:
        runs.setdefault(r["mode"], []).append(r)
def median(mode, key):
    return statistics.median(r[key] for r in runs[mode])
def spread(mode, key):
    values = [r[key] for r in runs[mode]]
    return f"{min(values)}-{max(values)}"
print(f"{files:,} files, {gen['bytes_out'] / 2**30:.2f} GiB, {files * rows:,} rows")
print(f"{'peer':<28} {'median s':>9} {'range s':>14} {'peak MiB':>9} {'files out':>10}")
for mode, label in (("compact", "outflow compact"), ("bare", "bare parquet-rs rewrite")):
    print(f"{label:<28} {median(mode, 'seconds'):>9} {spread(mode, 'seconds'):>14} "
          f"{median(mode, 'peak_mib'):>9} {runs[mode][0]['files_out']:>10}")
ratios = sorted(c["seconds"] / b["seconds"] for c, b in zip(runs["compact"], runs["bare"]))
print(f"outflow / bare time, per run: {', '.join(f'{r:.2f}x' for r in ratios)}; "
      f"median {statistics.median(ratios):.2f}x")
peers = [
    {"peer": "outflow compact", "rows_per_s": round(files * rows / median("compact", "seconds")),
     "peak_rss_mib": median("compact", "peak_mib")},
    {"peer": "bare parquet-rs rewrite", "rows_per_s": round(files * rows / median("bare", "seconds")),
     "peak_rss_mib": median("bare", "peak_mib")},
]
with open(chart, "w") as out:
    json.dump({"title": f"Iceberg compaction, {files:,} small files into "
                        f"{runs['compact'][0]['files_out']}", "unit": "rows/s", "peers": peers},
              out, indent=1)
EOF
python3 "$HERE/charts.py"
