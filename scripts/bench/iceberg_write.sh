#!/usr/bin/env bash
# Iceberg write benchmark (issue 3): Outflow's sink vs PyIceberg's append vs a bare
# parquet-rs ArrowWriter, on the same generated rows (ROWS, default 5,000,000).
#
#   scripts/bench/iceberg_write.sh [--s3]
#
# --s3: both Iceberg writers write their tables to the SeaweedFS store the test script
# runs (started here when it is not running); the bare writer stays on the local disk.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
scripts/setup/readers.sh >/dev/null
# shellcheck disable=SC1091
source .cache/run/readers.env
if [[ "${1:-}" == "--s3" ]]; then
  # shellcheck disable=SC1091
  source scripts/bench/seaweedfs.sh
  use_seaweedfs "$REPO"
  export OUTFLOW_BENCH_WAREHOUSE="s3://$OUTFLOW_S3_BUCKET/bench-write-$(date +%s)"
fi

cargo bench -p outflow-iceberg --bench write --no-run --quiet 2>/dev/null
bin=$(ls -t target/release/deps/write-* | grep -v '\.d$' | head -n 1)
"$OUTFLOW_PYTHON" scripts/bench/iceberg_write.py "$bin" "$OUTFLOW_PYTHON"
