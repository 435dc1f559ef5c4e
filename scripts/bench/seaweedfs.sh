# Sourced by the benchmarks that write to S3: `use_seaweedfs` makes the SeaweedFS store the
# test command runs available, starting it when it is not running (and stopping it on exit
# only then), and exports its OUTFLOW_S3_* variables.
use_seaweedfs() {
  local repo="$1" server="$1/scripts/servers/seaweedfs.sh"
  if ! "$server" status >/dev/null 2>&1; then
    "$server" start >&2
    # shellcheck disable=SC2064  # the path is fixed now, on purpose
    trap "\"$server\" stop >&2 || true" EXIT
  fi
  # shellcheck disable=SC1091
  set -a; source "$repo/.cache/run/seaweedfs.env"; set +a
}
