#!/usr/bin/env bash
# A bounded fuzz run of Iceberg AddFiles (not part of CI): mutated Parquet footers through
# footer reading, schema and statistics extraction, planning, metrics and partition
# inference, and random schema windows through the planner. Nothing may panic or hang;
# every rejected file must come back as a typed per-file error.
#
#   scripts/fuzz/add_files.sh [SECONDS] [SEED]      (default 600 s, a seed from the clock)
#
# It is a seeded random mutation run (no coverage guidance, so no nightly toolchain), built
# in release. The report is printed and kept in target/fuzz-add-files/report.txt with any
# failing input beside it; the exit code is non-zero when something panicked or hung.
# A saved input runs again with
#   OUTFLOW_FUZZ_REPLAY=$PWD/target/fuzz-add-files/panic-<case>.parquet \
#     cargo test -p outflow-iceberg --lib add_files::fuzz::fuzz_replay -- --ignored --nocapture
# The harness is crates/outflow-iceberg/src/add_files/fuzz.rs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
export OUTFLOW_FUZZ_SECONDS="${1:-600}"
if [[ -n "${2:-}" ]]; then export OUTFLOW_FUZZ_SEED="$2"; fi
cd "$REPO"
cargo test --release -p outflow-iceberg --lib add_files::fuzz -- --ignored --nocapture --test-threads 1
