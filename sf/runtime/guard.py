"""The run's guard: a small process that outlives the main process by a few seconds and ends what it left behind.

Components stop by themselves when the main process dies (`sf.runtime.parent_link`), but one that is stuck (on a
queue lock a dead process left taken) or stopped (SIGSTOP) cannot, and a serial run's VizDoom engines never notice
that the process driving them is gone. The supervisor starts this guard first, with a pipe on its stdin that only the
main process holds, and tells it each process it starts (`watch <pid> <start time>`; `follow` and `unfollow`
around a serial run's start, while it follows every child the main process has). End of file without `done`
means the main process died: the guard first unlinks the names the main process handed over (`own <path>`), then
gives the watched processes `GRACE_S` to end, kills those still there and the followed ones (env engines, which never
notice) with every process below them, and unlinks the /dev/shm files they held that nobody else holds, and those
made since the guard started that nobody holds (the files of processes that died with the main process, as all do
under `kill -9 -<pgid>`: the rule of the supervisor's end-of-run check).

Run as `python -m sf.runtime.guard <main pid>`: it imports nothing heavy, and runs in a session of its own, so that
a signal to the run's process group does not reach it (Ctrl-C lets the main process end the run in order and say
`done`; `kill -9 -<pgid>` leaves the guard to end what is left). It ignores SIGINT and SIGTERM all the same.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from sf.runtime.orphans import (
    SHM_SETTLE_S,
    child_pids,
    descendants,
    describe,
    left_since,
    running,
    shm_entries,
    shm_files,
    start_time,
    unlink_unused,
)

GRACE_S = 3.0
POLL_S = 0.1
FOLLOW_S = 0.1  # how often the children of the main process are looked for while it starts its envs


class Guard:
    """The main process's handle on the guard."""

    def __init__(self, detached: bool = False):
        """`detached`: the guard forks itself away at once, so that it is not this process's child. A Ray node agent
        needs that: Ray ends an actor by killing it and its children together, so a guard that is a child dies with
        the agent, before it can remove what the agent left. `pid` is then the launcher's, gone at once."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sf.runtime.guard", str(os.getpid()), *(["--detached"] if detached else [])],
            stdin=subprocess.PIPE,
            text=True,
            close_fds=True,
            start_new_session=True,
        )
        if detached:
            self.proc.wait()  # the launcher exits once it has forked the guard, which keeps the pipe

    @property
    def pid(self) -> int:
        return self.proc.pid

    def watch(self, pid: int) -> None:
        self._say(f"watch {pid} {start_time(pid)}")

    def follow_children(self, following: bool) -> None:
        """While on, the guard watches every child this process starts, as it appears (a serial run's env engines,
        started inside the loop's first steps, before this process could name them)."""
        self._say("follow" if following else "unfollow")

    def own(self, paths: list[str]) -> None:
        """/dev/shm names only this process's resource tracker would remove, which the guard unlinks the moment
        this process dies: its named semaphores. The tracker can die with this process: a SIGKILL to the whole
        process group takes it along, and Ray kills a node agent together with its children."""
        for path in paths:
            self._say(f"own {path}")

    def done(self) -> None:
        """The run ended in order: the guard leaves without touching anything."""
        self._say("done")
        self.proc.stdin.close()
        self.proc.wait()

    def _say(self, line: str) -> None:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # the guard is gone (killed with the process group)
            pass


def end_left_behind(
    watched: dict[int, int | None], followed: dict[int, int | None], grace_s: float = GRACE_S
) -> list[str]:
    """Wait up to `grace_s` for the watched processes (pid -> start time) to end, then kill the rest, the followed
    ones (which cannot notice the death: env engines) and everything below them; unlink the /dev/shm files they held
    that no live process holds. The processes ended, described."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(running(pid, started) for pid, started in watched.items()):
        time.sleep(POLL_S)
    roots = {pid for pid, started in {**watched, **followed}.items() if running(pid, started)}
    victims = sorted(roots | descendants(roots))
    names = [describe(pid) for pid in victims]
    shm = set().union(set(), *(shm_files(pid) for pid in victims))
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(running(pid) for pid in victims):
        time.sleep(POLL_S)
    unlink_unused(shm)
    return names


def main(main_pid: int, detached: bool = False) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if detached and os.fork() > 0:
        os._exit(0)
    shm_before = shm_entries()  # before the run made any: what is new at its death is the run's or nobody's
    watched: dict[int, int | None] = {}
    followed: dict[int, int | None] = {}
    owned: list[str] = []
    following = False  # while the main process starts its envs, every child it has is followed as it appears
    pending = b""
    while True:
        if following:
            new = child_pids(main_pid) - {os.getpid()} - watched.keys() - followed.keys()
            followed.update({pid: start_time(pid) for pid in new})
        ready, _, _ = select.select([sys.stdin.fileno()], [], [], FOLLOW_S if following else None)
        if not ready:
            continue
        data = os.read(sys.stdin.fileno(), 4096)
        if not data:
            break  # the main process is gone without a word
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            word, *args = line.decode().split()
            if word == "done":
                return
            if word == "watch":
                watched[int(args[0])] = None if args[1] == "None" else int(args[1])
            if word == "own":
                owned.append(args[0])
            following = {"follow": True, "unfollow": False}.get(word, following)
    died = time.monotonic()
    for path in owned:  # the run is over: no process opens these again, and those open stay usable
        Path(path).unlink(missing_ok=True)
    ended = end_left_behind(watched, followed)
    # files of processes dead before the guard could look at them (every process of the run killed at once): any
    # made since the start that nobody holds, once the youngest of the run's is past the settle time
    time.sleep(max(0.0, died + SHM_SETTLE_S - time.monotonic()))
    unlink_unused(left_since(shm_before))
    if ended:
        print(
            f"sf: the main process (pid {main_pid}) died; ended {len(ended)} process(es) it left: {', '.join(ended)}",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    main(int(sys.argv[1]), detached="--detached" in sys.argv[2:])
