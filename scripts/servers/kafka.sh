#!/usr/bin/env bash
# A single-node Apache Kafka 4.4 broker (KRaft, broker and controller in one JVM) on
# 127.0.0.1, for Outflow's streaming tests.
#
#   scripts/servers/kafka.sh start    fetch the jars (first time), format a fresh log dir,
#                                     start, wait until it answers, write .cache/run/kafka.env
#   scripts/servers/kafka.sh stop     stop it by the PID saved at start, remove its data
#   scripts/servers/kafka.sh status   exit 0 when the saved PID is alive and its port answers
#
# The jars come from Maven Central (tests/servers/kafka/pom.xml, about 55 MB) into
# .cache/kafka/libs. Data lives in a fresh temp dir, removed on stop.
#
# Env file exports:
#   OUTFLOW_KAFKA_BROKERS=127.0.0.1:PORT   the bootstrap servers
# Options via env: OUTFLOW_KEEP_SERVER_DATA=1 keeps the data dir on stop.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RUN="$REPO/.cache/run"
LIBS="$REPO/.cache/kafka/libs"
POM="$REPO/tests/servers/kafka/pom.xml"
PID_FILE="$RUN/kafka.pid"
ENV_FILE="$RUN/kafka.env"
PORT_FILE="$RUN/kafka.port"
DATA_FILE="$RUN/kafka.datadir"
LOG_FILE="$RUN/kafka.log"
START_TIMEOUT_S=90

# shellcheck source=../lib/server.sh
source "$REPO/scripts/lib/server.sh"

die() { echo "kafka.sh: $*" >&2; exit 1; }

fetch() {
    local stamp
    stamp="$(sha256sum <"$POM" | cut -d' ' -f1)"
    if [[ -f "$LIBS/.outflow-stamp" && "$(cat "$LIBS/.outflow-stamp")" == "$stamp" ]]; then
        return 0
    fi
    command -v mvn >/dev/null 2>&1 || die "mvn not found (Maven is needed to fetch the Kafka jars)"
    echo "kafka: fetching the broker's jars from Maven Central"
    rm -rf "$LIBS"
    mkdir -p "$LIBS"
    timeout 600 mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
        -DoutputDirectory="$LIBS" </dev/null >&2 || die "fetching the Kafka jars failed"
    echo "$stamp" >"$LIBS/.outflow-stamp"
}

# A free TCP port on 127.0.0.1 (random, high; checked not to answer).
free_port() {
    local port i
    for i in $(seq 1 50); do
        port=$((20000 + RANDOM % 40000))
        port_answers "$port" || { echo "$port"; return 0; }
    done
    die "no free port found"
}

kafka_java() {
    java -Xmx512m -Xms128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dlog4j2.configurationFile="file:$1/log4j2.properties" -cp "$LIBS/*" "${@:2}"
}

start() {
    mkdir -p "$RUN"
    if already_running kafka "$(cat "$PORT_FILE" 2>/dev/null || echo 0)"; then
        return 0
    fi
    rm -f "$PID_FILE" "$ENV_FILE" "$PORT_FILE"
    command -v java >/dev/null 2>&1 || die "java not found (Java 17 is needed)"
    fetch
    local data port controller id pid deadline
    data="$(mktemp -d "${TMPDIR:-/tmp}/outflow-kafka.XXXXXX")"
    echo "$data" >"$DATA_FILE"
    port="$(free_port)"
    controller="$(free_port)"
    cat >"$data/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$data/logs
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Tests join consumer groups often: no waiting for more members before the first assignment.
group.initial.rebalance.delay.ms=0
PROPS
    cat >"$data/log4j2.properties" <<'PROPS'
rootLogger.level=WARN
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
PROPS
    id="$(kafka_java "$data" kafka.tools.StorageTool random-uuid | tail -n 1)"
    kafka_java "$data" kafka.tools.StorageTool format -t "$id" -c "$data/server.properties" \
        >"$LOG_FILE" 2>&1 || die "formatting the log dir failed: $(tail -n 5 "$LOG_FILE")"
    (
        cd "$data"
        setsid java -Xmx512m -Xms128m -XX:+UseSerialGC \
            -Dlog4j2.configurationFile="file:$data/log4j2.properties" -cp "$LIBS/*" \
            kafka.Kafka "$data/server.properties" </dev/null >>"$LOG_FILE" 2>&1 &
        echo $! >"$PID_FILE"
    )
    pid="$(saved_pid)"
    deadline=$((SECONDS + START_TIMEOUT_S))
    while ((SECONDS < deadline)); do
        pid_alive "$pid" || die "the broker exited during startup: $(tail -n 20 "$LOG_FILE")"
        if port_answers "$port"; then
            echo "$port" >"$PORT_FILE"
            echo "export OUTFLOW_KAFKA_BROKERS=127.0.0.1:$port" >"$ENV_FILE"
            echo "kafka: broker running (pid $pid) on 127.0.0.1:$port; data $data; env in $ENV_FILE"
            return 0
        fi
        sleep 0.2
    done
    stop
    die "the broker did not answer within ${START_TIMEOUT_S}s; log: $LOG_FILE"
}

stop() {
    stop_saved kafka
    rm -f "$PORT_FILE"
    if [[ -f "$DATA_FILE" ]]; then
        local data
        data="$(cat "$DATA_FILE")"
        if [[ "${OUTFLOW_KEEP_SERVER_DATA:-0}" != 1 && "$data" == */outflow-kafka.* && -d "$data" ]]; then
            rm -rf "$data"
        fi
        rm -f "$DATA_FILE"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) report_status kafka "$(cat "$PORT_FILE" 2>/dev/null || echo 0)" ;;
    *) die "usage: $0 start|stop|status" ;;
esac
