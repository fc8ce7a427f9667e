"""The /dev/shm names a run owns: the only ones its cleanup may remove.

A name is the run's because a process of the run made it, never because it appeared while the run went on: another
program's files, a segment a job closed for a later attach, a file copied in with an old time all appear too, and
are left alone. A name becomes the run's in one of three ways:

- recorded: the process that made it appends it to the run's ledger (`Ledger`), a file in the run's private folder,
  as soon as it exists: the semaphores of the main process's locks, the shared memory and message queues of the
  VizDoom engines an env start made (`Ledger.recording`: new names held by this process or its children). While
  envs start, the process also claims the names their family says its engines make (`register_env(...,
  shm_names=...)`): if it is killed before it could record them, the names matching the claim made since it began
  are the run's;
- named after its maker: torch's shared tensors (`torch_<pid>_...`) and multiprocessing's heap arenas
  (`pym-<pid>-...`) carry the pid of the process that made them; such a name with the pid of a process of the run,
  and no older than that process, is the run's (`named_after`);
- held by what is left of the run: an engine ended because its worker died while still starting it holds names
  not yet recorded; those it holds that were made since the run began are the run's (`orphans.held_since`).

What the run owns is removed only once no live process holds it (`sf.supervision.orphans.unlink_unused`).
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sf.supervision.orphans import (
    SHM_DIR,
    descendants,
    inode,
    made_since,
    shm_entries,
    shm_files,
    shm_inodes,
    started_at,
)

log = logging.getLogger("sf")

LEDGER_FILE = "shm_names"
PRIVATE_PREFIX = "sf-run-"  # the run's private folder: its ledger, and the working folder of the processes it starts
_MAKER_PID = re.compile(r"^(?:torch_(\d+)_|pym-(\d+)-)")


class Ledger:
    """The names a run's processes made, one path a line. Appends of a line are atomic (O_APPEND, far below
    PIPE_BUF), so every process of the run writes the same file without a lock."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def add(self, paths: Iterable[str]) -> None:
        self._append(f"{path}\n" for path in paths)

    def _append(self, lines: Iterable[str]) -> None:
        lines = "".join(lines)
        if not lines:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, lines.encode())
            finally:
                os.close(fd)
        except OSError as exc:  # the run goes on; what it could not record may outlive it
            log.warning("cannot record the /dev/shm names %s in %s: %s", lines.split(), self.path, exc)

    def names(self) -> set[str]:
        """The names recorded, and those matching a claim never settled (its process died inside the block) made
        since it began, that exist now."""
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return set()
        names = {line for line in lines if line.startswith("/")}
        claims = {fields[1]: fields[2:] for fields in (line.split() for line in lines) if fields[0] == "claim"}
        for settled in (line.split()[1] for line in lines if line.startswith("settled ")):
            claims.pop(settled, None)
        for claim, patterns in claims.items():
            since = float(claim.rpartition("@")[2])
            names |= {
                str(SHM_DIR / name)
                for name in shm_entries()
                if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
                and made_since(str(SHM_DIR / name), since)
            }
        return {name for name in names if os.path.lexists(name)}

    @contextmanager
    def recording(self, patterns: tuple[str, ...] = ()) -> Iterator[None]:
        """Record the names made inside the block by this process or its children (an env's engines): new since
        the block began, and held by one of them at its end. `patterns` (the names an env family's engines make)
        are claimed while the block runs."""
        claim = f"{os.getpid()}@{time.time():.3f}"
        if patterns:
            self._append([f"claim {claim} {' '.join(patterns)}\n"])
        before = shm_entries()
        yield
        new = {str(SHM_DIR / name) for name in shm_entries() - before}
        if new:
            makers = {os.getpid()} | descendants({os.getpid()})
            held = set().union(*(shm_files(pid) for pid in makers))
            inodes = set().union(*(shm_inodes(pid) for pid in makers))  # a semaphore is mapped under another name
            self.add(sorted(path for path in new if path in held or inode(path) in inodes))
        if patterns:
            self._append([f"settled {claim}\n"])


def new_ledger() -> Ledger:
    """A ledger in a new private folder (mode 700, under the system's temporary folder)."""
    return Ledger(Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX)) / LEDGER_FILE)


def remove_private_dir(ledger: Ledger) -> None:
    """The run is over: its private folder goes (`new_ledger`'s; a ledger elsewhere stays)."""
    if ledger.path.parent.name.startswith(PRIVATE_PREFIX):
        shutil.rmtree(ledger.path.parent, ignore_errors=True)


def named_after(pids: dict[int, int | None]) -> set[str]:
    """/dev/shm names made by these processes (pid -> start time), read from the maker's pid in the name: those
    no older than the process with that pid (a later process may reuse a pid, never an earlier one)."""
    found = set()
    for name in shm_entries():
        match = _MAKER_PID.match(name)
        if match is None:
            continue
        pid = int(match.group(1) or match.group(2))
        if pid in pids and made_since(str(SHM_DIR / name), started_at(pids[pid])):
            found.add(str(SHM_DIR / name))
    return found
