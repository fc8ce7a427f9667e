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


def started_at(ticks: int | None) -> float | None:
    """A start time in clock ticks since boot (`start_time`) as seconds since the epoch. The boot's own time comes
    from the clocks, not /proc/stat's `btime`, which is rounded to the second."""
    if ticks is None:
        return None
    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return booted + ticks / os.sysconf("SC_CLK_TCK")


def running(pid: int, started: int | None = None) -> bool:
    """The process exists, is not a zombie and (given `started`) is the one that started then."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in "ZXx":
        return False
    return started is None or int(fields[19]) == started


def end_orphans(keep: set[int], since: float) -> list[int]:
    """SIGKILL and reap every child of this process not in `keep` (the engines of a worker that died: this process
    adopted them), and unlink the /dev/shm files they held that were made since `since` (the run's start: theirs)
    and that no live process uses any more (a VizDoom engine's files are unlinked by the worker that died)."""
    ended = sorted(child_pids() - keep)
    if not ended:
        return []
    names = [describe(pid) for pid in ended]
    shm = held_since(ended, since)
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
    """The names in /dev/shm now."""
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def unlink_unused(paths: set[str]) -> list[str]:
    """Unlink those of `paths` (/dev/shm files) that no live process has mapped or open; return them. A semaphore
    is mapped under the name it was made with, not its own: its inode tells whether it is in use."""
    paths = {path for path in paths if os.path.lexists(path)}
    if not paths:
        return []
    pids = [int(proc.name) for proc in Path("/proc").glob("[0-9]*")]
    in_use = set().union(*(shm_files(pid) for pid in pids))
    inodes = set().union(*(shm_inodes(pid) for pid in pids))
    removed = []
    for path in sorted(paths - in_use):
        if inode(Path(path)) in inodes:
            continue
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


def held_since(pids: list[int] | set[int], since: float) -> set[str]:
    """The /dev/shm files these processes of the run hold that were made since `since` (the run's start, seconds
    since the epoch): made by the run, not files from before it that they merely opened."""
    held = set().union(set(), *(shm_files(pid) for pid in pids))
    return {path for path in held if made_since(path, since)}


def made_since(path: str, since: float | None) -> bool:
    """The file's last status change is not before `since` (seconds since the epoch, to the clock tick)."""
    if since is None:
        return False
    try:
        return os.stat(path).st_ctime >= since - 0.02
    except OSError:
        return False


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
    return sorted(str(path) for path in Path("/dev/shm").glob("sem.*") if inode(path) in inodes)


def inode(path: str | Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None
