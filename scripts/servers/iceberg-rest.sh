#!/usr/bin/env bash
# Iceberg REST catalog server for Outflow's integration tests.
#
# Serves Apache Iceberg's own REST catalog fixture (iceberg-core 1.11.0 tests jar:
# RESTCatalogAdapter/RESTCatalogServlet; iceberg-open-api 1.11.0 test-fixtures:
# RESTServerCatalogAdapter) over a JdbcCatalog on SQLite with a local warehouse, through a small
# launcher (tests/servers/iceberg-rest) that binds 127.0.0.1 only. Data lives in a fresh temp dir.
#
#   scripts/servers/iceberg-rest.sh start   build if needed, start, wait until it answers,
#                                           write .cache/run/iceberg-rest.env
#   scripts/servers/iceberg-rest.sh stop    stop by the saved PID (process group), remove state
#   scripts/servers/iceberg-rest.sh status  exit 0 when running and answering
#
# Env file exports:
#   OUTFLOW_ICEBERG_REST_URI=http://127.0.0.1:PORT
#   OUTFLOW_ICEBERG_REST_WAREHOUSE=file:///TMPDIR/warehouse   (where table data goes)
#   OUTFLOW_ICEBERG_REST_DATA_DIR=/TMPDIR                      (catalog.db, warehouse/)
# Options via env: OUTFLOW_ICEBERG_REST_PORT (default 0 = a free port chosen by the kernel),
# OUTFLOW_KEEP_SERVER_DATA=1 keeps the temp dir on stop.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="$REPO/.cache"
RUN="$CACHE/run"
NAME="iceberg-rest"
SRC="$REPO/tests/servers/iceberg-rest"
BUILD="$CACHE/iceberg-rest-server"
PIDFILE="$RUN/$NAME.pid"
ENVFILE="$RUN/$NAME.env"
PORTFILE="$RUN/$NAME.port"
DATAFILE="$RUN/$NAME.datadir"
LOG="$RUN/$NAME.log"
MAIN_CLASS="org.apache.iceberg.rest.OutflowLoopbackRestServer"
START_TIMEOUT_S=60

die() { echo "$NAME.sh: $*" >&2; exit 1; }
log() { echo "$NAME.sh: $*" >&2; }

mkdir -p "$RUN"

hash_files() {
  local f
  for f in "$@"; do
    printf '%s\n' "${f#"$REPO"/}"
    sha256sum <"$f"
  done | sha256sum | cut -d' ' -f1
}

classpath_ok() { # every entry of the resolved classpath still exists (e.g. ~/.m2 not wiped)
  local cp entry
  [[ -f "$BUILD/classpath.txt" && -d "$BUILD/target/classes" ]] || return 1
  cp="$(cat "$BUILD/classpath.txt")"
  IFS=':' read -r -a entries <<<"$cp"
  for entry in "${entries[@]}"; do
    [[ -e "$entry" ]] || return 1
  done
}

build() {
  command -v java >/dev/null 2>&1 || die "java not found (Java 17 is needed)"
  command -v mvn >/dev/null 2>&1 || die "mvn not found (Maven is needed)"
  local sources stamp t0
  mapfile -t sources < <(find "$SRC/src" -type f | LC_ALL=C sort)
  stamp="$(hash_files "$SRC/pom.xml" "${sources[@]}")"
  if [[ -f "$BUILD/.outflow-stamp" && "$(cat "$BUILD/.outflow-stamp")" == "$stamp" ]] && classpath_ok; then
    return 0
  fi
  log "building the REST server ($SRC)"
  t0=$SECONDS
  rm -rf "$BUILD"
  mkdir -p "$BUILD"
  timeout 1200 mvn -q -B -Dstyle.color=never -f "$SRC/pom.xml" -Doutflow.buildDir="$BUILD/target" \
      package dependency:build-classpath -Dmdep.outputFile="$BUILD/classpath.txt" </dev/null >&2 \
    || die "maven build of $SRC failed"
  classpath_ok || die "maven did not produce $BUILD/target/classes and $BUILD/classpath.txt"
  echo "$stamp" >"$BUILD/.outflow-stamp"
  log "REST server built in $((SECONDS - t0)) s"
}

is_running() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

answers() { # $1 = port
  curl -fsS --max-time 2 "http://127.0.0.1:$1/v1/config" >/dev/null 2>&1
}

write_env() { # $1 = port, $2 = data dir
  {
    echo "export OUTFLOW_ICEBERG_REST_URI=http://127.0.0.1:$1"
    echo "export OUTFLOW_ICEBERG_REST_WAREHOUSE=file://$2/warehouse"
    echo "export OUTFLOW_ICEBERG_REST_DATA_DIR=$2"
  } >"$ENVFILE.tmp"
  mv -f "$ENVFILE.tmp" "$ENVFILE"
}

start() {
  if is_running; then
    if [[ -f "$PORTFILE" ]] && answers "$(cat "$PORTFILE")"; then
      log "already running (pid $(cat "$PIDFILE"), port $(cat "$PORTFILE"))"
      return 0
    fi
    die "pid $(cat "$PIDFILE") from $PIDFILE is alive but does not answer; run '$0 stop' first"
  fi
  rm -f "$PIDFILE" "$PORTFILE" "$ENVFILE"
  build

  local data port pid t0 i
  data="$(mktemp -d "${TMPDIR:-/tmp}/outflow-iceberg-rest.XXXXXX")"
  mkdir -p "$data/warehouse" "$data/tmp"
  echo "$data" >"$DATAFILE"
  port="${OUTFLOW_ICEBERG_REST_PORT:-0}"

  t0=$(date +%s%N)
  setsid java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xmx1g -Djava.io.tmpdir="$data/tmp" \
      -cp "$BUILD/target/classes:$(cat "$BUILD/classpath.txt")" "$MAIN_CLASS" \
      --host 127.0.0.1 --port "$port" --port-file "$PORTFILE" \
      --uri "jdbc:sqlite:$data/catalog.db" --warehouse "file://$data/warehouse" \
      </dev/null >"$LOG" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"

  # Bounded wait: up to START_TIMEOUT_S seconds, polling every 0.1 s.
  for ((i = 0; i < START_TIMEOUT_S * 10; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$LOG" >&2 || true
      rm -f "$PIDFILE"
      die "server exited during startup (log: $LOG)"
    fi
    if [[ -s "$PORTFILE" ]] && answers "$(cat "$PORTFILE")"; then
      break
    fi
    sleep 0.1
  done
  if ! { [[ -s "$PORTFILE" ]] && answers "$(cat "$PORTFILE")"; }; then
    tail -n 30 "$LOG" >&2 || true
    stop
    die "server did not answer within $START_TIMEOUT_S s (log: $LOG)"
  fi
  port="$(cat "$PORTFILE")"
  write_env "$port" "$data"
  log "started pid $pid on http://127.0.0.1:$port in $(( ($(date +%s%N) - t0) / 1000000 )) ms; data $data; env $ENVFILE"
}

stop() {
  local pid i
  if [[ -f "$PIDFILE" ]]; then
    pid="$(cat "$PIDFILE")"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
      # setsid made the server its own process group leader: signal the group.
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid ignored TERM for 15 s; sending KILL"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      fi
      log "stopped pid $pid"
    else
      log "pid $pid from $PIDFILE is not running"
    fi
  else
    log "not running (no $PIDFILE)"
  fi
  rm -f "$PIDFILE" "$PORTFILE" "$ENVFILE"
  if [[ -f "$DATAFILE" ]]; then
    local data
    data="$(cat "$DATAFILE")"
    if [[ "${OUTFLOW_KEEP_SERVER_DATA:-0}" != 1 && "$data" == */outflow-iceberg-rest.* && -d "$data" ]]; then
      rm -rf "$data"
    fi
    rm -f "$DATAFILE"
  fi
}

status() {
  if is_running && [[ -f "$PORTFILE" ]] && answers "$(cat "$PORTFILE")"; then
    echo "running: pid $(cat "$PIDFILE"), http://127.0.0.1:$(cat "$PORTFILE")"
    return 0
  fi
  echo "not running"
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  build) build ;;
  *) die "usage: $0 start|stop|status|build" ;;
esac
