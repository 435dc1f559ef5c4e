#!/usr/bin/env bash
# Streaming benchmark (issue 17): 1,000,000 JSON records from a Kafka topic into Iceberg,
# Outflow's streaming job against Apache Iceberg's own Kafka Connect sink (1.10.1) in a
# Kafka Connect 4.4 standalone worker, on the same broker, REST catalog and machine. Prints
# throughput, peak memory, CPU and production-to-visibility latency as JSON.
#
#   scripts/bench/kafka_iceberg.sh            RECORDS, RATE, SECONDS_LIVE in the environment
#
# It builds `outflow` (release, Iceberg and Kafka only), fetches the Connect worker and the
# sink's jars from Maven Central into .cache/bench-connect (scripts/bench/kafka-connect/),
# and starts the Kafka broker and the REST catalog unless they are running.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
scripts/setup/readers.sh >/dev/null
# shellcheck disable=SC1091
source .cache/run/readers.env

started=()
stop_started() {
    for s in "${started[@]}"; do
        scripts/servers/"$s".sh stop >&2 || true
    done
}
trap stop_started EXIT
for s in kafka iceberg-rest; do
    if ! scripts/servers/"$s".sh status >/dev/null 2>&1; then
        scripts/servers/"$s".sh start >&2
        started+=("$s")
    fi
    # shellcheck disable=SC1090
    source ".cache/run/$s.env"
done

fetch() { # $1 = pom, $2 = directory (absolute: Maven resolves a relative one against the pom's), more arguments to copy-dependencies
    local pom="$1" dir="$REPO/$2" stamp
    stamp="$(sha256sum <"$pom" | cut -d' ' -f1)"
    [[ -f "$dir/.outflow-stamp" && "$(cat "$dir/.outflow-stamp")" == "$stamp" ]] && return 0
    rm -rf "$dir"
    mkdir -p "$dir"
    mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies -DoutputDirectory="$dir" "${@:3}" </dev/null >&2
    echo "$stamp" >"$dir/.outflow-stamp"
}
# The plugin without Kafka's jars (the worker has them); the worker without the plugin's.
fetch scripts/bench/kafka-connect/plugin-pom.xml .cache/bench-connect/plugins/iceberg -DexcludeGroupIds=org.apache.kafka
fetch scripts/bench/kafka-connect/worker-pom.xml .cache/bench-connect/worker

cargo build --release --quiet -p outflow-cli --no-default-features --features iceberg,kafka
"$OUTFLOW_PYTHON" scripts/bench/kafka_iceberg.py "$REPO/target/release/outflow"
