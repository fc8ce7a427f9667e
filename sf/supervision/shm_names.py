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

The ledger is read as a list of files to delete, so it is trusted only as far as it can be checked:
- only /dev/shm names of the run's kinds count: the semaphores of its locks (`sem.*`), torch's tensors and
  multiprocessing's arenas (`torch_*`, `pym-*`) and the patterns env families declare (`register_env(...,
  shm_names=...)`), made since the run began; any other line (a path elsewhere, another name) is ignored with a warning,
  and an env start that makes a name of no such kind is told it will not be removed;
- the private folder is checked before each read and write: a folder (not a link), this user's, mode 700, the very
  folder the ledger was opened in (device and inode), and the ledger is opened without following links. A folder gone
  (a temp cleaner), replaced or loosened: the run removes none of the names the ledger lists (only those named after
  its processes, which need no ledger), leaves the folder alone and says so;
- a claim stands only for names made within CLAIM_WINDOW_S of its start (an env start takes seconds; a start slower
  than the heartbeat's start limit fails anyway), and settles in a `finally`, so an env start that raises leaves no
  claim open.

Limit: whether a name is in use is read from the processes this one can see. Containers sharing /dev/shm (Docker's
`--ipc=host`) but not the pid namespace hold segments whose holders are invisible here: such a segment looks held by
nobody. Recorded names are this run's own makings, so that costs nothing there; a claim could take a segment another
container's VizDoom made within its window, which is why the window is short.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import shutil
import stat
import tempfile
import time
import weakref
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
BASE_KINDS = ("sem.*", "torch_*", "pym-*")  # the run's locks' semaphores, torch's tensors, multiprocessing's arenas
CLAIM_WINDOW_S = 60.0  # a claim stands for the names made this long after it began, no later ones
_MAKER_PID = re.compile(r"^(?:torch_(\d+)_|pym-(\d+)-)")


class Ledger:
    """The names a run's processes made, one path a line. Appends of a line are atomic (O_APPEND, far below
    PIPE_BUF), so every process of the run writes the same file without a lock. `kinds`: glob patterns of the names
    the run makes (BASE_KINDS and its env families' patterns); no other name in the ledger is ever taken as the run's.
    """

    def __init__(self, path: str | Path, kinds: tuple[str, ...] = BASE_KINDS):
        self.path = Path(path)
        self.kinds = tuple(dict.fromkeys(kinds))
        self._distrust = _folder_problem(self.path.parent, None)
        self._dir_fd: int | None = None  # held open: the folder's inode cannot be reused by another while it is
        if self._distrust is None:
            try:
                self._dir_fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            except OSError as exc:
                self._distrust = f"cannot be opened ({exc.strerror})"
            else:
                weakref.finalize(self, os.close, self._dir_fd)

    def problem(self) -> str | None:
        """Why the private folder cannot be trusted now (gone, replaced, another's, loosened); None when it can."""
        if self._dir_fd is None:
            return f"could not be trusted when the run began: it {self._distrust}"
        opened = os.fstat(self._dir_fd)
        if opened.st_nlink == 0:
            return "is gone" if not os.path.lexists(self.path.parent) else "was replaced by another folder"
        return _folder_problem(self.path.parent, (opened.st_dev, opened.st_ino))

    def add(self, paths: Iterable[str]) -> None:
        self._append(f"{path}\n" for path in paths)

    def _append(self, lines: Iterable[str]) -> None:
        lines = "".join(lines)
        if not lines:
            return
        problem = self.problem()
        if problem is not None:
            log.warning(
                "cannot record the /dev/shm names %s: the run's folder %s %s", lines.split(), self.path.parent, problem
            )
            return
        try:
            fd = os.open(
                self.path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=self._dir_fd
            )
            try:
                os.write(fd, lines.encode())
            finally:
                os.close(fd)
        except OSError as exc:  # the run goes on; what it could not record may outlive it
            log.warning("cannot record the /dev/shm names %s in %s: %s", lines.split(), self.path, exc)

    def names(self, since: float | None = None) -> set[str]:
        """The names recorded, and those matching a claim never settled (its process died inside the block) made
        within its window, that exist now and are /dev/shm names of the run's kinds (made since `since`, the run's
        start, where given). None at all when the private folder or the ledger cannot be trusted."""
        lines = self._read()
        if lines is None:
            return set()
        names, ignored = set(), []
        for line in lines:
            if line.startswith(("claim ", "settled ")):
                continue
            if self.of_run(line):
                names.add(line)
            elif line.strip():
                ignored.append(line)
        claims = {fields[1]: fields[2:] for fields in (line.split() for line in lines) if fields[:1] == ["claim"]}
        for settled in (line.split()[1] for line in lines if line.startswith("settled ")):
            claims.pop(settled, None)
        for claim, patterns in claims.items():
            ignored += [f"claim of {pattern}" for pattern in patterns if pattern not in self.kinds]
            patterns = [pattern for pattern in patterns if pattern in self.kinds]
            begun = float(claim.rpartition("@")[2])
            names |= {
                str(SHM_DIR / name)
                for name in shm_entries()
                if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
                and made_since(str(SHM_DIR / name), begun)
                and not made_since(str(SHM_DIR / name), begun + CLAIM_WINDOW_S)
            }
        if ignored:
            log.warning(
                "%s: ignored %d line(s) that are not /dev/shm names of the run's kinds (%s): %s",
                self.path,
                len(ignored),
                " ".join(self.kinds),
                ", ".join(ignored[:5]) + (", ..." if len(ignored) > 5 else ""),
            )
        if since is not None:
            names = {name for name in names if made_since(name, since)}
        return {name for name in names if os.path.lexists(name)}

    def of_run(self, path: str) -> bool:
        """`path` is a /dev/shm name (no other folder, no `..`) of one of the run's kinds."""
        folder, _, name = path.rpartition("/")
        return (
            folder == str(SHM_DIR)
            and name not in ("", ".", "..")
            and any(fnmatch.fnmatchcase(name, kind) for kind in self.kinds)
        )

    def _read(self) -> list[str] | None:
        """The ledger's lines; None (said in a warning) when its folder or the file itself cannot be trusted."""
        problem = self.problem()
        if problem is None:
            try:
                fd = os.open(self.path.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self._dir_fd)
            except FileNotFoundError:
                return []  # nothing recorded yet
            except OSError as exc:
                problem = f"holds a ledger that cannot be opened ({exc.strerror})"
            else:
                with os.fdopen(fd, "rb") as file:
                    held = os.fstat(file.fileno())
                    if not stat.S_ISREG(held.st_mode) or held.st_uid != os.getuid():
                        problem = "holds a ledger that is not this user's file"
                    else:
                        return file.read().decode(errors="replace").splitlines()
        log.warning(
            "the run's private folder %s %s: none of the /dev/shm names it lists is removed, only those named after "
            "the run's own processes",
            self.path.parent,
            problem,
        )
        return None

    @contextmanager
    def recording(self, patterns: tuple[str, ...] = ()) -> Iterator[None]:
        """Record the names made inside the block by this process or its children (an env's engines): new since
        the block began, and held by one of them at its end. `patterns` (the names an env family's engines make)
        are claimed while the block runs; the claim settles however the block ends."""
        claim = f"{os.getpid()}@{time.time():.3f}"
        if patterns:
            self._append([f"claim {claim} {' '.join(patterns)}\n"])
        before = shm_entries()
        try:
            yield
        finally:
            new = {str(SHM_DIR / name) for name in shm_entries() - before}
            if new:
                self._record_held(new, (*self.kinds, *patterns))
            if patterns:
                self._append([f"settled {claim}\n"])

    def _record_held(self, new: set[str], kinds: tuple[str, ...]) -> None:
        makers = {os.getpid()} | descendants({os.getpid()})
        held = set().union(*(shm_files(pid) for pid in makers))
        inodes = set().union(*(shm_inodes(pid) for pid in makers))  # a semaphore is mapped under another name
        made = sorted(path for path in new if path in held or inode(path) in inodes)
        known = [path for path in made if any(fnmatch.fnmatchcase(Path(path).name, kind) for kind in kinds)]
        unknown = sorted(set(made) - set(known))
        if unknown:
            log.warning(
                "an env start made %s, of no kind its family declares (register_env(..., shm_names=...)): the run "
                "will not remove it",
                ", ".join(unknown),
            )
        self.add(known)


def new_ledger(kinds: tuple[str, ...] = BASE_KINDS) -> Ledger:
    """A ledger in a new private folder (mode 700, under the system's temporary folder)."""
    return Ledger(Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX)) / LEDGER_FILE, kinds)


def remove_private_dir(ledger: Ledger) -> None:
    """The run is over: its private folder goes (`new_ledger`'s; a ledger elsewhere stays), unless it is no longer
    the folder the run made (then it stays, with a warning)."""
    if not ledger.path.parent.name.startswith(PRIVATE_PREFIX):
        return
    problem = ledger.problem()
    if problem is not None:
        if os.path.lexists(ledger.path.parent):
            log.warning("left %s as it is: the run's private folder %s", ledger.path.parent, problem)
        return
    shutil.rmtree(ledger.path.parent, ignore_errors=True)


def _folder_problem(folder: Path, identity: tuple[int, int] | None) -> str | None:
    """Why `folder` is not (or no longer) the run's private folder: a folder, not a link, this user's, mode 700 and,
    given `identity` (device, inode), the very one the run made."""
    try:
        held = os.lstat(folder)
    except FileNotFoundError:
        return "is gone"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(held.st_mode):
        return "was replaced by a symbolic link"
    if not stat.S_ISDIR(held.st_mode):
        return "is not a folder"
    if held.st_uid != os.getuid():
        return f"belongs to another user (uid {held.st_uid})"
    if stat.S_IMODE(held.st_mode) != 0o700:
        return f"has mode {stat.S_IMODE(held.st_mode):o}, not 700"
    if identity is not None and (held.st_dev, held.st_ino) != identity:
        return "was replaced by another folder"
    return None


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
