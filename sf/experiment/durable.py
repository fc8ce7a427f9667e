"""Files a crash cannot leave half-written or lose: written to `<name>.tmp`, fsynced, renamed over `<name>`, and the
folder fsynced so that the rename itself survives a power cut. A reader sees the old file or the new one, whole."""

from __future__ import annotations

import errno
import os
import shutil
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


def move_new(source: Path, target: Path) -> None:
    """Move `source` to `target`, a name that must not exist: FileExistsError rather than a file replaced. A hard link
    then an unlink where the file system has links (atomic, never clobbers); a rename checked first where not."""
    try:
        os.link(source, target)
    except FileExistsError:
        raise
    except OSError:  # no hard links here (some network and FUSE file systems)
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target)) from None
        os.rename(source, target)
        return
    os.unlink(source)


def keep_new(source: Path, target: Path) -> None:
    """Keep the contents of `source` as `target`, a name that must not exist: a hard link (no copy), or a copy created
    exclusively where links are not possible. FileExistsError rather than a file replaced."""
    try:
        os.link(source, target)
        return
    except FileExistsError:
        raise
    except OSError:
        pass
    with open(source, "rb") as src, open(target, "xb") as dst:
        shutil.copyfileobj(src, dst)
        dst.flush()
        os.fsync(dst.fileno())


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
