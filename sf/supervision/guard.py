"""The run's guard: a small process that outlives the main process by a few seconds and ends what it left behind.

Components stop by themselves when the main process dies (`sf.supervision.parent_link`), but one that is stuck (on a
queue lock a dead process left taken) or stopped (SIGSTOP) cannot, and a serial run's VizDoom engines never notice
that the process driving them is gone. The supervisor starts this guard first, with a pipe on its stdin that only the
main process holds, and tells it each process it starts (`watch <pid> <start time>`; `follow` and `unfollow`
around a serial run's start, while it follows every child the main process has). End of file without `done`
means the main process died: the guard gives the watched processes `GRACE_S` to end, kills those still there and the
followed ones (env engines, which never notice) with every process below them, then unlinks the /dev/shm names the
run owns (`sf.supervision.shm_names`: those in its ledger, those named after one of its processes, those the processes
it killed held and the run made) once nobody holds them, and removes the run's private folder. Nothing else in
/dev/shm is touched, whatever appeared there during the run.

Run as `python -m sf.supervision.guard <main pid> <ledger>`: it imports nothing heavy, and runs in a session of its own,
so that a signal to the run's process group does not reach it (Ctrl-C lets the main process end the run in order and
say `done`; `kill -9 -<pgid>` leaves the guard to end what is left). It ignores SIGINT and SIGTERM all the same.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

from sf.supervision.orphans import (
    child_pids,
    descendants,
    describe,
    held_since,
    running,
    start_time,
    unlink_unused,
)
from sf.supervision.shm_names import Ledger, named_after, remove_private_dir

GRACE_S = 3.0
POLL_S = 0.1
FOLLOW_S = 0.1  # how often the children of the main process are looked for while it starts its envs


class Guard:
    """The main process's handle on the guard."""

    def __init__(self, ledger: Ledger, detached: bool = False):
        """`ledger`: the run's record of the /dev/shm names it made, in the run's private folder, which the guard
        also works in. `detached`: the guard forks itself away at once, so that it is not this process's child. A Ray
        node agent needs that: Ray ends an actor by killing it and its children together, so a guard that is a child
        dies with the agent, before it can remove what the agent left. `pid` is then the launcher's, gone at once."""
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sf.supervision.guard",
                str(os.getpid()),
                str(ledger.path),
                *(["--detached"] if detached else []),
            ],
            stdin=subprocess.PIPE,
            text=True,
            close_fds=True,
            start_new_session=True,
            cwd=ledger.path.parent,
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
    watched: dict[int, int | None], followed: dict[int, int | None], since: float, grace_s: float = GRACE_S
) -> tuple[list[str], set[str]]:
    """Wait up to `grace_s` for the watched processes (pid -> start time) to end, then kill the rest, the followed
    ones (which cannot notice the death: env engines) and everything below them. The processes ended, described, and
    the /dev/shm files they held that the run made (since `since`)."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(
        started is not None and running(pid, started) for pid, started in watched.items()
    ):
        time.sleep(POLL_S)
    # a pid whose start time could not be read names no process for sure: it may be another's by now
    roots = {pid for pid, started in {**watched, **followed}.items() if started is not None and running(pid, started)}
    victims = sorted(roots | descendants(roots))
    names = [describe(pid) for pid in victims]
    shm = held_since(victims, since)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(running(pid) for pid in victims):
        time.sleep(POLL_S)
    return names, shm


def main(main_pid: int, ledger: Ledger, detached: bool = False) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if detached and os.fork() > 0:
        os._exit(0)
    since = time.time()  # the run's start: what its processes hold and was made since is the run's
    makers = {main_pid: start_time(main_pid)}  # every process of the run, for the names made after their pid
    watched: dict[int, int | None] = {}
    followed: dict[int, int | None] = {}
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
            following = {"follow": True, "unfollow": False}.get(word, following)
    ended, held = end_left_behind(watched, followed, since)
    makers.update(watched)
    makers.update(followed)
    unlink_unused(ledger.names() | named_after(makers) | held)
    remove_private_dir(ledger)
    if ended:
        print(
            f"sf: the main process (pid {main_pid}) died; ended {len(ended)} process(es) it left: {', '.join(ended)}",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    main(int(sys.argv[1]), Ledger(sys.argv[2]), detached="--detached" in sys.argv[3:])
