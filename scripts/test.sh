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
# test builds and runs. Clippy lints the workspace's crates inside the one build of the tests
# (clippy-driver as the workspace's compiler), so dependencies compile once, not twice; the
# readers and servers are set up in the background meanwhile.
#
# Environment: OUTFLOW_SKIP_LINT=1 skips fmt and clippy; RUST_TEST_THREADS (default 3) sets
# how many tests of one binary run at once; extra arguments go to `cargo test`,
# so `scripts/test.sh NAME` runs the tests whose name contains NAME against the real servers.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
mkdir -p .cache/run
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# Incremental caches pay off when one crate is rebuilt again and again; this command builds
# every crate of the workspace and its tests, so writing the caches (gigabytes) costs more
# than they save, most of all on a fresh clone.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# Three tests at a time in each test binary, not one per core: many tests wait on a server
# (an emulator, a store's retries, a race that runs for seconds) with the cores idle. With
# the build done, the tests took about 300 s two at a time, 260 s three and 262 s
# four at a time (on 2 cores).
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-3}
started_at=$(date +%s)

log() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - started_at ))"; }

setups=()
for setup in scripts/setup/*.sh; do
    [ -e "$setup" ] && setups+=("$(basename "$setup" .sh)")
done
servers=()
for server in scripts/servers/*.sh; do
    [ -e "$server" ] && servers+=("$(basename "$server" .sh)")
done
prepare_pid=
stop_servers() {
    if [ -n "$prepare_pid" ]; then
        pkill -TERM -P "$prepare_pid" 2>/dev/null || true
        kill "$prepare_pid" 2>/dev/null || true
        wait "$prepare_pid" 2>/dev/null || true
    fi
    for s in "${servers[@]}"; do
        scripts/servers/"$s".sh stop || true
    done
}
trap stop_servers EXIT

# The readers and servers: installed (first time) and started, one after the other.
prepare() {
    for setup in "${setups[@]}"; do
        log "setup $setup"
        scripts/setup/"$setup".sh
    done
    for s in "${servers[@]}"; do
        log "starting $s"
        scripts/servers/"$s".sh start
    done
}

if [ "${OUTFLOW_SKIP_LINT:-0}" != 1 ]; then
    log "cargo fmt --check"
    cargo fmt --all --check
    # What `cargo clippy -- -D warnings` does, in a build that also makes the test binaries.
    RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
    export RUSTC_WORKSPACE_WRAPPER
    export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi

log "setting up readers and servers in the background (.cache/run/prepare.log)"
prepare > .cache/run/prepare.log 2>&1 &
prepare_pid=$!

log "building tests (with clippy)"
cargo test --workspace --all-targets --all-features --no-run --quiet

log "waiting for readers and servers"
if ! wait "$prepare_pid"; then
    prepare_pid=
    cat .cache/run/prepare.log
    echo "test.sh: setting up readers or servers failed (log above)" >&2
    exit 1
fi
prepare_pid=
cat .cache/run/prepare.log
for name in "${setups[@]}" "${servers[@]}"; do
    [ -f ".cache/run/$name.env" ] || continue
    # shellcheck disable=SC1090
    source ".cache/run/$name.env"
done
export OUTFLOW_REQUIRE_SERVERS=1

log "cargo test --workspace"
cargo test --workspace --all-targets --all-features --no-fail-fast "$@"
cargo test --workspace --all-features --doc --quiet "$@"
log "all tests passed"
