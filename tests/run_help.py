"""Runs `<command> --help` for each command given (as JSON on stdin) in this one process, the way `python -m` and
`python <script>` run them (`runpy`), and prints a JSON list of {exit, stdout, stderr}: one interpreter and one import
of torch for all of them."""

import contextlib
import io
import json
import runpy
import sys
import traceback


def run(command: list[str]) -> dict:
    out, err = io.StringIO(), io.StringIO()
    target, args = (command[1], command[2:]) if command[0] == "-m" else (command[0], command[1:])
    argv = sys.argv
    sys.argv = [target, *args, "--help"]
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if command[0] == "-m":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            code = 1
            traceback.print_exc()
    sys.argv = argv
    return {"exit": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    print(json.dumps([run(command) for command in json.load(sys.stdin)]))
