#!/usr/bin/env bash
# Benchmark: 1 million rows of 5 columns written into Google's Bigtable emulator through
# Outflow (release build of crates/outflow-bigtable/examples/bigtable_bench.rs), Google's
# Python client (MutationsBatcher, scripts/bench/bigtable_python.py), Google's Go client
# (ApplyBulk, scripts/bench/bigtable-go) and `cbt import` (4 workers, 500 rows a request)
# of the same rows from a CSV file written beforehand.
#
#   scripts/bench/bigtable.sh            # ROWS=1000000 by default
#   ROWS=100000 RUNS=3 WRITERS="outflow go" scripts/bench/bigtable.sh
#   OUTFLOW_ARGS="--max-entries 1000 --outstanding 8" WRITERS=outflow scripts/bench/bigtable.sh
#   WRITERS="outflow:1000:4 outflow:10000:4 go" RUNS=3 scripts/bench/bigtable.sh   # shapes side by side
#
# OUTFLOW_ARGS, GO_ARGS and CBT_ARGS are added to those writers' command lines (Outflow's
# batching flags, Go's -batch/-workers, cbt's workers=/batch-size=), for sweeps.
#
# Each writer gets a fresh emulator of its own (it keeps everything in memory, so a used one
# would be bigger and slower) on a free loopback port, and a table with family `cf`. For each
# writer it prints the rows per second (rows over the writer's own timed loop), the writer's
# peak RSS and CPU time (/usr/bin/time -v), and the emulator's CPU time over the run (from
# /proc), then the ratios. Results also go to .cache/bench/bigtable-results.md. Every
# emulator is stopped by its PID on exit.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="$REPO/.cache"
BENCH="$CACHE/bench"
RUN="$BENCH/bigtable-run"
ROWS="${ROWS:-1000000}"
RUNS="${RUNS:-1}"
WRITERS="${WRITERS:-outflow python go cbt}"
OUTFLOW_ARGS="${OUTFLOW_ARGS:-}"
GO_ARGS="${GO_ARGS:-}"
CBT_ARGS="${CBT_ARGS:-workers=4 batch-size=500}"
PROJECT=bench
INSTANCE=bench
TABLE=bench
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
CLK_TCK="$(getconf CLK_TCK)"

die() { echo "bigtable.sh: $*" >&2; exit 1; }
log() { echo "bigtable.sh: $*" >&2; }

mkdir -p "$RUN"
command -v cbt >/dev/null || die "cbt not found (Debian package google-cloud-cli-cbt)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (Debian package time)"
EMULATOR="$(dpkg -L google-cloud-cli-bigtable-emulator 2>/dev/null | grep 'cbtemulator$' | head -n 1 || true)"
[[ -x "$EMULATOR" ]] || die "cbtemulator not found (Debian package google-cloud-cli-bigtable-emulator)"

# ---------------------------------------------------------------- the three writers
log "building the Outflow writer (release)"
(cd "$REPO" && cargo build --quiet --release -p outflow-bigtable --example bigtable_bench)
OUTFLOW_BIN="$TARGET/release/examples/bigtable_bench"

log "building the Go writer"
export GOPATH="$CACHE/go" GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS=-mod=mod
(cd "$REPO/scripts/bench/bigtable-go" && go build -o "$BENCH/bigtable-go" .)
GO_BIN="$BENCH/bigtable-go"

log "installing the Python client"
"$REPO/scripts/setup/readers.sh" >/dev/null
PYTHON="$CACHE/venv-readers/bin/python"
"$PYTHON" -c 'import google.cloud.bigtable' || die "google-cloud-bigtable is missing from $CACHE/venv-readers"

# cbt import reads a CSV file: the same rows, written once before any run (not timed). The
# family row, then the qualifiers, then a key and five cells each, every cell at the one
# timestamp the other writers use (value@micros, read with timestamp=value-encoded).
CSV="$RUN/import-$ROWS.csv"
if [[ " $WRITERS " == *" cbt "* && ! -s "$CSV" ]]; then
    log "writing $ROWS rows of CSV for cbt import"
    awk -v rows="$ROWS" 'BEGIN {
        print ",cf,,,,"; print ",c0,c1,c2,c3,c4"
        for (i = 0; i < rows; i++) {
            printf "user%08d", i
            for (c = 0; c < 5; c++) printf ",v%d-%012d@1700000000000000", c, i
            printf "\n"
        }
    }' >"$CSV.part"
    mv "$CSV.part" "$CSV"
fi

# cbt import prints no timing: its wall time, the CSV's parsing included, as JSON.
cbt_import() {
    local started ended
    started="$(date +%s.%N)"
    # shellcheck disable=SC2086
    cbt -project "$PROJECT" -instance "$INSTANCE" import "$TABLE" "$CSV" timestamp=value-encoded $CBT_ARGS >&2
    ended="$(date +%s.%N)"
    awk -v a="$started" -v b="$ended" -v rows="$ROWS" 'BEGIN {printf "{\"writer\":\"cbt\",\"rows\":%d,\"seconds\":%.3f}\n", rows, b - a}'
}

# ---------------------------------------------------------------- a private emulator
EMULATOR_PID=""
EMULATOR_PORT=""

port_answers() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

start_emulator() {
    local port i
    for i in $(seq 1 20); do
        port=$((20000 + RANDOM % 40000))
        port_answers "$port" && continue
        setsid "$EMULATOR" -host 127.0.0.1 -port "$port" </dev/null >"$RUN/emulator.log" 2>&1 &
        EMULATOR_PID=$!
        for _ in $(seq 1 300); do
            if port_answers "$port"; then
                EMULATOR_PORT=$port
                return 0
            fi
            kill -0 "$EMULATOR_PID" 2>/dev/null || break
            sleep 0.1
        done
        stop_emulator
    done
    die "could not start cbtemulator"
}

stop_emulator() {
    [[ -n "$EMULATOR_PID" ]] || return 0
    kill -TERM -- "-$EMULATOR_PID" 2>/dev/null || kill -TERM "$EMULATOR_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$EMULATOR_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL -- "-$EMULATOR_PID" 2>/dev/null || true
    wait "$EMULATOR_PID" 2>/dev/null || true
    EMULATOR_PID=""
}
trap stop_emulator EXIT

# utime + stime of a process, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# ---------------------------------------------------------------- runs
RESULTS="$RUN/results.tsv"
: >"$RESULTS"

run_writer() {
    local writer="$1" run="$2" before after seconds rss user sys count
    start_emulator
    export BIGTABLE_EMULATOR_HOST="127.0.0.1:$EMULATOR_PORT"
    cbt -project "$PROJECT" -instance "$INSTANCE" createtable "$TABLE" 2>/dev/null
    cbt -project "$PROJECT" -instance "$INSTANCE" createfamily "$TABLE" cf 2>/dev/null
    local cmd
    case "$writer" in
        # shellcheck disable=SC2206
        outflow) cmd=("$OUTFLOW_BIN" --project "$PROJECT" --instance "$INSTANCE" --table "$TABLE" --rows "$ROWS" $OUTFLOW_ARGS) ;;
        # outflow:E:O, Outflow with E entries a request and O requests in flight.
        outflow:*:*)
            local shape="${writer#outflow:}"
            cmd=("$OUTFLOW_BIN" --project "$PROJECT" --instance "$INSTANCE" --table "$TABLE" --rows "$ROWS"
                --max-entries "${shape%%:*}" --outstanding "${shape#*:}") ;;
        python) cmd=("$PYTHON" "$REPO/scripts/bench/bigtable_python.py" --project "$PROJECT" --instance "$INSTANCE" --table "$TABLE" --rows "$ROWS") ;;
        # shellcheck disable=SC2206
        go) cmd=("$GO_BIN" -project "$PROJECT" -instance "$INSTANCE" -table "$TABLE" -rows "$ROWS" $GO_ARGS) ;;
        cbt) cmd=(bash -c "$(declare -f cbt_import); $(declare -p PROJECT INSTANCE TABLE CSV CBT_ARGS ROWS); cbt_import") ;;
    esac
    log "run $run: $writer"
    before="$(cpu_ticks "$EMULATOR_PID")"
    /usr/bin/time -v -o "$RUN/$writer.time" "${cmd[@]}" >"$RUN/$writer.json"
    after="$(cpu_ticks "$EMULATOR_PID")"
    count="$(cbt -project "$PROJECT" -instance "$INSTANCE" count "$TABLE" 2>/dev/null | tr -d '[:space:]')"
    stop_emulator
    [[ "$count" == "$ROWS" ]] || die "$writer: the table holds $count rows, not $ROWS"
    seconds="$(sed -E 's/.*"seconds": ?([0-9.]+).*/\1/' "$RUN/$writer.json")"
    rss="$(awk -F': ' '/Maximum resident set size/ {print $2}' "$RUN/$writer.time")"
    user="$(awk -F': ' '/User time/ {print $2}' "$RUN/$writer.time")"
    sys="$(awk -F': ' '/System time/ {print $2}' "$RUN/$writer.time")"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$writer" "$run" "$seconds" "$rss" "$user" "$sys" \
        "$(awk -v t="$((after - before))" -v hz="$CLK_TCK" 'BEGIN {printf "%.2f", t / hz}')" >>"$RESULTS"
}

for run in $(seq 1 "$RUNS"); do
    for writer in $WRITERS; do
        run_writer "$writer" "$run"
    done
done

# ---------------------------------------------------------------- report
REPORT="$BENCH/bigtable-results.md"
awk -F'\t' -v rows="$ROWS" -v load="$(cut -d' ' -f1-3 /proc/loadavg)" '
    {
        rate = rows / $3
        printf "| %s | %s | %.2f | %.0f | %.0f | %.2f | %.2f | %.0f%% |\n", $1, $2, $3, rate, $4 / 1024, $5 + $6, $7, 100 * $7 / $3
        if (!($1 in best) || rate > best[$1]) best[$1] = rate
    }
    END {
        printf "\nBest rows/s:"
        for (w in best) printf " %s %.0f", w, best[w]
        printf "\n"
        if (best["go"] > 0 && best["outflow"] > 0) printf "Outflow / Go: %.2fx\n", best["outflow"] / best["go"]
        if (best["cbt"] > 0 && best["outflow"] > 0) printf "Outflow / cbt import: %.2fx\n", best["outflow"] / best["cbt"]
        if (best["python"] > 0 && best["outflow"] > 0) printf "Outflow / Python: %.2fx\n", best["outflow"] / best["python"]
        printf "(%d rows x 5 columns; load average before the report: %s)\n", rows, load
    }
' "$RESULTS" >"$RUN/body.md"
{
    echo "| writer | run | seconds | rows/s | writer peak RSS (MiB) | writer CPU (s) | emulator CPU (s) | emulator CPU / writer seconds |"
    echo "|---|---|---|---|---|---|---|---|"
    cat "$RUN/body.md"
} | tee "$REPORT"

# The chart's data (docs/bench/bigtable.json): each writer's median run.
python3 - "$RESULTS" "$ROWS" "$REPO/docs/bench/bigtable.json" <<'PYEOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    writer, _, seconds, rss_kib, *_ = line.rstrip("\n").split("\t")
    runs.setdefault(writer, []).append((float(seconds), float(rss_kib)))
rows = int(sys.argv[2])
peers = []
for writer in sorted(runs, key=lambda w: (not w.startswith("outflow"), w)):
    seconds = statistics.median(s for s, _ in runs[writer])
    peers.append({"peer": writer, "runs": len(runs[writer]), "seconds": seconds,
                  "rows_per_s": round(rows / seconds),
                  "peak_rss_mib": round(max(r for _, r in runs[writer]) / 1024, 1)})
# Medians and ranges, and Outflow's ratio to each peer median against median.
rate = {w: sorted(rows / s for s, _ in r) for w, r in runs.items()}
for w, rs in rate.items():
    print(f"{w}: median {statistics.median(rs):,.0f} rows/s (range {rs[0]:,.0f} to {rs[-1]:,.0f}, {len(rs)} runs)")
for o in (w for w in rate if w.startswith("outflow")):
    for w in (w for w in rate if not w.startswith("outflow")):
        print(f"{o} / {w}: {statistics.median(rate[o]) / statistics.median(rate[w]):.2f}x (medians)")
with open(sys.argv[3], "w") as out:
    json.dump({"title": f"Bigtable MutateRows (emulator), {rows:,} rows x 5 columns, median run",
               "unit": "rows/s", "peers": peers}, out, indent=1)
PYEOF
python3 "$REPO/scripts/bench/charts.py"
