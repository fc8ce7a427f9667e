"""Processes that outlive the component that started them, such as the VizDoom engines of a rollout worker
killed with SIGKILL: the main process adopts them (Linux child subreaper) and ends them when the run ends.

Without this an engine whose worker died is re-parented to init, keeps running and keeps the run's output
pipes open, so a launcher waiting for the run to close its output would wait forever. Also what the supervisor and
the guard read from /proc: parents, start times (a pid with its start time names one process for good), sessions,
the /dev/shm files a process holds.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("sf")

_PR_SET_CHILD_SUBREAPER = 36
SHM_DIR = Path("/dev/shm")
SHM_SETTLE_S = 1.0  # a /dev/shm file younger than this may be on its way to being mapped by its creator


def adopt_orphans(enable: bool = True) -> bool:
    """Make this process (or stop it being) the new parent of its descendants' orphans; False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(enable), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...), None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # the command name may contain spaces and ')'


def parents() -> dict[int, int]:
    """pid -> parent pid of every process, read from /proc."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(entry.name)
        if fields is not None:
            found[int(entry.name)] = int(fields[1])
    return found


def child_pids(pid: int | None = None) -> set[int]:
    """Direct children of `pid` (default: this process), zombies included, read from /proc."""
    pid = os.getpid() if pid is None else pid
    return {child for child, parent in parents().items() if parent == pid}


def descendants(roots: set[int]) -> set[int]:
    """Every process below `roots` (not the roots themselves)."""
    below: dict[int, list[int]] = {}
    for child, parent in parents().items():
        below.setdefault(parent, []).append(child)
    found, todo = set(), list(roots)
    while todo:
        for child in below.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(entry.name)
        if fields is not None and int(fields[3]) == sid and fields[0] not in "ZXx":
            members.append(int(entry.name))
    return members


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, it names one process for good."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def running(pid: int, started: int | None = None) -> bool:
    """The process exists, is not a zombie and (given `started`) is the one that started then."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in "ZXx":
        return False
    return started is None or int(fields[19]) == started


def end_orphans(keep: set[int]) -> list[int]:
    """SIGKILL and reap every child of this process not in `keep`, and unlink the /dev/shm files they mapped
    that no live process uses any more (a VizDoom engine's files are unlinked by the worker that died)."""
    ended = sorted(child_pids() - keep)
    if not ended:
        return []
    names = [describe(pid) for pid in ended]
    shm = set().union(*(shm_files(pid) for pid in ended))
    for pid in ended:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    unlink_unused(shm)
    log.warning(
        "ended %d process(es) left behind by components that did not stop cleanly: %s", len(ended), ", ".join(names)
    )
    return ended


def shm_entries() -> set[str]:
    """The names in /dev/shm now: what a run compares against at its end to find the files it made."""
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def left_since(before: set[str]) -> set[str]:
    """/dev/shm files made since `before` was taken that may be a dead process's: not semaphores (mapped under
    another name, so `unlink_unused` cannot tell whether one is in use) and older than `SHM_SETTLE_S`."""
    young = time.time() - SHM_SETTLE_S
    return {
        str(SHM_DIR / name) for name in shm_entries() - before if not name.startswith("sem.") and _mtime(name) < young
    }


def _mtime(name: str) -> float:
    try:
        return (SHM_DIR / name).stat().st_mtime
    except OSError:
        return float("inf")


def unlink_unused(paths: set[str]) -> list[str]:
    """Unlink those of `paths` (/dev/shm files) that no live process has mapped or open; return them."""
    if not paths:
        return []
    in_use = set().union(*(shm_files(int(proc.name)) for proc in Path("/proc").glob("[0-9]*")))
    removed = []
    for path in sorted(paths - in_use):
        try:
            Path(path).unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


def shm_files(pid: int) -> set[str]:
    """The /dev/shm files a process has mapped or open."""
    files = set()
    try:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            path = line.split(maxsplit=5)[-1]
            if path.startswith("/dev/shm/"):
                files.add(path.removesuffix(" (deleted)"))
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("/dev/shm/"):
                files.add(target.removesuffix(" (deleted)"))
    except OSError:  # the process ended, or is not ours to read
        pass
    return files


def describe(pid: int) -> str:
    try:
        return f"{Path(f'/proc/{pid}/comm').read_text().strip()} (pid {pid})"
    except OSError:
        return f"pid {pid}"


def shm_inodes(pid: int) -> set[int]:
    """Inodes of the /dev/shm files a process has mapped. A POSIX semaphore is mapped under the temporary name
    it was created with, not the name it is opened by, so only the inode tells which one it is."""
    inodes = set()
    try:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/"):
                inodes.add(int(fields[4]))
    except OSError:
        pass
    return inodes


def named_semaphores(pid: int) -> list[str]:
    """The /dev/shm names of the semaphores a process has open (multiprocessing's locks and events)."""
    inodes = shm_inodes(pid)
    return sorted(str(path) for path in Path("/dev/shm").glob("sem.*") if _inode(path) in inodes)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None
