"""Processes that outlive the component that started them, such as the VizDoom engines of a rollout worker
killed with SIGKILL: the main process adopts them (Linux child subreaper) and ends them when the run ends.

Without this an engine whose worker died is re-parented to init, keeps running and keeps the run's output
pipes open, so a launcher waiting for the run to close its output would wait forever.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
from pathlib import Path

log = logging.getLogger("sf")

_PR_SET_CHILD_SUBREAPER = 36


def adopt_orphans(enable: bool = True) -> bool:
    """Make this process (or stop it being) the new parent of its descendants' orphans; False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(enable), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def child_pids(pid: int | None = None) -> set[int]:
    """Direct children of `pid` (default: this process), zombies included, read from /proc."""
    pid = os.getpid() if pid is None else pid
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        ppid = int(text[text.rindex(")") + 2 :].split()[1])  # the command name may contain spaces and ')'
        if ppid == pid:
            children.add(int(stat.parent.name))
    return children


def end_orphans(keep: set[int]) -> list[int]:
    """SIGKILL and reap every child of this process not in `keep`, and unlink the /dev/shm files they mapped
    that no live process uses any more (a VizDoom engine's files are unlinked by the worker that died)."""
    ended = sorted(child_pids() - keep)
    if not ended:
        return []
    names = [_describe(pid) for pid in ended]
    shm = set().union(*(shm_files(pid) for pid in ended))
    for pid in ended:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    in_use = set().union(*(shm_files(int(proc.name)) for proc in Path("/proc").glob("[0-9]*")))
    for path in shm - in_use:
        Path(path).unlink(missing_ok=True)
    log.warning(
        "ended %d process(es) left behind by components that did not stop cleanly: %s", len(ended), ", ".join(names)
    )
    return ended


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


def _describe(pid: int) -> str:
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
