"""How a failure becomes the one line a run ends with (summary.json's `error`, the last log line): the exception's
class without its module path, and its message's first line."""

from __future__ import annotations


def error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def last_line(formatted_traceback: str) -> str:
    """The exception line of a traceback sent by another process, its class named without the module path
    (`sf.runtime.checkpoint.CheckpointError: ...` -> `CheckpointError: ...`)."""
    lines = formatted_traceback.strip().splitlines()
    line = lines[-1] if lines else ""
    kind, sep, message = line.partition(": ")
    if sep and " " not in kind:
        return f"{kind.rpartition('.')[2]}: {message}"
    return line
