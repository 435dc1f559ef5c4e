#!/usr/bin/env bash
# Start or stop the local-bigquery emulator (REST + Storage Read/Write gRPC on DuckDB) for tests.
#
#   scripts/servers/bigquery.sh start   # install if needed, start, write .cache/run/bigquery.env
#   scripts/servers/bigquery.sh stop    # stop the server by its saved PID, remove its data dir
#   scripts/servers/bigquery.sh install # only create/refresh the Python venv
#
# The venv lives in .cache/venv-bq (Python 3.13, every package pinned in
# bigquery-requirements.txt). DuckDB's extensions come from wheels and are installed into
# .cache/venv-bq/duckdb-home (the server runs with HOME pointing there), so nothing is
# downloaded at run time and nothing is written to the real home directory.
#
# Environment knobs: OUTFLOW_PYTHON313 (a Python >= 3.13 interpreter),
# OUTFLOW_BIGQUERY_WAIT_SECS (readiness deadline, default 60), OUTFLOW_BIGQUERY_INSTANCE
# (default "bigquery": the name of the pid, env, log and data-dir files under .cache/run, so
# a benchmark can run its own emulator next to the tests' one).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="$REPO/.cache"
VENV="$CACHE/venv-bq"
RUN="$CACHE/run"
REQS="$HERE/bigquery-requirements.txt"
INSTANCE="${OUTFLOW_BIGQUERY_INSTANCE:-bigquery}"
[[ "$INSTANCE" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "bigquery.sh: bad OUTFLOW_BIGQUERY_INSTANCE" >&2; exit 1; }
PIDFILE="$RUN/$INSTANCE.pid"
ENVFILE="$RUN/$INSTANCE.env"
DIRFILE="$RUN/$INSTANCE.datadir"
LOG="$RUN/$INSTANCE.log"
DUCKDB_HOME="$VENV/duckdb-home"
PROJECT="test-project"
WAIT_SECS="${OUTFLOW_BIGQUERY_WAIT_SECS:-60}"

die() { echo "bigquery.sh: $*" >&2; exit 1; }
# shellcheck source=../lib/python.sh
source "$REPO/scripts/lib/python.sh"
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

find_python() {
    local candidates=()
    [[ -n "${OUTFLOW_PYTHON313:-}" ]] && candidates+=("$OUTFLOW_PYTHON313")
    local roots=("${PYENV_ROOT:-}" "$HOME/.pyenv")
    if command -v pyenv >/dev/null 2>&1; then
        roots+=("$(pyenv root 2>/dev/null || true)")
    fi
    local root p
    for root in "${roots[@]}"; do
        [[ -n "$root" && -d "$root/versions" ]] || continue
        for p in "$root"/versions/3.13*/bin/python "$root"/versions/3.1[4-9]*/bin/python; do
            [[ -x "$p" ]] && candidates+=("$p")
        done
    done
    local name
    for name in python3.13 python3.14 python3; do
        command -v "$name" >/dev/null 2>&1 && candidates+=("$(command -v "$name")")
    done
    local c
    for c in "${candidates[@]}"; do
        if "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 13) else 1)' 2>/dev/null; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

stamp_value() {
    # Changes whenever the pins, the interpreter or this script's install recipe change.
    { cat "$REQS"; echo "python=$1"; echo "recipe=4"; } | sha256sum | cut -d' ' -f1
}

install() {
    [[ -f "$REQS" ]] || die "missing $REQS"
    local py
    py="$(find_python)" || die "no Python >= 3.13 found (tried OUTFLOW_PYTHON313, pyenv versions 3.13*, python3.13); install one or set OUTFLOW_PYTHON313"
    local want
    want="$(stamp_value "$py")"
    if [[ -f "$VENV/.outflow-stamp" && "$(cat "$VENV/.outflow-stamp")" == "$want" \
          && -x "$VENV/bin/local-bigquery" ]]; then
        return 0
    fi
    local t0
    t0="$(now)"
    echo "bigquery.sh: installing the emulator venv into $VENV (python: $py)" >&2
    rm -rf "$VENV"
    mkdir -p "$CACHE"
    "$py" -m venv "$VENV" || die "python -m venv failed"
    # --no-compile: modules are compiled once, as the server and the reader first import
    # them, and kept (keep_bytecode, scripts/lib/python.sh).
    keep_bytecode "$VENV" || die "no site-packages in $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-compile \
        --no-deps -r "$REQS" || die "pip install failed (see the output above)"
    mkdir -p "$DUCKDB_HOME"
    HOME="$DUCKDB_HOME" "$VENV/bin/python" -c '
from duckdb_extensions import import_extension
for name in ("icu", "ducklake", "spatial"):
    import_extension(name)
' || die "installing the DuckDB extensions from their wheels failed"
    local ext
    for ext in icu ducklake spatial; do
        compgen -G "$DUCKDB_HOME/.duckdb/extensions/*/*/$ext.duckdb_extension" >/dev/null \
            || die "DuckDB extension $ext missing under $DUCKDB_HOME after install"
    done
    "$VENV/bin/python" -c 'import local_bigquery, google.cloud.bigquery, google.cloud.bigquery_storage_v1' \
        || die "the emulator venv does not import"
    echo "$want" >"$VENV/.outflow-stamp"
    echo "bigquery.sh: venv installed in $(elapsed "$t0") s" >&2
}

pid_alive() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

pick_ports() {
    # Prints "REST GRPC": 9050/9060 when both are free, otherwise two free ephemeral ports.
    "$VENV/bin/python" - <<'EOF'
import socket

def free(port):
    with socket.socket() as s:
        # The servers set SO_REUSEADDR too: a port in TIME_WAIT is free for them.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False

if free(9050) and free(9060):
    print(9050, 9060)
else:
    socks = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    print(*(s.getsockname()[1] for s in socks))
    for s in socks:
        s.close()
EOF
}

probe() {
    # Exit 0 when both the REST and the gRPC port answer.
    "$VENV/bin/python" - "$1" "$2" "$PROJECT" <<'EOF'
import sys
import urllib.request

import grpc

rest, grpc_port, project = sys.argv[1:]
url = f"http://127.0.0.1:{rest}/bigquery/v2/projects/{project}/datasets"
with urllib.request.urlopen(url, timeout=2) as response:
    if response.status != 200:
        sys.exit(1)
with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
    call = channel.unary_unary(
        "/google.cloud.bigquery.storage.v1.BigQueryWrite/GetWriteStream",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    try:
        call(b"", timeout=2)
    except grpc.RpcError as error:
        # Any status from the servicer (INVALID_ARGUMENT for the empty name) means it answers.
        if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            sys.exit(1)
EOF
}

start() {
    local t_total
    t_total="$(now)"
    install
    mkdir -p "$RUN"
    if pid_alive && [[ -f "$ENVFILE" ]]; then
        echo "bigquery.sh: already running (pid $(cat "$PIDFILE")); $ENVFILE is current" >&2
        return 0
    fi
    rm -f "$PIDFILE" "$ENVFILE"
    local ports rest grpc_port data
    ports="$(pick_ports)" || die "could not pick free ports"
    read -r rest grpc_port <<<"$ports"
    data="$(mktemp -d "${TMPDIR:-/tmp}/outflow-bigquery.XXXXXX")"
    echo "$data" >"$DIRFILE"
    local t0
    t0="$(now)"
    HOME="$DUCKDB_HOME" setsid "$VENV/bin/local-bigquery" serve --host 127.0.0.1 \
        --port "$rest" --grpc-port "$grpc_port" --project "$PROJECT" --data-dir "$data" \
        </dev/null >"$LOG" 2>&1 &
    echo $! >"$PIDFILE"
    local deadline=$((SECONDS + WAIT_SECS)) i=0
    while :; do
        i=$((i + 1))
        if ! pid_alive; then
            tail -n 30 "$LOG" >&2 || true
            rm -f "$PIDFILE"
            die "local-bigquery exited during startup (log: $LOG)"
        fi
        if probe "$rest" "$grpc_port" 2>/dev/null; then
            break
        fi
        if ((SECONDS >= deadline || i > 10 * WAIT_SECS)); then
            tail -n 30 "$LOG" >&2 || true
            stop
            die "local-bigquery did not answer on REST $rest and gRPC $grpc_port within ${WAIT_SECS}s"
        fi
        sleep 0.2
    done
    cat >"$ENVFILE" <<EOF
export OUTFLOW_BIGQUERY_REST=http://127.0.0.1:$rest
export OUTFLOW_BIGQUERY_GRPC=http://127.0.0.1:$grpc_port
export OUTFLOW_BIGQUERY_PROJECT=$PROJECT
export OUTFLOW_BIGQUERY_PYTHON=$VENV/bin/python
EOF
    echo "bigquery.sh: local-bigquery up (pid $(cat "$PIDFILE"), REST $rest, gRPC $grpc_port, data $data) in $(elapsed "$t0") s; start total $(elapsed "$t_total") s" >&2
}

stop() {
    if [[ -f "$PIDFILE" ]]; then
        local pid
        pid="$(cat "$PIDFILE")"
        if kill -0 "$pid" 2>/dev/null; then
            # setsid made the server a process-group leader: signal its group.
            kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
            local i
            for i in $(seq 1 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            if kill -0 "$pid" 2>/dev/null; then
                kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
            fi
        fi
        rm -f "$PIDFILE"
        echo "bigquery.sh: stopped (pid $pid)" >&2
    fi
    rm -f "$ENVFILE"
    if [[ -f "$DIRFILE" ]]; then
        local data
        data="$(cat "$DIRFILE")"
        case "$data" in
            */outflow-bigquery.*) rm -rf -- "$data" ;;
        esac
        rm -f "$DIRFILE"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    install) install ;;
    *) die "usage: $0 start|stop|install" ;;
esac
