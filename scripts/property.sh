#!/usr/bin/env bash
# Runs issue 14's end-to-end property (crates/outflow-iceberg/tests/it/evolution_property.rs:
# what the evolution planner accepts, the Iceberg sink writes and PyIceberg reads back
# exactly) with many more cases than the normal test run, within a time budget, and prints
# how many cases ran. The budget is checked between runs of 25 cases; a failure's shrinking
# takes at most 10 more minutes, and the whole command is killed after budget + 20 minutes.
#
# Usage: scripts/property.sh [CASES [SECONDS]]   (defaults: 500 cases, 900 s)
# A failure's minimal case is printed and saved in
# crates/outflow-iceberg/proptest-regressions/evolution_property.txt (replayed first next time).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
CASES="${1:-${OUTFLOW_PROPERTY_CASES:-500}}"
BUDGET="${2:-${OUTFLOW_PROPERTY_SECONDS:-900}}"
[[ "$CASES" =~ ^[0-9]+$ && "$BUDGET" =~ ^[0-9]+$ ]] || {
  echo "property.sh: CASES and SECONDS must be whole numbers" >&2
  exit 2
}

# The test reads PyIceberg's location from .cache/run/readers.env.
[[ -f .cache/run/readers.env ]] || scripts/setup/readers.sh

# Build first, so that the budget is spent on cases.
cargo test -p outflow-iceberg --test it --no-run

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
start=$(date +%s)
status=0
OUTFLOW_PROPERTY_CASES="$CASES" OUTFLOW_PROPERTY_SECONDS="$BUDGET" \
  timeout --kill-after=30 "$((BUDGET + 1200))" \
  cargo test -p outflow-iceberg --test it evolution_property:: -- --nocapture 2>&1 | tee "$log" || status=$?
wall=$(($(date +%s) - start))

summary="$(grep -m1 '^evolution property:' "$log" || true)"
if [[ $status -ne 0 || -z "$summary" ]]; then
  echo "property.sh: FAILED after ${wall} s (exit $status); the minimal case is above" >&2
  exit 1
fi
echo "property.sh: ${summary#evolution property: } (asked for $CASES within $BUDGET s; ${wall} s wall)"
