# Helpers for the Python venvs the scripts install under .cache, sourced by them.

# Makes the Python of venv $1 keep the bytecode it compiles, even where
# PYTHONDONTWRITEBYTECODE is set (this machine sets it). The venvs are installed with
# `pip --no-compile`, since compiling every module of every package up front costs CPU
# during the build; without this they would have no .pyc at all, and every Python process
# would compile every module it imports again (3 to 4 CPU-seconds more for each start of a
# reader). A .pth line runs at every start of that venv's Python, and of no other.
keep_bytecode() {
    local site
    site="$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || return 1
    echo 'import sys; sys.dont_write_bytecode = False' >"$site/outflow-keep-bytecode.pth"
}
