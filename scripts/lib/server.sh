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
