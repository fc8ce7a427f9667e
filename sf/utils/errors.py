"""The one error type for bad configuration, so entry points can report it and stop before anything starts."""

from __future__ import annotations


class ConfigError(ValueError):
    """A flag, YAML key or combination of values that cannot run; `flag` names the offender (e.g. "--gamma")."""

    def __init__(self, message: str, flag: str | None = None):
        super().__init__(message)
        self.flag = flag


def error_line(err: ConfigError) -> str:
    """What an entry point prints before exiting with status 2: one line, whatever the message's own line breaks."""
    return "sf: error: " + " ".join(str(err).split())
