"""Files a crash cannot leave half-written or lose: written to `<name>.tmp`, fsynced, renamed over `<name>`, and the
folder fsynced so that the rename itself survives a power cut. A reader sees the old file or the new one, whole."""

from __future__ import annotations

import os
from pathlib import Path

TMP_SUFFIX = ".tmp"


def replace_file(path: Path, data: bytes | memoryview) -> None:
    """Write `data` as `path`; on an OSError (a full disk) the temporary file is removed and `path` is untouched."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
