"""One run per experiment folder: the run holds an exclusive lock on `<experiment>/run.lock` for its whole life.

Two runs writing one folder interleave their checkpoints, rotate away each other's saves and overwrite each other's
summary. The lock is `flock` on a file that records who holds it (pid, host, start time, command), so a second run
can say who is in its way. The kernel drops a flock when its holder dies, however it dies, so a lock can never be
held by a dead process: a file that still names a holder once the lock is taken was left by a run that died, and
is taken over with a warning. A run that ends removes the file, and the folders the lock made if the run wrote nothing
else in them (a configuration refused at start). A run that opened the file just before it went could lock the
removed file while a third locks a new one: so a lock taken is only kept when the path still names the file locked.

Readers (enjoy, `sf.profile`) do not take it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

from sf.utils.errors import ConfigError

log = logging.getLogger("sf")

LOCK_FILE = "run.lock"
_held: list[ExperimentLock] = []  # this process's locks, for `release_held` before a forced exit


class ExperimentLock:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self.fd: int | None = None
        self.made: list[Path] = []  # the folders the lock made, deepest first

    def acquire(self) -> None:
        """Take the lock, or raise ConfigError (exit status 2) naming the run that holds it."""
        self.made = [folder for folder in (self.folder, *self.folder.parents) if not folder.exists()]
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise ConfigError(
                    f"--experiment: {self.folder} is in use by another run ({_describe(holder)}); wait for it to end, "
                    f"stop it, or choose another --experiment",
                    flag="--experiment",
                ) from None
            if _same_file(fd, self.path):
                break
            os.close(fd)  # removed by the run that held it as this one opened it: lock the file there now
        left = _read(fd)
        if left:
            log.warning(
                "%s: taking over the lock of a run that ended without releasing it (%s)", self.path, _describe(left)
            )
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        os.fsync(fd)
        self.fd = fd
        _held.append(self)

    def release(self) -> None:
        """The run is over: remove the file (and the folders the lock made, where nothing else was written), let the
        lock go."""
        if self.fd is None:
            return
        self.path.unlink(missing_ok=True)
        for folder in self.made:
            try:
                folder.rmdir()
            except OSError:  # the run wrote into it: it stays
                break
        os.close(self.fd)
        self.fd = None
        _held.remove(self)

    def __enter__(self) -> ExperimentLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def release_held() -> None:
    """Before a process ends without unwinding (`os._exit`): release every lock it holds."""
    for lock in list(_held):
        lock.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _read(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        return json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {"unreadable": True}


def _describe(holder: dict) -> str:
    if not holder or holder.get("unreadable"):
        return "its lock file does not say which"
    return f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
