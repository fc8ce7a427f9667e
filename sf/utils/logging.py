"""One logger, `sf`, in Sample Factory's line format: `[time][pid] message`, to stderr and the experiment log."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

FORMAT = "[%(asctime)s,%(msecs)03d][%(process)05d] %(message)s"
DATEFMT = "%Y-%m-%d %H:%M:%S"

log = logging.getLogger("sf")


def setup_logging(level: str = "info", log_file: str | Path | None = None) -> logging.Logger:
    log.setLevel(level.upper())
    log.propagate = False
    formatter = logging.Formatter(FORMAT, DATEFMT)
    if not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler) for h in log.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(formatter)
        log.addHandler(handler)
    for old in [h for h in log.handlers if isinstance(h, logging.FileHandler)]:
        log.removeHandler(old)
        old.close()
    if log_file is not None:
        file_handler = logging.FileHandler(log_file)
        file_handler.setFormatter(formatter)
        log.addHandler(file_handler)
    return log
