#!/usr/bin/env bash
# Iceberg AddFiles: Outflow against PyIceberg's add_files on the same Parquet files, and the
# bare cost of reading those files' footers in parallel (open, read the tail, decode; no
# catalog, no metrics), once with a blocking task per file and once with eight files a task
# (how AddFiles reads local files).
#
#   scripts/bench/add_files.sh [--sizes 1000,5000,10000] [--large N] [--large-mib M]
#                              [--concurrency C] [--skip-pyiceberg-above N] [--keep]
#
# Small files: 1,000 rows each (about 30 KB); every size in --sizes is a prefix of one set,
# each registered into a fresh SQLite catalog. Large files: --large copies (default 100) of
# one --large-mib MiB file (default 64) in 8 row groups; registering reads only footers, so
# the size matters little, but the copies take real disk (100 x 64 MiB = 6.4 GiB), which is
# why the default is not the 1,000 of the issue (64 GiB). The page cache is warm in every
# run (the files were just written); each measurement is one run, reported as is.
#
# Output: a table on stdout, .cache/bench/add_files/results.jsonl, and the chart
# docs/bench/add_files.{json,svg}. Needs the readers'
# Python venv (scripts/setup/readers.sh), and builds the release example into the shared
# target directory. Files are deleted at the end unless --keep.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
SIZES="1000,5000,10000"
LARGE=100
LARGE_MIB=64
CONCURRENCY=32
PY_LIMIT=0
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sizes) SIZES="$2"; shift 2 ;;
    --large) LARGE="$2"; shift 2 ;;
    --large-mib) LARGE_MIB="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    --skip-pyiceberg-above) PY_LIMIT="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "add_files.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "$REPO"

"$REPO/scripts/setup/readers.sh" >/dev/null
# shellcheck disable=SC1091
source "$REPO/.cache/run/readers.env"
PY="$OUTFLOW_PYTHON"
TOOL="$HERE/add_files.py"

echo "== building the release example" >&2
cargo build --release --quiet -p outflow-iceberg --example add_files_bench
BENCH="$CARGO_TARGET_DIR/release/examples/add_files_bench"

WORK="$REPO/.cache/bench/add_files"
RESULTS="$WORK/results.jsonl"
mkdir -p "$WORK"
: >"$RESULTS"
cleanup() {
  if [[ $KEEP -eq 0 ]]; then rm -rf "$WORK/small" "$WORK/large" "$WORK/catalogs"; fi
}
trap cleanup EXIT

record() { # KIND FILES JSON: appends the measurement, tagged
  echo "{\"set\":\"$1\",\"n\":$2,\"result\":$3}" >>"$RESULTS"
}

measure() { # SET DIR N: the three measurements on the first N files of DIR
  local set="$1" dir="$2" n="$3" list cat out
  list="$WORK/list-$set-$n.txt"
  # awk reads to the end: `head` would stop early and fail the pipeline (pipefail).
  find "$dir" -name '*.parquet' | sort | awk -v n="$n" 'NR <= n' >"$list"
  if [[ "$(wc -l <"$list")" -lt "$n" ]]; then echo "add_files.sh: fewer than $n files in $dir" >&2; exit 1; fi
  echo "== $set: $n files" >&2
  out="$("$BENCH" footers "$list" "$CONCURRENCY")"; record "$set" "$n" "$out"; echo "   footers   $out" >&2
  out="$("$BENCH" footers "$list" "$CONCURRENCY" 8)"; record "$set" "$n" "$out"; echo "   footers/8 $out" >&2
  cat="$WORK/catalogs/outflow-$set-$n"; rm -rf "$cat"; mkdir -p "$cat"
  out="$("$BENCH" add "$list" "$cat" bench.t "$CONCURRENCY")"; record "$set" "$n" "$out"; echo "   outflow   $out" >&2
  if [[ $PY_LIMIT -eq 0 || $n -le $PY_LIMIT ]]; then
    cat="$WORK/catalogs/pyiceberg-$set-$n"; rm -rf "$cat"; mkdir -p "$cat"
    out="$("$PY" "$TOOL" pyiceberg "$cat" bench.t "$list")"; record "$set" "$n" "$out"; echo "   pyiceberg $out" >&2
  fi
}

MAX_SMALL=0
IFS=, read -ra SIZE_LIST <<<"$SIZES"
for s in "${SIZE_LIST[@]}"; do (( s > MAX_SMALL )) && MAX_SMALL=$s; done
if [[ $MAX_SMALL -gt 0 ]]; then
  echo "== generating $MAX_SMALL small files" >&2
  rm -rf "$WORK/small"
  "$PY" "$TOOL" gen-small "$WORK/small" "$MAX_SMALL" >&2
  for s in "${SIZE_LIST[@]}"; do measure small "$WORK/small" "$s"; done
fi
if [[ $LARGE -gt 0 ]]; then
  echo "== generating $LARGE files of $LARGE_MIB MiB" >&2
  rm -rf "$WORK/large"
  "$PY" "$TOOL" gen-large "$WORK/large" "$LARGE" "$LARGE_MIB" >&2
  measure large "$WORK/large" "$LARGE"
fi

# The table: seconds per set and size, files per second, and the ratios.
"$PY" - "$RESULTS" "$REPO/docs/bench/add_files.json" <<'EOF'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault((r["set"], r["n"]), {})[r["result"]["mode"]] = r["result"]["seconds"]
# footers: a blocking task per file; footers/8: eight files a task, as AddFiles reads them.
print(f"{'set':<6} {'files':>7} {'footers s':>10} {'footers/8 s':>12} {'outflow s':>10} {'pyiceberg s':>12} {'outflow files/s':>16} {'vs pyiceberg':>13} {'vs footers':>11} {'vs footers/8':>13}")
for (kind, n), m in sorted(rows.items()):
    f, f8, o, p = m.get("footers"), m.get("footers-runs"), m.get("add"), m.get("pyiceberg")
    speed = f"{n / o:,.0f}" if o else "-"
    vs_py = f"{p / o:.1f}x" if o and p else "-"
    vs_f = f"{o / f:.2f}x" if o and f else "-"
    vs_f8 = f"{o / f8:.2f}x" if o and f8 else "-"
    print(f"{kind:<6} {n:>7} {f or '-':>10} {f8 or '-':>12} {o or '-':>10} {p or '-':>12} {speed:>16} {vs_py:>13} {vs_f:>11} {vs_f8:>13}")

# The chart's data (docs/bench/add_files.json): the largest small-file set measured.
small = sorted(n for kind, n in rows if kind == "small")
if small:
    n = small[-1]
    m = rows[("small", n)]
    names = {"add": "outflow", "pyiceberg": "pyiceberg", "footers": "bare footer reads",
             "footers-runs": "bare footer reads, 8 a task"}
    peers = [{"peer": names[k], "files": n, "seconds": m[k], "files_per_s": round(n / m[k])}
             for k in ("add", "pyiceberg", "footers", "footers-runs") if m.get(k)]
    with open(sys.argv[2], "w") as out:
        json.dump({"title": f"Iceberg AddFiles, {n:,} small Parquet files", "unit": "files/s",
                   "peers": peers}, out, indent=1)
EOF
"$PY" "$HERE/charts.py"
