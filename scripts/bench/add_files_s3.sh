#!/usr/bin/env bash
# Iceberg AddFiles from S3: Outflow against PyIceberg's add_files on the same objects, and
# against the bare cost of one listing plus a ranged read and a decode of every footer
# (OpenDAL, no catalog, no metrics), all against the SeaweedFS store the test script runs.
#
#   scripts/bench/add_files_s3.sh [--files N] [--runs R] [--concurrency C]
#
# N objects of 1,000 rows (about 30 KB each; default 10,000) are uploaded once under a fresh
# prefix; each run registers them into a fresh table whose warehouse is in the same store.
# Outflow is given the prefix (its time includes the listing); PyIceberg is given the
# object URLs (its listing is not timed). Prints each run and the median ratios, and
# appends them to .cache/bench/add_files_s3/results.jsonl.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
FILES=10000
RUNS=3
CONCURRENCY=32
while [[ $# -gt 0 ]]; do
  case "$1" in
    --files) FILES="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    *) echo "add_files_s3.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "$REPO"

"$REPO/scripts/setup/readers.sh" >/dev/null
# shellcheck disable=SC1091
source "$REPO/.cache/run/readers.env"
# shellcheck disable=SC1091
source "$HERE/seaweedfs.sh"
use_seaweedfs "$REPO"
PY="$OUTFLOW_PYTHON"
TOOL="$HERE/add_files.py"

echo "== building the release example" >&2
cargo build --release --quiet -p outflow-iceberg --example add_files_bench
BENCH="$CARGO_TARGET_DIR/release/examples/add_files_bench"

WORK="$REPO/.cache/bench/add_files_s3"
RESULTS="$WORK/results.jsonl"
mkdir -p "$WORK"
: >"$RESULTS"
ROOT="s3://$OUTFLOW_S3_BUCKET/bench-addfiles-$(date +%s)"
echo "== uploading $FILES objects under $ROOT/data/" >&2
"$PY" "$TOOL" gen-small-s3 "$ROOT/data" "$FILES" >&2

for run in $(seq 1 "$RUNS"); do
  echo "== run $run" >&2
  out="$("$BENCH" s3-footers "$ROOT/data/" "$CONCURRENCY")"; echo "{\"run\":$run,\"result\":$out}" >>"$RESULTS"; echo "   footers   $out" >&2
  cat="$WORK/catalogs/outflow-$run"; rm -rf "$cat"; mkdir -p "$cat"
  out="$("$BENCH" s3-add "$ROOT/data/" "$cat" "$ROOT/wh-outflow-$run" bench.t "$CONCURRENCY")"
  echo "{\"run\":$run,\"result\":$out}" >>"$RESULTS"; echo "   outflow   $out" >&2
  cat="$WORK/catalogs/pyiceberg-$run"; rm -rf "$cat"; mkdir -p "$cat"
  out="$("$PY" "$TOOL" pyiceberg-s3 "$cat" "$ROOT/wh-pyiceberg-$run" bench.t "$ROOT/data/")"
  echo "{\"run\":$run,\"result\":$out}" >>"$RESULTS"; echo "   pyiceberg $out" >&2
done
rm -rf "$WORK/catalogs"

"$PY" - "$RESULTS" "$FILES" <<'PYEOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault(r["run"], {})[r["result"]["mode"]] = r["result"]["seconds"]
n = int(sys.argv[2])
vs_py = sorted(m["pyiceberg"] / m["add"] for m in runs.values())
vs_bare = sorted(m["add"] / m["footers"] for m in runs.values())
for mode, label in (("add", "outflow add-files"), ("pyiceberg", "pyiceberg add_files"), ("footers", "bare list + footer reads")):
    secs = sorted(m[mode] for m in runs.values())
    print(f"{label:<26} median {statistics.median(secs):7.2f} s  ({n / statistics.median(secs):8,.0f} files/s)  range {secs[0]:.2f}-{secs[-1]:.2f} s")
print(f"outflow vs pyiceberg: {statistics.median(vs_py):.1f}x faster (range {vs_py[0]:.1f}-{vs_py[-1]:.1f})")
print(f"outflow / bare reads: {statistics.median(vs_bare):.2f}x the time (range {vs_bare[0]:.2f}-{vs_bare[-1]:.2f})")
PYEOF
