"""Restarting a component in place while the others go on: who is which incarnation, and the fence every process
passes before a replacement starts.

A rollout worker that died leaves work in other processes: its trajectories waiting in a batcher, its requests in
an inference worker, messages on their way. The replacement must not meet any of it, and must not read the inbox
the dead one waited on (faster-fifo queues wait on process-shared condition variables, which a process killed
while waiting leaves unusable for the next waiter: a put then blocks for good). So a restart goes through one shared
block of 64-bit words (`Incarnations`; aligned loads and stores are atomic, one writer per word):

- `gen` counts the restarts; every process compares it with the one it saw at the end of each loop iteration and,
  when it moved, catches up (`Fence.catch_up`) and acknowledges the new `gen` in its word of `ack`;
- `worker[w]` is rollout worker w's incarnation: its requests and trajectories carry it, and those of a dead
  incarnation are dropped wherever they arrive; catching up, a batcher drops what it holds of w, an inference worker
  the requests of w it has not served;
- `worker_inbox[w]` / `policy_inbox[p]` / `policy_route[p]`: which queue of the spare pool now serves as w's inbox,
  as policy p's inbox (what its inference workers read) and as where rollout workers send p's requests. A dead
  inference worker's policy queue is replaced in two steps: its surviving siblings move to the new queue and drop
  what they took from the old one, then (their acknowledgements in) the rollout workers move and send their
  unanswered requests again, each under a new number, so a late answer to the old one is recognized and ignored;
- `dropped[slot]`: trajectories each process dropped for a restart, for the summary.

The main process (`sf.supervision.healer`) writes the block and starts the replacement once every process that could
hold the dead one's work has acknowledged. A serial run keeps the same block in local memory and catches up at once.
"""

from __future__ import annotations

import ctypes

import numpy as np

from sf.utils.roles import policy_queue_name, rollout_worker_name

ORIGINAL = -1  # the queue the run started with, not one of the spares


class Incarnations:
    def __init__(self, num_slots: int, num_workers: int, num_policies: int, ctx=None):
        """`ctx` (a multiprocessing context): in shared memory for a parallel run; None: in this process's memory."""
        size = 1 + num_slots + 2 * num_workers + 2 * num_policies + num_slots
        self.shape = (num_slots, num_workers, num_policies)
        self._raw = ctx.RawArray(ctypes.c_int64, size) if ctx is not None else bytearray(8 * size)
        self._attach()
        self.worker_inbox[:] = ORIGINAL
        self.policy_inbox[:] = ORIGINAL
        self.policy_route[:] = ORIGINAL

    def _attach(self) -> None:
        words = np.frombuffer(self._raw, dtype=np.int64)
        s, w, p = self.shape
        cuts = np.cumsum([1, s, w, w, p, p, s])
        self.words = words
        self.ack, self.worker, self.worker_inbox, self.policy_inbox, self.policy_route, self.dropped = (
            words[a:b] for a, b in zip(cuts[:-1], cuts[1:])
        )

    def __getstate__(self) -> dict:
        return {"_raw": self._raw, "shape": self.shape}

    def __setstate__(self, state: dict) -> None:
        self._raw, self.shape = state["_raw"], state["shape"]
        self._attach()

    @property
    def gen(self) -> int:
        return int(self.words[0])

    def bump(self) -> int:
        """A new generation (the main process alone writes it): every process catches up and acknowledges it."""
        self.words[0] += 1
        return self.gen

    def acknowledged(self, slots: list[int], gen: int) -> bool:
        return all(self.ack[slot] >= gen for slot in slots)


class WorkerIncarnations:
    """What a batcher or an inference worker reads of the block: each rollout worker's incarnation; and where it
    counts the trajectories it dropped for a restart (its process's word of `dropped`)."""

    def __init__(self, incarnations: Incarnations, slot: int):
        self.of = incarnations.worker
        self._dropped = incarnations.dropped
        self._slot = slot

    def count_dropped(self, trajectories: int) -> None:
        self._dropped[self._slot] += trajectories


class Fence:
    """A process's side of restarts: at the end of each loop iteration (after its messages went out, so that
    whatever it answered is on its way before it acknowledges), one word read; when `gen` moved, it catches up."""

    def __init__(self, incarnations: Incarnations, slot: int | None, spares: list, loop):
        self.inc = incarnations
        self.slot = slot
        self.spares = spares  # the spare queues, in pool order
        self.loop = loop
        self.seen = incarnations.gen
        self.worker = incarnations.worker.copy()
        self.worker_inbox = incarnations.worker_inbox.copy()
        self.policy_inbox = incarnations.policy_inbox.copy()
        self.policy_route = incarnations.policy_route.copy()
        self.follow_routes()
        if slot is not None:  # a process started now knows every restart so far
            incarnations.ack[slot] = self.seen

    def moved(self) -> bool:
        return self.inc.words[0] != self.seen

    def follow_routes(self) -> None:
        """Point this loop's routes (and, for an inference process, its inbox) at the queues now in use."""
        loop, inc = self.loop, self.inc
        for w, index in enumerate(inc.worker_inbox):
            name = rollout_worker_name(w)
            if index != ORIGINAL and name in loop.routes:
                loop.routes[name] = self.spares[index]
        for p, index in enumerate(inc.policy_route):
            name = policy_queue_name(p)
            if index != ORIGINAL and name in loop.routes:
                loop.routes[name] = self.spares[index]
        for p, index in enumerate(inc.policy_inbox):
            if index != ORIGINAL and policy_queue_name(p) in loop.aliases and loop.inbox is not None:
                loop.switch_inbox(self.spares[index])

    def catch_up(self) -> None:
        inc, loop = self.inc, self.loop
        gen = inc.gen  # read first: what changed until now is seen below
        components = list(loop.components.values())
        for w in np.flatnonzero(inc.worker != self.worker).tolist():
            for component in components:
                component.forget_worker(w)
        moved_in = np.flatnonzero(inc.policy_inbox != self.policy_inbox).tolist()
        moved_out = np.flatnonzero(inc.policy_route != self.policy_route).tolist()
        self.follow_routes()
        for p in moved_in:
            if policy_queue_name(p) in loop.aliases:
                for component in components:
                    component.forget_requests(p)
        for p in moved_out:
            for component in components:
                component.resend_requests(p)
        self.worker[:] = inc.worker
        self.worker_inbox[:] = inc.worker_inbox
        self.policy_inbox[:] = inc.policy_inbox
        self.policy_route[:] = inc.policy_route
        if self.slot is not None:
            inc.ack[self.slot] = gen
        self.seen = gen
