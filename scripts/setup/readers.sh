#!/usr/bin/env bash
# Installs the independent readers that Outflow's integration tests use to check what Outflow
# wrote (idempotent; a second run with nothing changed takes well under a second):
#   - a Python 3.11 venv at .cache/venv-readers from tests/readers/python/requirements.txt
#     (PyIceberg with SQLite + PyArrow, google-cloud-bigtable)
#   - the Java Iceberg reader tests/readers/java, built into .cache/java-reader/reader.jar
# and writes .cache/run/readers.env:
#   export OUTFLOW_PYTHON=<venv python>
#   export OUTFLOW_JAVA_READER_JAR=<reader.jar>
#   export OUTFLOW_ICEBERG_TOOL=<tests/readers/python/iceberg_tool.py>
# Usage: scripts/setup/readers.sh [--force]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="$REPO/.cache"
RUN="$CACHE/run"
VENV="$CACHE/venv-readers"
PYDIR="$REPO/tests/readers/python"
JAVADIR="$REPO/tests/readers/java"
JARDIR="$CACHE/java-reader"
JAR="$JARDIR/reader.jar"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

die() { echo "readers.sh: $*" >&2; exit 1; }
# shellcheck source=../lib/python.sh
source "$REPO/scripts/lib/python.sh"
log() { echo "readers.sh: $*" >&2; }

mkdir -p "$RUN" "$JARDIR"

# One installer at a time (tests and helpers may call this concurrently); bounded wait.
exec 9>"$RUN/readers.lock"
flock -w 1800 9 || die "another readers.sh held $RUN/readers.lock for 30 minutes"

hash_files() { # prints one sha256 over the given files' paths and contents
  local f
  for f in "$@"; do
    printf '%s\n' "${f#"$REPO"/}"
    sha256sum <"$f"
  done | sha256sum | cut -d' ' -f1
}

# ---------------------------------------------------------------- Python 3.11 venv
find_python311() {
  local cand root
  if [[ -n "${OUTFLOW_PYTHON311:-}" ]]; then
    echo "$OUTFLOW_PYTHON311"; return 0
  fi
  if command -v pyenv >/dev/null 2>&1; then
    root="$(pyenv root)"
    for cand in $(ls -d "$root"/versions/3.11.*/bin/python3.11 2>/dev/null | sort -V -r); do
      [[ -x "$cand" ]] && { echo "$cand"; return 0; }
    done
  fi
  for cand in python3.11 /usr/bin/python3.11 /usr/local/bin/python3.11; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
      command -v "$cand"; return 0
    fi
  done
  return 1
}

PY311="$(find_python311)" || die "no Python 3.11 found (pyenv 3.11.x, python3.11 on PATH, or set OUTFLOW_PYTHON311)"
PY_STAMP="$(printf '%s\n%s\nrecipe=2\n' "$("$PY311" -c 'import sys; print(sys.version)')" \
  "$(hash_files "$PYDIR/requirements.txt")" | sha256sum | cut -d' ' -f1)"

if [[ $FORCE == 0 && -x "$VENV/bin/python" && -f "$VENV/.outflow-stamp" \
      && "$(cat "$VENV/.outflow-stamp")" == "$PY_STAMP" ]]; then
  log "python venv up to date ($VENV)"
else
  log "creating python venv $VENV with $PY311"
  t0=$SECONDS
  rm -rf "$VENV"
  "$PY311" -m venv "$VENV"
  keep_bytecode "$VENV" || die "no site-packages in $VENV"
  # pip resolves from PyPI; bounded by its own timeouts and retries. --no-compile: Python
  # compiles the modules the readers import when they first load them (keep_bytecode);
  # compiling every module of every package up front took half of this step's CPU, during
  # the build.
  "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q --no-compile \
      --timeout 60 --retries 3 -r "$PYDIR/requirements.txt" \
    || die "pip install -r $PYDIR/requirements.txt failed"
  "$VENV/bin/python" -c 'import pyiceberg, pyarrow, sqlalchemy, pyiceberg.catalog.sql; from google.cloud import bigtable' \
    || die "venv imports failed"
  echo "$PY_STAMP" >"$VENV/.outflow-stamp"
  log "python venv ready in $((SECONDS - t0)) s"
fi

# ---------------------------------------------------------------- Java reader
command -v java >/dev/null 2>&1 || die "java not found (Java 17 is needed)"
command -v mvn >/dev/null 2>&1 || die "mvn not found (Maven is needed to build the Java reader)"
mapfile -t JAVA_SOURCES < <(find "$JAVADIR/src" -type f | LC_ALL=C sort)
JAVA_STAMP="$(hash_files "$JAVADIR/pom.xml" "${JAVA_SOURCES[@]}")"

if [[ $FORCE == 0 && -f "$JAR" && -f "$JARDIR/.outflow-stamp" \
      && "$(cat "$JARDIR/.outflow-stamp")" == "$JAVA_STAMP" ]]; then
  log "java reader up to date ($JAR)"
else
  log "building java reader into $JAR"
  t0=$SECONDS
  BUILD="$JARDIR/build"
  rm -rf "$BUILD"
  timeout 1200 mvn -q -B -Dstyle.color=never -f "$JAVADIR/pom.xml" -Doutflow.buildDir="$BUILD" \
      package -DskipTests </dev/null >&2 \
    || die "maven build of $JAVADIR failed"
  [[ -f "$BUILD/reader.jar" && -d "$BUILD/lib" ]] || die "maven did not produce $BUILD/reader.jar and $BUILD/lib"
  # The jar's manifest names its dependencies as lib/NAME.jar, beside it.
  rm -rf "$JARDIR/lib" "$JAR"
  mv "$BUILD/lib" "$JARDIR/lib"
  mv "$BUILD/reader.jar" "$JAR"
  rm -rf "$BUILD"
  # Smoke check: the jar starts and prints its usage (exit code 2).
  rc=0; java -jar "$JAR" >/dev/null 2>&1 || rc=$?
  [[ $rc == 2 ]] || die "java -jar $JAR did not start (exit $rc)"
  echo "$JAVA_STAMP" >"$JARDIR/.outflow-stamp"
  log "java reader ready in $((SECONDS - t0)) s"
fi

ENV_FILE="$RUN/readers.env"
{
  echo "export OUTFLOW_PYTHON=$VENV/bin/python"
  echo "export OUTFLOW_JAVA_READER_JAR=$JAR"
  echo "export OUTFLOW_ICEBERG_TOOL=$PYDIR/iceberg_tool.py"
} >"$ENV_FILE.tmp"
mv -f "$ENV_FILE.tmp" "$ENV_FILE"
log "wrote $ENV_FILE"
