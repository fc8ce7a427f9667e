"""Errors every layer reports the same way: bad configuration (`ConfigError`, said as one `sf: error:` line before
anything starts) and a failure during a run (said as one line naming the exception's class and first line)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A flag, YAML key or combination of values that cannot run; `flag` names the offender (e.g. "--gamma")."""

    def __init__(self, message: str, flag: str | None = None):
        super().__init__(message)
        self.flag = flag


def error_line(err: ConfigError) -> str:
    """What an entry point prints before exiting with status 2: one line, whatever the message's own line breaks."""
    return "sf: error: " + " ".join(str(err).split())


def exception_line(exc: BaseException) -> str:
    """How a failure becomes the one line a run ends with (summary.json's `error`, the last log line): the exception's
    class without its module path, and its message's first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def traceback_line(formatted_traceback: str) -> str:
    """The exception line of a formatted traceback (sent by another process, or `traceback.format_exc()`), its class
    named without the module path (`sf.experiment.checkpoint.CheckpointError: ...` -> `CheckpointError: ...`)."""
    lines = [line.strip() for line in formatted_traceback.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else "failed"
    kind, sep, message = line.partition(": ")
    if sep and " " not in kind:
        return f"{kind.rpartition('.')[2]}: {message}"
    return line
