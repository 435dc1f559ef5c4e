# Helpers of the server scripts in scripts/servers/, sourced by them. PID_FILE is the
# script's own file of the server's PID.

# True when something accepts TCP connections on 127.0.0.1:$1.
port_answers() {
    timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# True when process $1 is alive.
pid_alive() {
    [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null
}

# The PID saved in $PID_FILE, or nothing.
saved_pid() {
    [[ -f "$PID_FILE" ]] && cat "$PID_FILE" || true
}

# Stops the process group led by $1 (a server started with setsid): SIGTERM, then SIGKILL
# if it is still alive after 5 s (some servers ignore SIGTERM for a while).
stop_group() {
    local pid="$1" i
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
}

# Says so and returns 0 when the server of $PID_FILE is alive and answers on port $2; $1
# names it. A start that finds its server up is done.
already_running() {
    local pid
    pid="$(saved_pid)"
    pid_alive "$pid" && port_answers "$2" || return 1
    echo "$1: already running (pid $pid) on 127.0.0.1:$2"
}

# Stops the server of $PID_FILE (see stop_group) and forgets its PID and $ENV_FILE; $1
# names it.
stop_saved() {
    local pid
    pid="$(saved_pid)"
    if pid_alive "$pid"; then
        stop_group "$pid"
        echo "$1: stopped (pid $pid)"
    else
        echo "$1: not running"
    fi
    rm -f "$PID_FILE" "$ENV_FILE"
}

# `status` of a server script: 0 when the server of $PID_FILE is alive and answers on port
# $2; $1 names it.
report_status() {
    if already_running "$1" "$2" >/dev/null; then
        echo "$1: running (pid $(saved_pid)) on 127.0.0.1:$2"
        return 0
    fi
    echo "$1: not running"
    return 1
}
