"""The `serve` mode of the reader tools (outflow_testkit::served is the other end).

A test binary starts a tool once with `serve` and sends it one request a line: a
subcommand's arguments, separated by tabs. Each request is run with its stdout and stderr
captured, and answered with one line: {"ok": true, "doc": <what it printed>}, or
{"ok": false, "error": ...} with what it printed on stderr when it exited or returned
non-zero, or the exception it raised (whose traceback goes to the tool's own stderr, the
log file the test names). Serving ends when stdin does.
"""

import contextlib
import io
import json
import sys
import traceback


def serve(run) -> None:
    """Answers each request with `run(argv)`, which prints one JSON document on success."""
    for line in sys.stdin:
        argv = line.rstrip("\n").split("\t")
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = run(argv)
            if code:
                raise SystemExit(code)
            answer = '{"ok":true,"doc":' + out.getvalue().strip() + "}"
        except SystemExit as e:  # argparse's errors, sys.exit(message), a non-zero return
            error = err.getvalue().strip() or f"exited: {e.code}"
            answer = json.dumps({"ok": False, "error": error}, sort_keys=True)
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            answer = json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}, sort_keys=True)
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()
