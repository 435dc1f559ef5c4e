#!/usr/bin/env bash
# Runs every check and test of the workspace, against real local servers.
#
# On a fresh machine this installs what the tests need (Python venvs for the independent
# readers, the Java reader, the emulators), starts each server on 127.0.0.1, runs lint and
# `cargo test --workspace`, and stops the servers by PID on exit. `.ci/run` calls it as is.
#
# Each server has a script `scripts/servers/NAME.sh start|stop` that writes the variables
# tests read (endpoints) to `.cache/run/NAME.env`. OUTFLOW_REQUIRE_SERVERS=1 tells the
# integration tests that the servers are up, so one that cannot reach its server fails.
#
# Every Cargo feature is on (each sink, the DataFusion engine, the Ballista client), so every
# test builds and runs.
#
# Environment: OUTFLOW_SKIP_LINT=1 skips fmt and clippy; extra arguments go to `cargo test`,
# so `scripts/test.sh NAME` runs the tests whose name contains NAME against the real servers.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
mkdir -p .cache/run
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
started_at=$(date +%s)

log() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - started_at ))"; }

servers=()
stop_servers() {
    for s in "${servers[@]}"; do
        scripts/servers/"$s".sh stop || true
    done
}
trap stop_servers EXIT

if [ "${OUTFLOW_SKIP_LINT:-0}" != 1 ]; then
    log "cargo fmt --check"
    cargo fmt --all --check
    log "cargo clippy"
    cargo clippy --workspace --all-targets --all-features --quiet -- -D warnings
fi

log "building tests"
cargo test --workspace --all-targets --all-features --no-run --quiet

for setup in scripts/setup/*.sh; do
    [ -e "$setup" ] || continue
    name=$(basename "$setup" .sh)
    log "setup $name"
    "$setup"
    if [ -f ".cache/run/$name.env" ]; then
        # shellcheck disable=SC1090
        source ".cache/run/$name.env"
    fi
done

for server in scripts/servers/*.sh; do
    [ -e "$server" ] || continue
    name=$(basename "$server" .sh)
    log "starting $name"
    servers+=("$name")
    "$server" start
    # shellcheck disable=SC1090
    source ".cache/run/$name.env"
done
export OUTFLOW_REQUIRE_SERVERS=1

log "cargo test --workspace"
cargo test --workspace --all-targets --all-features --no-fail-fast "$@"
cargo test --workspace --all-features --doc --quiet "$@"
if [ $# -eq 0 ]; then
    log "an outflow with the Iceberg sink only"
    cargo test -p outflow-cli --no-default-features --features iceberg --test features
fi
log "all tests passed"
