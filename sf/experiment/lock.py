"""One run per experiment folder: every process of the run holds an exclusive lock on `<experiment>/run.lock` for
as long as it lives.

Two runs writing one folder interleave their checkpoints, rotate away each other's saves and overwrite each other's
summary. The lock is `flock` on a file that records who holds it (pid, host, start time, command), so a second run
can say who is in its way. A flock belongs to the open file description, not to a process: every component process
of a parallel run receives a duplicate of the main process's descriptor as it starts (`share_held`, passed the way
multiprocessing passes a pipe), so the lock stays taken until the last of them is gone. A learner that outlives a
`kill -9` of the main process still holds it: a second run is refused, naming the dead main process and the pids that
still hold the lock, until that learner has ended (and saved what it saves). The kernel drops a flock when the last
descriptor of it closes, however its holders die, so a lock can never be held by dead processes alone: a file that
still names a holder once the lock is taken was left by a run that died, and is taken over with a warning.

A run that ends removes the file, and the folders the lock made if the run wrote nothing else in them (a
configuration refused at start); while another process still holds the lock (a component that could not be stopped)
the file stays, so that the lock stays in the way. A run that opened the file just before it went could lock the
removed file while a third locks a new one: so a lock taken is only kept when the path still names the file locked.
A file system that cannot lock files (some network file systems: ENOLCK, ENOSYS, EOPNOTSUPP) is refused, naming it.

Readers (enjoy, `sf.profile`) do not take it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import sys
import time
from multiprocessing import context, reduction
from pathlib import Path

from sf.utils.errors import ConfigError

log = logging.getLogger("sf")

LOCK_FILE = "run.lock"
_held: list[ExperimentLock] = []  # this process's locks, for `release_held` before a forced exit
_NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)  # flock on a file system that does not lock files


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
                holder, others = _read(fd), holders(fd)
                os.close(fd)
                raise ConfigError(
                    f"--experiment: {self.folder} is in use by another run ({_describe(holder, others)}); wait for "
                    f"it to end, stop it, or choose another --experiment",
                    flag="--experiment",
                ) from None
            except OSError as exc:
                os.close(fd)
                if exc.errno not in _NO_LOCKS:
                    raise
                raise ConfigError(
                    f"--train_dir: {self.path} cannot be locked: the file system there ({file_system(self.folder)}) "
                    f"does not support file locks ({exc.strerror}); choose a --train_dir on a local file system",
                    flag="--train_dir",
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
        others = holders(self.fd)
        if others:
            log.warning(
                "%s: kept, the lock still held by %s of this run, which did not end", self.path, _processes(others)
            )
        else:
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


class LockShare:
    """The run's lock, for a component process: pickled as it starts, it arrives there as a duplicate of the main
    process's descriptor (one open file description, so one lock), which the process keeps until it exits."""

    def __init__(self, fd: int | None):
        self.fd = fd

    def __reduce__(self):
        if self.fd is None or context.get_spawning_popen() is None:  # not a process start: nothing to hand over
            return LockShare, (None,)
        return _received, (reduction.DupFd(self.fd),)


def _received(duplicate) -> LockShare:
    """In the component process: the descriptor stays open (never unlocked: that would drop the whole run's lock)
    and is not handed on to the programs the component runs."""
    fd = duplicate.detach()
    try:
        os.set_inheritable(fd, False)
    except OSError:  # a profiler's wrapper closed it on the way: this process does not hold the lock
        return LockShare(None)
    return LockShare(fd)


def share_held() -> LockShare:
    """The lock this process holds, to pass to a component process it starts (None inside: there is none)."""
    return LockShare(_held[-1].fd if _held else None)


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


def holders(fd: int) -> list[int]:
    """The pids of the other processes that hold a descriptor of the file `fd` is open on (those this user may see,
    on this host): who keeps a lock alive when the process named in the file is gone."""
    held = os.fstat(fd)
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            links = os.scandir(f"/proc/{entry.name}/fd")
        except OSError:  # gone, or another user's
            continue
        with links:
            for link in links:
                try:
                    target = os.stat(link.path)
                except OSError:
                    continue
                if (target.st_dev, target.st_ino) == (held.st_dev, held.st_ino):
                    found.append(int(entry.name))
                    break
    return sorted(found)


def file_system(folder: Path) -> str:
    """`<type> <source> mounted at <point>` of the mount `folder` is on, from /proc/self/mountinfo."""
    real = os.path.realpath(folder)
    best = ("", "unknown type", "")
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return "of unknown type"
    for line in lines:
        fields, _, rest = line.partition(" - ")
        point = fields.split()[4].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            fs_type, source = (rest.split() + ["", ""])[:2]
            best = (point, fs_type, source)
    return f"{best[1]} {best[2]} mounted at {best[0]}".replace("  ", " ")


def _describe(holder: dict, others: list[int] | None = None) -> str:
    if not holder or holder.get("unreadable"):
        said = "its lock file does not say which"
    else:
        said = f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
    if others and holder.get("pid") not in others and holder.get("host") in (None, socket.gethostname()):
        said += f"; its main process is gone, the lock still held by {_processes(others)}"
    return said


def _processes(pids: list[int]) -> str:
    named = []
    for pid in pids:
        try:
            named.append(f"pid {pid} ({Path(f'/proc/{pid}/comm').read_text().strip()})")
        except OSError:
            named.append(f"pid {pid}")
    return ", ".join(named)
