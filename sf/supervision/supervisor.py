"""The one owner of a run's process lifetimes: start, the link to the main process, watching, ordered stop, the
end-of-run check.

- Start: component processes are forked from a server that imported torch and sf once (`sf.supervision.process_start`),
  or spawned where an external profiler wraps them. The server dies with the main process (PR_SET_PDEATHSIG).
- Link: each component watches the main process through a pipe it holds (`parent_link`) and stops, closing
  its envs, the moment that process is gone; a guard process (`guard`) ends, a few seconds later, whatever
  could not stop by itself (stuck, stopped, or a serial run's env engines).
- Watching (`poll`, ten times a second from the runner's loop): a process that exited, the fork server gone, or a
  process whose heartbeat counter (`sf.supervision.shared_flags`, bumped by its loop every HEARTBEAT_S, and by a thread
  for up to START_LIMIT_S while it starts) has not moved for `--heartbeat_timeout_sec` is a failure, named in one line.
- Stop: after the runner set the stop flag and collected the final profiles, a process that did not report within the
  grace period is killed with a warning; processes left behind by killed components (env engines: this process is a
  Linux child subreaper and adopts them) are ended and their /dev/shm files unlinked; the fork server is stopped.
- End-of-run check: no process of the run and no /dev/shm file it made may outlive it; whatever did is ended, removed
  and named in a warning. What the run made is known by name (`sf.supervision.shm_names`: its ledger, the names carrying
  one of its processes' pids, the files its leftover processes held and it made); nothing else in /dev/shm is
  touched.

Nothing here unlocks a queue or a lock that a dead process held (`sf.runner.mailbox` says why).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from typing import Any

from sf.supervision import process_start
from sf.supervision.guard import Guard
from sf.supervision.orphans import (
    adopt_orphans,
    child_pids,
    describe,
    end_orphans,
    running,
    start_time,
    unlink_unused,
)
from sf.supervision.shared_flags import RunControl
from sf.supervision.shm_names import named_after, new_ledger, remove_private_dir

log = logging.getLogger("sf")

HEARTBEAT_S = 0.5  # how often a component's loop bumps its counter
START_LIMIT_S = (
    60.0  # how long a starting component is not asked for loop beats (`sf.supervision.shared_flags.Heartbeat`)
)
STALL_S = 2.0  # a gap this long between two polls means this process itself was stopped: heartbeats start afresh
REAP_POLL_S = 0.02


@dataclass(frozen=True)
class Failure:
    """What `poll` found: `label` (a component, or the fork server) and what happened to it."""

    label: str
    cause: str

    def __str__(self) -> str:
        return f"{self.label} {self.cause}"


@dataclass
class Child:
    """A process of the run (`pid` set), or a process-like handle started elsewhere (a Ray node's link)."""

    label: str
    handle: Any  # multiprocessing.Process, or anything with exitcode / kill / join / is_alive
    slot: int | None = None
    pid: int | None = None
    started: int | None = None  # start time of `pid` (clock ticks since boot)
    failed: bool = False  # its end was reported as a failure
    last_beat: float = field(default_factory=time.monotonic)


class Supervisor:
    def __init__(self, num_slots: int = 0, heartbeat_timeout_s: float = 60.0, detached_guard: bool = False):
        self.started = time.time()
        self.ledger = new_ledger()  # the /dev/shm names the run's processes make, in the run's private folder
        self.guard = Guard(self.ledger, detached_guard)
        self.control = RunControl(mp.get_context("spawn"), num_slots)
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.children: dict[str, Child] = {}
        self.adopted = adopt_orphans()
        self.keep: set[int] = set()
        self.server: tuple[int, int | None] | None = None
        self.server_failed = False
        self.makers: dict[int, int | None] = {os.getpid(): start_time(os.getpid())}  # every process the run started
        self._beats = self.control.beats()
        self._last_poll: float | None = None
        self._following = False

    # start ----------------------------------------------------------------------------------------------------
    def begin(self) -> None:
        """Before the first start: the children this process has now (the resource tracker, the guard) are not the
        run's, and stay."""
        self.keep = child_pids()

    def context(self, preload: list[str], single_thread: bool) -> BaseContext:
        """The context to start component processes from (`sf.supervision.process_start.component_context`)."""
        ctx = process_start.component_context(preload, single_thread)
        for pid in process_start.server_pids():
            self.server = (pid, start_time(pid))
            self.makers[pid] = self.server[1]
            self.guard.watch(pid)
        return ctx

    @property
    def private_dir(self):
        """The run's own folder (mode 700): the working folder of the processes it starts."""
        return self.ledger.path.parent

    def own(self, paths: list[str]) -> None:
        """/dev/shm names this process made (its locks' semaphores): removed once the run is over, however it ends."""
        self.ledger.add(paths)

    def start(
        self, label: str, proc: mp.Process, slot: int | None = None, launch: AbstractContextManager | None = None
    ) -> mp.Process:
        """Start `proc` (inside `launch`: environment variables, a profiler's wrapper) and watch it."""
        with launch or nullcontext():
            proc.start()
        self.children[label] = Child(label, proc, slot, proc.pid, start_time(proc.pid))
        self.makers[proc.pid] = self.children[label].started
        self.guard.watch(proc.pid)
        return proc

    def add(self, label: str, handle: Any) -> None:
        """Watch a process-like handle started elsewhere: its exit code is a failure like a process's."""
        self.children[label] = Child(label, handle)

    def follow_children(self, following: bool) -> None:
        """While on, the guard watches every process this one starts by itself (a serial run's env engines)."""
        if following != self._following:
            self._following = following
            self.guard.follow_children(following)

    # watching -------------------------------------------------------------------------------------------------
    def poll(self) -> list[Failure]:
        """Each failure seen since the last call: a process that exited, the fork server gone, a heartbeat missing
        for longer than the timeout."""
        now = time.monotonic()
        if self._last_poll is not None and now - self._last_poll > STALL_S:
            for child in self.children.values():
                child.last_beat = now
        self._last_poll = now
        failures = []
        if self._server_gone() and not self.server_failed:
            self.server_failed = True
            failures.append(Failure("the fork server", f"(pid {self.server[0]}) died"))
        for child in self.children.values():
            if child.failed:
                continue
            code = self._exitcode(child)
            if code is not None:
                child.failed = True
                failures.append(Failure(child.label, f"exited with code {code}{_signal_name(code)}"))
        failures += self._check_heartbeats(now)
        return failures

    def _check_heartbeats(self, now: float) -> list[Failure]:
        beats = self.control.beats()
        missed = []
        for child in self.children.values():
            if child.slot is None or child.failed:
                continue
            if beats[child.slot] != self._beats[child.slot]:
                child.last_beat = now
            elif now - child.last_beat > self.heartbeat_timeout_s:
                child.failed = True
                self._kill(child)  # stopped or hung, it would only be killed at the end of the grace period
                missed.append(
                    Failure(
                        child.label,
                        f"(pid {child.pid}) sent no heartbeat for {self.heartbeat_timeout_s:g} s "
                        f"(--heartbeat_timeout_sec): stopped or hung",
                    )
                )
        self._beats = beats
        return missed

    def _server_gone(self) -> bool:
        return self.server is not None and not running(*self.server)

    def _exitcode(self, child: Child) -> int | str | None:
        """The exit code, None while it runs. Once the fork server is gone its children's exit codes are lost with it
        (multiprocessing reads them from the server): /proc then tells whether they run."""
        if child.pid is None:
            return child.handle.exitcode
        if self.server_failed or self._server_gone():
            return None if running(child.pid, child.started) else "unknown"
        return child.handle.exitcode

    def running(self, label: str) -> bool:
        child = self.children[label]
        if child.pid is None:
            return child.handle.exitcode is None
        return running(child.pid, child.started)

    def all_ended(self) -> bool:
        return not any(self.running(label) for label in self.children)

    # stop -----------------------------------------------------------------------------------------------------
    def stop(
        self,
        reported: set[str],
        grace: float,
        crashed: bool,
        exit_wait_s: float,
        starting: frozenset[str] = frozenset(),
    ) -> None:
        """The end of a run whose stop flag is set and whose final profiles were collected (those of `reported`):
        kill what did not report, give the rest `exit_wait_s` to exit, end what the run left behind. `starting`: the
        learners still starting up, which have trained nothing a kill could lose."""
        for label, child in self.children.items():
            if label not in reported and self.running(label):
                log.warning("%s", _kill_warning(label, grace, crashed, label in starting))
                self._kill(child)
        deadline = time.monotonic() + exit_wait_s
        while time.monotonic() < deadline and not self.all_ended():
            time.sleep(REAP_POLL_S)
        for label, child in self.children.items():
            if self.running(label):
                log.warning("%s sent its profile but did not exit within %.0f s: killing it", label, exit_wait_s)
                self._kill(child)
        for child in self.children.values():
            if child.pid is None:
                child.handle.join(timeout=1.0)
        self._reap_adopted()
        end_orphans(self.keep | process_start.server_pids(), self.started)  # a killed worker's engines
        process_start.stop_server()
        self.end_check()
        self.guard.done()
        remove_private_dir(self.ledger)
        if self.adopted:
            adopt_orphans(False)

    def _kill(self, child: Child) -> None:
        if child.pid is None:
            child.handle.kill()
            return
        if child.started is not None and running(child.pid, child.started):  # never a pid it cannot identify
            try:
                os.kill(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and running(child.pid, child.started):
            time.sleep(REAP_POLL_S)

    def _reap_adopted(self) -> None:
        """Reap, quietly, children of the run that ended by themselves and are ours to reap: the components, once
        the fork server that started them is gone (they were adopted)."""
        for pid in child_pids() - self.keep - process_start.server_pids():
            if not running(pid):
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def end_check(self) -> tuple[list[str], list[str]]:
        """No process and no /dev/shm file of the run may be left: end and remove what is, with a warning; return
        (processes, files) found."""
        self._reap_adopted()  # the fork server's children it could not reap before it exited
        left = sorted(pid for pid in child_pids() - self.keep - process_start.server_pids() if running(pid))
        names = [describe(pid) for pid in left]
        if left:
            end_orphans(self.keep | process_start.server_pids(), self.started)
        removed = unlink_unused(self.ledger.names() | named_after(self.makers))
        if names or removed:
            log.warning(
                "end-of-run check: %d process(es) and %d /dev/shm file(s) of the run were left: %s",
                len(names),
                len(removed),
                ", ".join(names + removed),
            )
        return names, removed


def _signal_name(code: int | str) -> str:
    if isinstance(code, int) and code < 0:
        try:
            return f" ({signal.Signals(-code).name})"
        except ValueError:
            return ""
    return ""


def _kill_warning(label: str, grace: float, crashed: bool, starting: bool = False) -> str:
    if label.startswith("Learner") and starting:  # interrupted as it started: more time to stop would save nothing
        return f"{label} did not stop within {grace:.0f} s, still starting (it had trained nothing): killing it"
    lost = (
        " (most likely in the middle of a training iteration; no final checkpoint)"
        if label.startswith("Learner")
        else ""
    )
    if crashed:
        return f"{label} did not stop within {grace:.0f} s after the failure{lost}: killing it"
    return (
        f"{label} did not stop within --stop_timeout_sec={grace:.0f} s{lost}: killing it; "
        f"raise --stop_timeout_sec to let it finish"
    )
