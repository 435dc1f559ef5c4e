#!/usr/bin/env bash
# Iceberg write benchmark (issue 3): Outflow's sink vs PyIceberg's append vs a bare
# parquet-rs ArrowWriter, on the same generated rows (ROWS, default 5,000,000).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
scripts/setup/readers.sh >/dev/null
# shellcheck disable=SC1091
source .cache/run/readers.env

cargo bench -p outflow-iceberg --bench write --no-run --quiet 2>/dev/null
bin=$(ls -t target/release/deps/write-* | grep -v '\.d$' | head -n 1)
exec "$OUTFLOW_PYTHON" scripts/bench/iceberg_write.py "$bin" "$OUTFLOW_PYTHON"
