"""What can heal, heals: a rollout worker (its env engines with it) or an inference worker that dies is started again
in place, and the run goes on.

The main process learns of the death from the supervisor (an exit, a missing heartbeat) and, for the kinds that can
heal, asks `Healer.take` instead of ending the run. A restart:

1. ends what the dead process left (the processes it started, noted while it ran: its env engines, which this process
   adopted; no other process of the run), and the /dev/shm names of the run nobody holds any more;
2. moves the dead process's inbox, or its policy's, to a fresh queue of the spare pool (a spare no process uses any
   more is renewed and goes back to the pool: `sf.supervision.queue_locks.renew`) and starts a new generation
   of the incarnations block (`sf.supervision.incarnations`): every process drops the dead one's work and answers,
   and points its routes at the new queue; the runner's routes (training info, PBT's reward shaping) move at once
   (`follow`), so nothing keeps writing into the queue left behind;
3. once every process that could hold that work has acknowledged, starts the replacement from the fork server, with
   the same name and heartbeat slot.

It is one line in the log (with the cause the component reported, when it did), a counter in summary.json and
TensorBoard. A queue lock the dead process held (it died inside a put or a get) is taken back first, on proof that
its holder is dead (`sf.supervision.queue_locks`): a lock a live thread may hold is never touched. The restart is
refused, and the run ends as it would without it, when
`--restart_failed_components=False`, for a learner or the fork server, past `--max_component_restarts` restarts of
one component within an hour, or when no spare queue comes back to the pool within `SPARE_WAIT_S` (a restart that
finds every spare on its way back waits for one).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sf.supervision.incarnations import ORIGINAL, Incarnations
from sf.supervision.orphans import end_processes, unlink_unused
from sf.supervision.queue_locks import dead_holders, idle, renew, repair, wake_sleepers
from sf.supervision.shm_names import named_after
from sf.supervision.supervisor import Failure, Supervisor
from sf.utils.errors import traceback_line
from sf.utils.roles import rollout_worker_name

log = logging.getLogger("sf")

HOUR_S = 3600.0
SPARE_WAIT_S = 30.0  # the longest a restart waits for a spare queue to come back to the pool


@dataclass
class Restart:
    """One restart, as summary.json lists it."""

    component: str
    cause: str
    at_s: float
    pid: int | None = None  # of the replacement
    waiting_for: list[int] = field(default_factory=list)  # heartbeat slots whose acknowledgement it awaits
    gen: int = 0
    then: Callable[[], None] | None = None  # a second step once acknowledged (an inference worker's policy queue)

    def to_dict(self) -> dict:
        return {"component": self.component, "cause": self.cause, "at_s": round(self.at_s, 3), "pid": self.pid}


@dataclass(frozen=True)
class Process:
    """A restartable component process: its kind and indices as `start_component_process` takes them."""

    kind: str
    a: int
    b: int | None
    slot: int


class RestartBudget:
    """At most `per_hour` restarts of one component within any hour."""

    def __init__(self, per_hour: int):
        self.per_hour = per_hour
        self.times: dict[str, deque[float]] = {}

    def allows(self, label: str, now: float) -> bool:
        times = self.times.setdefault(label, deque())
        while times and now - times[0] > HOUR_S:
            times.popleft()
        return len(times) < self.per_hour

    def spend(self, label: str, now: float) -> None:
        self.times.setdefault(label, deque()).append(now)


def _nothing_on_the_way() -> bool:
    return True


class Healer:
    def __init__(
        self,
        cfg,
        supervisor: Supervisor,
        incarnations: Incarnations,
        queues: dict,
        spares: list,
        processes: dict[str, Process],
        colocated: bool,
        start: Callable[[Process], int] | None = None,
    ):
        """`processes`: every component process by label; `colocated`: inference workers live in the rollout workers'
        processes; `start(process)` starts one again and returns its pid (set once the processes started)."""
        self.cfg = cfg
        self.supervisor = supervisor
        self.inc = incarnations
        self.queues = queues
        self.spares = spares
        self.free = list(range(len(spares)))  # spares no process uses
        # (spare, generation after which no other process routes to it, whether this process's messages to it left)
        self.retired: list[tuple[int, int, Callable[[], bool]]] = []
        # points this process's routes at the queues now in use; returns whether what it sent before has left
        self.follow: Callable[[], Callable[[], bool]] | None = None
        self.processes = processes
        self.start = start
        self.budget = RestartBudget(cfg.max_component_restarts)
        self.started = time.monotonic()
        self.causes: dict[str, str] = {}  # process label -> the error its component reported before it died
        self.pending: list[Restart] = []
        self.waiting: list[tuple[str, str, float]] = []  # (process, cause, since): restarts waiting for a spare
        self.done: list[Restart] = []
        self.colocated = colocated

    # what can heal --------------------------------------------------------------------------------------------
    def process_of(self, component: str) -> str | None:
        """The label of the restartable process `component` lives in (an inference worker beside a rollout worker
        lives in that worker's process), or None."""
        if component in self.processes and self.processes[component].kind in ("rollout", "inference"):
            return component
        if self.colocated and component.startswith("InferenceWorker_p"):
            return rollout_worker_name(int(component.rsplit("-w", 1)[1]))
        return None

    def takes_error(self, component: str, report: str) -> bool:
        """A component reported an error before its process exits: kept as the cause of the restart to come (True),
        or not a component that restarts (False: the run ends with it)."""
        label = self.process_of(component) if self.cfg.restart_failed_components else None
        if label is None:
            return False
        self.causes[label] = f"{component}: {traceback_line(report)}"
        log.error("%s failed:\n%s", component, report)
        return True

    def take(self, failure: Failure) -> str | None:
        """Start restarting the process `failure` names: None when under way, else the error that ends the run (the
        failure as it is where nothing restarts: a learner, the fork server, restarts switched off)."""
        label = failure.label
        process = self.processes.get(label)
        if not self.cfg.restart_failed_components or process is None or process.kind not in ("rollout", "inference"):
            return str(failure)
        cause = self.causes.pop(label, None) or str(failure)
        refused = self._refused(label, time.monotonic())
        if refused is not None:
            return f"{cause}; not restarted: {refused}"
        self.budget.spend(label, time.monotonic())
        self._clear_remains(label)
        if not self.free:  # every spare is on its way back to the pool (renewed once nobody uses it): wait for one
            log.warning("%s waits for a spare queue to come back to the pool before it restarts", label)
            self.waiting.append((label, cause, time.monotonic()))
            return None
        self._begin(label, cause)
        return self.poll()

    def _begin(self, label: str, cause: str) -> None:
        """Move the dead process's inbox (or its policy's) to a free spare and start a new generation."""
        process = self.processes[label]
        restart = Restart(label, cause, time.monotonic() - self.started)
        spare = self.free.pop(0)
        inc = self.inc
        if process.kind == "rollout":
            old = int(inc.worker_inbox[process.a])
            inc.worker_inbox[process.a] = spare
            inc.worker[process.a] += 1
            restart.waiting_for = self._slots(("learner", "inference"))
            restart.gen = inc.bump()
            self._retire(old, restart.gen)
        else:
            old = int(inc.policy_inbox[process.a])
            inc.policy_inbox[process.a] = spare
            restart.waiting_for = [
                p.slot
                for name, p in self.processes.items()
                if p.kind == "inference" and p.a == process.a and name != label
            ]

            def move_senders() -> None:  # once the siblings read the new queue: the rollout workers send there
                inc.policy_route[process.a] = spare
                self._retire(old, inc.bump())

            restart.then = move_senders
            restart.gen = inc.bump()
        self.pending.append(restart)

    def _retire(self, spare: int, gen: int) -> None:
        """After a move: this process's own routes follow it; the queue moved away from goes back to the pool once
        nobody can write to it any more."""
        sent = self.follow() if self.follow is not None else _nothing_on_the_way
        if spare != ORIGINAL:  # the queues the run started with are not renewed: the others hold them by name
            self.retired.append((spare, gen, sent))

    def _refused(self, label: str, now: float) -> str | None:
        if self.supervisor.server_failed:
            return "the fork server is gone"
        if not self.budget.allows(label, now):
            return f"{self.cfg.max_component_restarts} restart(s) within the last hour (--max_component_restarts)"
        if not self.free and not self.retired:
            return f"none of the {len(self.spares)} spare queues is free"
        every = {**self.queues, **{f"spare {i}": q for i, q in enumerate(self.spares)}}  # each process holds all
        locked = dead_holders(every, self.supervisor.ended_threads)
        if isinstance(locked, str):
            return locked
        for queue in every.values():  # it may have died between releasing a lock and waking who waited for it
            wake_sleepers(queue)
        for name, tid in locked.items():  # it died inside a put or a get: finish that for it, so that no one waits
            cut = repair(every[name])
            log.warning(
                "took back the lock of the queue %s from thread %d of %s, dead%s",
                name,
                tid,
                self._owner_of(tid, label),
                f" ({cut} bytes of a message it was writing cut off)" if cut else "",
            )
        return None

    def _owner_of(self, tid: int, label: str) -> str:
        child = self.supervisor.children.get(label)
        return label if child is not None and tid in child.threads else "a component that ended earlier"

    def _slots(self, kinds: tuple[str, ...]) -> list[int]:
        return [p.slot for name, p in self.processes.items() if p.kind in kinds and self.supervisor.running(name)]

    def _clear_remains(self, label: str) -> None:
        """End the processes the dead one started (its env engines: this process adopted them), and no other (an
        observer's helper, a profiler's wrapper), and remove the run's /dev/shm names that nobody holds now."""
        supervisor = self.supervisor
        child = supervisor.children[label]
        end_processes(supervisor.own_processes(label), supervisor.started)
        unlink_unused(supervisor.ledger.names(supervisor.started) | named_after({child.pid: child.started}))

    # under way ------------------------------------------------------------------------------------------------
    def poll(self) -> str | None:
        """Start each replacement whose acknowledgements are in, and each restart that waited for a spare queue once
        one is back (called from the runner's watch, ten times a second); the error that ends the run when a spare
        did not come back within `SPARE_WAIT_S`."""
        for restart in list(self.pending):
            live = [slot for slot in restart.waiting_for if self._slot_running(slot)]
            if not self.inc.acknowledged(live, restart.gen):
                continue
            self.pending.remove(restart)
            if restart.then is not None:
                restart.then()
            process = self.processes[restart.component]
            old = self.supervisor.children[restart.component].pid
            restart.pid = self.start(process)
            self.done.append(restart)
            log.warning(
                "%s (pid %s) restarted as pid %d after: %s (restart %d of at most %d an hour; "
                "--restart_failed_components=False ends the run instead)",
                restart.component,
                old,
                restart.pid,
                restart.cause,
                len(self.budget.times[restart.component]),
                self.cfg.max_component_restarts,
            )

        self._renew_retired()
        for waiting in list(self.waiting):
            label, cause, since = waiting
            if self.free:
                self.waiting.remove(waiting)
                self._begin(label, cause)
            elif time.monotonic() - since > SPARE_WAIT_S:
                spares = len(self.spares)
                return f"{cause}; not restarted: none of the {spares} spare queues came back within {SPARE_WAIT_S:g} s"
        return None

    def _renew_retired(self) -> None:
        """A retired spare every live process has moved away from, and that nobody is inside: as good as new."""
        live = self._slots(("learner", "inference", "rollout"))
        for retired in list(self.retired):
            spare, gen, sent = retired
            if self.inc.acknowledged(live, gen) and sent() and idle(self.spares[spare]):
                renew(self.spares[spare])
                self.retired.remove(retired)
                self.free.append(spare)

    def _slot_running(self, slot: int) -> bool:
        return any(p.slot == slot and self.supervisor.running(name) for name, p in self.processes.items())

    def summary(self) -> dict:
        return {
            "component_restarts": [restart.to_dict() for restart in self.done],
            "trajectories_dropped_for_restarts": int(self.inc.dropped.sum()),
        }
