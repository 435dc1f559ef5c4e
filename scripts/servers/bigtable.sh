#!/usr/bin/env bash
# Google's Cloud Bigtable emulator (cbtemulator) on 127.0.0.1, for Outflow's tests.
#
#   scripts/servers/bigtable.sh start    start it (or reuse the one already running)
#   scripts/servers/bigtable.sh stop     stop it by the PID saved at start
#   scripts/servers/bigtable.sh status   exit 0 when the saved PID is alive and its port answers
#
# `start` writes .cache/run/bigtable.env with `export BIGTABLE_EMULATOR_HOST=127.0.0.1:PORT`.
# The port is 8086 when free, else a free one; BIGTABLE_EMULATOR_PORT picks one explicitly.
# The emulator keeps everything in memory: stopping it loses every table.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RUN="$REPO/.cache/run"
PID_FILE="$RUN/bigtable.pid"
ENV_FILE="$RUN/bigtable.env"
PORT_FILE="$RUN/bigtable.port"
LOG_FILE="$RUN/bigtable.log"
PACKAGE=google-cloud-cli-bigtable-emulator
START_TIMEOUT_S=60

# shellcheck source=../lib/server.sh
source "$REPO/scripts/lib/server.sh"

die() { echo "bigtable.sh: $*" >&2; exit 1; }

find_emulator() {
    local path
    path="$(dpkg -L "$PACKAGE" 2>/dev/null | grep 'cbtemulator$' | head -n 1 || true)"
    [[ -n "$path" && -x "$path" ]] || die "cbtemulator not found: the Debian package $PACKAGE is not installed (it provides cbtemulator and cbt)"
    echo "$path"
}

# Candidate ports: the explicit one only, or 8086 then random high ports.
candidate_ports() {
    if [[ -n "${BIGTABLE_EMULATOR_PORT:-}" ]]; then
        echo "$BIGTABLE_EMULATOR_PORT"
        return
    fi
    echo 8086
    local i
    for i in $(seq 1 20); do
        echo $((20000 + RANDOM % 40000))
    done
}

# Starts the emulator on port $2; prints nothing, returns 0 once the port answers, 1 when the
# process died (most likely the port was taken between the check and the bind).
launch_on() {
    local emulator="$1" port="$2" pid deadline
    # A simple command in the background, so that $! is the emulator itself (setsid execs it).
    (
        cd "$RUN"
        setsid "$emulator" -host 127.0.0.1 -port "$port" </dev/null >"$LOG_FILE" 2>&1 &
        echo $! >"$PID_FILE.tmp"
    )
    pid="$(cat "$PID_FILE.tmp")"
    rm -f "$PID_FILE.tmp"
    deadline=$((SECONDS + START_TIMEOUT_S))
    while ((SECONDS < deadline)); do
        if ! pid_alive "$pid"; then
            return 1
        fi
        if port_answers "$port" && grep -q 'running on' "$LOG_FILE" 2>/dev/null; then
            echo "$pid" >"$PID_FILE"
            return 0
        fi
        sleep 0.1
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    die "cbtemulator (pid $pid) did not answer on 127.0.0.1:$port within ${START_TIMEOUT_S}s; log: $LOG_FILE"
}

start() {
    mkdir -p "$RUN"
    local pid port emulator
    pid="$(saved_pid)"
    if pid_alive "$pid" && [[ -f "$PORT_FILE" ]] && port_answers "$(cat "$PORT_FILE")"; then
        echo "bigtable: already running (pid $pid) on 127.0.0.1:$(cat "$PORT_FILE")"
        return 0
    fi
    rm -f "$PID_FILE" "$ENV_FILE" "$PORT_FILE"
    emulator="$(find_emulator)"
    for port in $(candidate_ports); do
        if port_answers "$port"; then
            continue
        fi
        if launch_on "$emulator" "$port"; then
            echo "$port" >"$PORT_FILE"
            echo "export BIGTABLE_EMULATOR_HOST=127.0.0.1:$port" >"$ENV_FILE"
            echo "bigtable: cbtemulator running (pid $(saved_pid)) on 127.0.0.1:$port; env in $ENV_FILE"
            return 0
        fi
    done
    die "could not start cbtemulator on any candidate port; last log: $LOG_FILE: $(tail -n 3 "$LOG_FILE" 2>/dev/null)"
}

stop() {
    local pid
    pid="$(saved_pid)"
    if ! pid_alive "$pid"; then
        rm -f "$PID_FILE" "$ENV_FILE" "$PORT_FILE"
        echo "bigtable: not running"
        return 0
    fi
    stop_group "$pid"
    rm -f "$PID_FILE" "$ENV_FILE" "$PORT_FILE"
    echo "bigtable: stopped (pid $pid)"
}

status() {
    local pid
    pid="$(saved_pid)"
    if pid_alive "$pid" && [[ -f "$PORT_FILE" ]] && port_answers "$(cat "$PORT_FILE")"; then
        echo "bigtable: running (pid $pid) on 127.0.0.1:$(cat "$PORT_FILE")"
        return 0
    fi
    echo "bigtable: not running"
    return 1
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 start|stop|status" ;;
esac
