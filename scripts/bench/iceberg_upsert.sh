#!/usr/bin/env bash
# The cost of upsert mode (issue 21): the same generated rows applied as change data and
# appended, through Outflow's Iceberg sink, then what Java Iceberg pays to read the table
# of changes before and after compaction applies its deletes.
#
#   scripts/bench/iceberg_upsert.sh [CHANGES=1000000] [KEYS=100000] [FLUSH_BATCHES=2]
#
# Both tables commit every FLUSH_BATCHES batches of 65,536 rows (so 8 commits at the
# defaults), in fresh SQLite-catalog tables under .cache/bench/upsert. Java Iceberg's read is
# timed as a whole process (`read`, which prints every row as JSON), started cold each time.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
CHANGES=${1:-1000000}
KEYS=${2:-100000}
FLUSH=${3:-2}
scripts/setup/readers.sh >/dev/null
# shellcheck disable=SC1091
source .cache/run/readers.env
WORK="$REPO/.cache/bench/upsert"
rm -rf "$WORK"
mkdir -p "$WORK"

cargo bench -p outflow-iceberg --bench upsert --no-run --quiet 2>/dev/null
bin=$(ls -t target/release/deps/upsert-* | grep -v '\.d$' | head -n 1)

java_read() {
  local started ended rows
  started=$(date +%s.%N)
  rows=$(java -jar "$OUTFLOW_JAVA_READER_JAR" read --catalog-type sql --catalog-name outflow \
    --uri "sqlite:///$WORK/catalog.db" --warehouse "file://$WORK/warehouse" --table "$1" |
    "$OUTFLOW_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["row_count"])')
  ended=$(date +%s.%N)
  printf '{"java_read": "%s", "when": "%s", "rows": %s, "seconds": %.2f}\n' \
    "$1" "$2" "$rows" "$(echo "$ended - $started" | bc)"
}

"$bin" --bench write "$CHANGES" "$KEYS" "$FLUSH" "$WORK"
java_read bench.appended "appended"
java_read bench.upserted "before compaction"
"$bin" --bench compact "$WORK" bench.upserted
java_read bench.upserted "after compaction"
