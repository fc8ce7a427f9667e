"""The driver's side of one node agent: a thread of the runner's process.

It calls the agent's `take` in a loop: each call carries acknowledgements of the chunks received, the messages
the learner sent the node's rollout workers (new policy versions in synchronous mode) and newer weights when the
node has applied the previous ones; each reply carries new chunks and messages for the runner. A chunk is written
into free slots of the driver's buffers that belong to the node's workers and handed to the batcher like a local
worker's trajectories; when the batcher releases those slots they come back here, not to the node, whose own
slots were freed as soon as the chunk was acknowledged.

To the runner a link looks like one more component process (`exitcode`, `kill`, `join`, `is_alive`), so the
parallel placement watches and stops it with the same code as its own processes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import faster_fifo
import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from sf.distributed.agent import AgentSpec, NodeAgent, Remains, reap
from sf.distributed.cluster import NodeInfo
from sf.distributed.placement import WorkerGroup
from sf.distributed.transfer import unpack
from sf.distributed.weights import WeightsPublisher
from sf.runtime.buffers import TrajectoryBuffers
from sf.runtime.messages import (
    ComponentError,
    Message,
    NodeRestarted,
    NodeStats,
    ProfilerOutputs,
    Release,
    Trajectories,
    decode,
    encode,
    handlers_for,
    unwrap,
)
from sf.utils.roles import RUNNER, Role, batcher_name, inference_worker_name, learner_name
from sf.utils.timing import Timing

log = logging.getLogger("sf")

START_TIMEOUT_S = 180.0  # placing the agent and spawning its processes on a busy node
TAKE_TIMEOUT_S = 60.0  # a reply takes TAKE_WAIT_S unless the agent is stuck
REPORT_WAIT_S = 5.0  # after reporting a failure: how long the link waits for the runner to begin the stop
STOP_MARGIN_S = 1.0
REAP_TIMEOUT_S = 10.0  # a task on a lost agent's node: a Ray worker may have to start there first


@dataclass
class LinkContext:
    """What every link of a run shares: the driver's buffers, queues and weights, the run's stop event."""

    cfg: Any
    colocated: bool  # inference in each rollout worker's process (`RunSettings.colocated`)
    buffers: TrajectoryBuffers
    queues: dict
    publisher: WeightsPublisher
    stop_event: Any
    nodes: dict  # component name -> node (profile.json's `node`), filled in as agents start
    grace_s: Callable[[], float]  # seconds the run gives its components to stop, asked at the stop


class NodeLink:
    role = Role.NODE_AGENT  # the driver's side of one: it receives what WIRING sends a node agent

    def __init__(self, group: WorkerGroup, spec: AgentSpec, inbox: faster_fifo.Queue, ctx: LinkContext):
        self.group = group
        self.spec = spec
        self.name = group.name
        self.inbox = inbox
        self.ctx = ctx
        layout = ctx.buffers.layout
        self.free = deque(s for w in group.workers for s in range(layout.first_slot(w), layout.first_slot(w + 1)))
        self.frames_per_traj = ctx.cfg.rollout * spec.env_info.frameskip
        self.restarts_left = allowed_restarts(ctx.cfg)
        self.actor = None
        self.node: NodeInfo | None = None
        self.remains: Remains | None = None
        self.pid = 0
        self.exitcode: int | None = None
        self.stopping = False
        self.outbound: list[tuple[str, Message]] = []  # (dest, message) for the node's workers
        self.handlers = handlers_for(self)
        self.timing = Timing(self.name)  # the driver's side: taking replies, waiting for free slots, writing chunks
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    # the process-like face ---------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def kill(self) -> None:
        if self.actor is not None:
            ray.kill(self.actor, no_restart=True)

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def is_alive(self) -> bool:
        return self.thread.is_alive()

    # the loop ------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        runner_q = self.ctx.queues[RUNNER]
        code = 0
        try:
            self._start_agent()
            while not self._exchange():
                pass
        except Exception as exc:
            code = 1
            if not self.stopping:
                where = f" on node {self.node.label}" if self.node else ""
                runner_q.put(encode(RUNNER, ComponentError(f"{self.name}{where}", _describe(exc))), timeout=5.0)
            self._reap()
            if not self.stopping:
                self.ctx.stop_event.wait(REPORT_WAIT_S)
        self.exitcode = code

    def _start_agent(self) -> None:
        options: dict[str, Any] = dict(num_cpus=0, max_concurrency=4, max_restarts=0)
        if self.group.resource is not None:
            options["resources"] = {self.group.resource: 0.001}
        else:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.group.node_id, soft=False)
        self.actor = ray.remote(NodeAgent).options(**options).remote(self.spec)
        weights = [self.ctx.publisher.newer_than(p, -1) for p in range(self.ctx.cfg.num_policies)]
        self.sent = {update.policy_id: update.version for update in weights}
        self.sent_at: dict[int, float] = {}
        self.versions: dict[int, int] = {}
        self.acks: list[int] = []
        self.finished = self.received = 0
        self.node, pids, self.remains = ray.get(self.actor.start.remote(weights), timeout=START_TIMEOUT_S)
        self.pid = pids[self.name]
        for label, pid in pids.items():
            self.ctx.nodes[label] = self.node.to_dict()
            log.info("started %s pid=%d on node %s", label, pid, self.node.label)
        if self.ctx.colocated:  # in the processes of the node's rollout workers
            for p in range(self.ctx.cfg.num_policies):
                self.ctx.nodes.update({inference_worker_name(p, w): self.node.to_dict() for w in self.group.workers})

    def _exchange(self) -> bool:
        """One `take` and the chunks it hands over; True once the agent has stopped. A lost agent is started again
        while restarts are left (asynchronous mode), else the error ends the link."""
        try:
            return self._take()
        except (RayError, GetTimeoutError) as exc:
            if not self._can_restart():
                raise
            self._restart(f"the agent was lost ({_describe(exc)})")
            return False

    def _take(self) -> bool:
        if self.ctx.stop_event.is_set() and not self.stopping:
            self.stopping = True
            # the node's processes stop a little before the runner's deadline, so their final trees arrive in time
            self.actor.stop.remote(max(1.0, self.ctx.grace_s() - STOP_MARGIN_S))
        self._read_inbox(block=False)
        updates = [] if self.stopping else self._weights_due()
        outbound, self.outbound = self.outbound, []
        with self.timing.add_time("take"):
            reply = ray.get(self.actor.take.remote(self.acks, outbound, updates), timeout=TAKE_TIMEOUT_S)
        self.acks = []
        errors = [msg for _, msg in reply.messages if type(msg) is ComponentError]
        if errors and self._can_restart():
            self._forward([(dest, msg) for dest, msg in reply.messages if type(msg) is not ComponentError])
            first = errors[0]
            self._restart(f"{first.component} failed: {first.traceback.strip().splitlines()[-1]}")
            return False
        self._forward(reply.messages)
        self.versions, self.finished = reply.versions, reply.finished
        for chunk in reply.chunks:
            with self.timing.add_time("wait_slots"):
                slots = self._free_slots(chunk.count)
            if slots is None:  # stopping: nobody will train on it
                continue
            with self.timing.add_time("write_buffers"):
                unpack(self.ctx.buffers, slots, chunk.tensors)
            self.ctx.queues[learner_name(chunk.policy_id)].put(
                encode(batcher_name(chunk.policy_id), Trajectories(slots)), timeout=5.0
            )
            self.acks.append(chunk.seq)
            self.received += chunk.count
        return reply.done

    def _weights_due(self) -> list:
        """Newer weights for every policy whose previous update the node has applied, in asynchronous mode at most
        every --ray_weights_interval_s."""
        cfg, now = self.ctx.cfg, time.monotonic()
        due = []
        for p in range(cfg.num_policies):
            if self.versions.get(p, -1) < self.sent.get(p, -1):
                continue  # one update in flight per node
            if cfg.async_rl and now - self.sent_at.get(p, -float("inf")) < cfg.ray_weights_interval_s:
                continue
            update = self.ctx.publisher.newer_than(p, self.sent.get(p, -1))
            if update is not None:
                self.sent[p], self.sent_at[p] = update.version, now
                due.append(update)
        return due

    def _read_inbox(self, block: bool) -> None:
        """Slots the batcher released go back to the free list; other messages go to the node's workers."""
        try:
            msgs = self.inbox.get_many(block=block, timeout=0.1)
        except faster_fifo.Empty:
            return
        for dest, msg in map(decode, msgs):
            msg = unwrap(msg)
            if type(msg) is Release:
                self.free.extend(msg.slots)
            else:
                self.outbound.append((dest, msg))

    def _free_slots(self, count: int) -> list[int] | None:
        while len(self.free) < count:
            if self.ctx.stop_event.is_set():
                return None
            self._read_inbox(block=True)
        return [self.free.popleft() for _ in range(count)]

    def _forward(self, messages: list[tuple[str, Message]]) -> None:
        """Handle what is for this link, pass the rest of the node's messages to the runner; an error names the
        node."""
        runner_q = self.ctx.queues[RUNNER]
        for dest, msg in messages:
            handler = self.handlers.get(type(msg))
            if handler is not None:
                handler(msg)
                continue
            if type(msg) is ComponentError:
                msg = msg._replace(component=f"{msg.component} on node {self.node.label}")
            elif type(msg) is NodeStats:  # with the driver's side of the transfers
                msg = msg._replace(stats={**msg.stats, "driver": self.timing.to_dict()})
            runner_q.put(encode(dest, msg), timeout=5.0)

    def _on_profiler_outputs(self, msg: ProfilerOutputs) -> None:
        """The node's profiler outputs into the driver's profiling folder (where a shared filesystem has not
        already put them)."""
        folder = Path(self.ctx.cfg.profiling.output_dir)
        for relative, data in msg.files.items():
            target = folder / relative
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)

    # restarts -------------------------------------------------------------------------------------------------
    def _can_restart(self) -> bool:
        return not self.stopping and self.restarts_left > 0 and self.ctx.cfg.async_rl

    def _restart(self, cause: str) -> None:
        """Start a new agent for the same workers, on a node still there (another one if its node was lost);
        trajectories the lost one finished but never delivered are lost."""
        lost = max(0, self.finished - self.received) * self.frames_per_traj
        self.restarts_left -= 1
        restarted = NodeRestarted(self.name, self.node.label, cause, lost, self.restarts_left)
        self.ctx.queues[RUNNER].put(encode(RUNNER, restarted), timeout=5.0)
        alive = _alive_nodes()
        if self.node.ray_node_id in alive:
            self._reap()
        else:  # nothing of it runs any more: Ray ended the node's processes with the node
            self._kill_actor()
        self.group = _placed_again(self.group, alive, self.name)
        self._start_agent()

    def _kill_actor(self) -> None:
        if self.actor is not None:
            try:
                ray.kill(self.actor, no_restart=True)
            except RayError:
                pass

    def _reap(self) -> None:
        """End the agent and whatever it had started on its node (a dead agent's processes would only stop on
        their own a second later, and a stuck one never)."""
        if self.actor is None:
            return
        self._kill_actor()
        if self.remains is None:
            return
        strategy = NodeAffinitySchedulingStrategy(self.node.ray_node_id, soft=False)
        try:
            ray.get(
                ray.remote(reap).options(num_cpus=0, scheduling_strategy=strategy).remote(self.remains),
                timeout=REAP_TIMEOUT_S,
            )
        except (RayError, GetTimeoutError) as exc:
            log.warning("could not end the processes of %s on node %s: %s", self.name, self.node.label, _describe(exc))


def allowed_restarts(cfg) -> int:
    """--ray_max_restarts, or where it is left at -1: 3 when components restart (--restart_failed_components) and the
    run is asynchronous (a synchronous round cannot lose a node's share of its batch), else none."""
    if cfg.ray_max_restarts >= 0:
        return cfg.ray_max_restarts
    return 3 if cfg.restart_failed_components and cfg.async_rl else 0


def _alive_nodes() -> dict[str, dict]:
    """Ray's record of every node still alive, by node id."""
    return {node["NodeID"]: node for node in ray.nodes() if node.get("Alive")}


def _placed_again(group: WorkerGroup, alive: dict[str, dict], name: str) -> WorkerGroup:
    """Where a restarted agent goes: a group pinned to a custom resource wherever a live node offers it (Ray picks
    one), a group placed on a node there if it is alive, else on the live node with the most CPUs (the driver's last,
    where its own rollout workers already run). RuntimeError, which ends the run, when no live node can take it."""
    if group.resource is not None:
        if not any(group.resource in node.get("Resources", {}) for node in alive.values()):
            raise RuntimeError(f"no node left offers the resource {group.resource} for the workers of {name}")
        return group
    if group.node_id in alive:
        return group
    if not alive:
        raise RuntimeError(f"no node left for the workers of {name}")
    driver = ray.get_runtime_context().get_node_id()
    chosen = max(alive.values(), key=lambda node: (node["NodeID"] != driver, node.get("Resources", {}).get("CPU", 0)))
    log.warning("%s: its node is gone; its workers move to node %s", name, chosen["NodeID"][:8])
    return replace(group, node_id=chosen["NodeID"])


def _describe(exc: BaseException) -> str:
    if isinstance(exc, GetTimeoutError):
        return f"the node agent did not answer within {TAKE_TIMEOUT_S:.0f} s"
    if isinstance(exc, RayError):  # the actor, or the owner of a chunk it put, is gone: Ray's text is pages long
        return f"the node agent died or became unreachable ({type(exc).__name__})"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
