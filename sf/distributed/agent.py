"""The node agent: a Ray actor that owns one node's rollout and inference processes.

It starts them exactly as the parallel placement does on one machine (same process code, faster-fifo queues,
trajectory buffers in this node's shared memory), so a policy request never leaves the node. What the agent
adds is the way out and in: finished trajectories are copied out of the buffers into chunks of up to a batch's worth
(`--ray_chunk_wait_s` bounds how long one fills) that travel in the replies to the driver, at most
`--ray_transfers_in_flight` of them unacknowledged (their slots go back to the rollout workers when the driver
acknowledges them); weights the driver hands over are written into the node's policy
stores, where the inference workers pick them up; messages for the runner (episodes, trees, errors) are passed
on with the next reply.

One thread (`_forward`) does all of this and keeps the agent's Timing tree; the actor's methods, called by the
driver, only exchange lists with it under a condition variable.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import faster_fifo
import numpy as np
import psutil
import ray

from sf.distributed.cluster import NodeInfo, this_node
from sf.distributed.transfer import Chunk, Reply, WeightsUpdate, nbytes, pack
from sf.envs.registry import RegistrySnapshot, restore_registry
from sf.envs.spaces import EnvInfo
from sf.profiling import resources
from sf.profiling.activity import activity_of
from sf.profiling.live_feed import snapshot_interval
from sf.runtime.messages import (
    ComponentError,
    FinalProfile,
    Message,
    NodeStats,
    PolicyVersion,
    ProfilerOutputs,
    ProfileSnapshot,
    Release,
    Trajectories,
    decode,
    encode,
    unwrap,
)
from sf.supervision import process_start
from sf.supervision.orphans import named_semaphores
from sf.supervision.supervisor import Supervisor
from sf.utils.roles import (
    RUNNER,
    batcher_name,
    learner_name,
    policy_queue_name,
    rollout_worker_name,
)
from sf.utils.timing import Timing

log = logging.getLogger("sf")

TAKE_WAIT_S = 0.1  # a `take` with nothing to hand over returns after this long (the driver calls again)
IDLE_WAIT_S = 0.05  # longest wait for the node's messages between looks at the driver's requests
EXIT_WAIT_S = 2.0


@dataclass(frozen=True)
class Remains:
    """What an agent leaves on its node should it die: its processes (pid -> start time) and semaphore names."""

    processes: dict[int, float]
    semaphores: tuple[str, ...]


@dataclass(frozen=True)
class AgentSpec:
    name: str
    workers: tuple[int, ...]  # rollout workers
    inference_workers: tuple[int, ...]  # indices of this node's inference workers of each policy
    cfg: Any
    env_info: EnvInfo
    envs: RegistrySnapshot  # the env registry, portable (sf.distributed.transfer.portable_registry)
    experiment_dir: str
    # the model factory, pickled (sf.distributed.transfer.portable_model_factory): loaded in `start`, after the fork
    # server, since loading it imports torch; None: sf's own parts
    models: bytes | None = None
    inference_placement: str = "own_process"  # as the driver resolved it (`RunSettings`)


class NodeAgent:
    def __init__(self, spec: AgentSpec):
        self.spec = spec
        self.cond = threading.Condition()
        self.acks: list[int] = []
        self.inbound: list[tuple[str, Message]] = []  # (dest, message) from the driver for this node's workers
        self.wanted: dict[int, WeightsUpdate] = {}
        self.ready: list[Chunk] = []
        self.control: list[tuple[str, Message]] = []  # (dest, message) for the driver
        self.versions: dict[int, int] = {}
        self.finished = 0
        self.done = False
        self.stop_deadline: float | None = None
        self.timing = Timing(spec.name)
        self.stats = {
            "bytes_sent": 0,
            "chunks_sent": 0,
            "trajectories_sent": 0,
            "frames_sent": 0,
            "weight_updates": 0,
            "weight_bytes_received": 0,
        }

    # called by the driver ---------------------------------------------------------------------------------
    def start(self, weights: list[WeightsUpdate]) -> tuple[NodeInfo, dict[str, int], Remains]:
        """Create this node's buffers, stores and queues, start its processes; return the node, their pids and
        what `reap` needs to clean up should this actor die."""
        # the fork server first: it imports torch and sf while this process does (nothing this actor has imported so
        # far pulls torch in), as on the driver's node, instead of after it
        process_start.start_server(self.spec.envs, self.spec.cfg.force_envs_single_thread)
        from sf.cfg.arguments import resolve_device
        from sf.model.factory import model_factory_snapshot, restore_model_factory
        from sf.runner.build import build_model, layout_of, precision_choice
        from sf.runner.parallel import QUEUE_BYTES, start_component_process
        from sf.runner.process_context import ProcessContext
        from sf.runner.settings import RunSettings
        from sf.runtime.buffers import TrajectoryBuffers, trajectories_per_batch
        from sf.runtime.policy_store import SharedPolicyStore
        from sf.supervision.process_start import STOP_SIGNALS
        from sf.utils.logging import setup_logging

        spec, cfg = self.spec, self.spec.cfg
        setup_logging(cfg.log_level)
        restore_registry(spec.envs)
        if spec.models is not None:
            restore_model_factory(ray.cloudpickle.loads(spec.models))
        self.started_at, self.started_wall = time.monotonic(), time.time()
        num_processes = cfg.num_policies * len(spec.inference_workers) + len(spec.workers)
        self.supervisor = Supervisor(num_processes, cfg.heartbeat_timeout_sec, detached_guard=True)
        self.stop_event = self.supervisor.control
        # the server started above (a spawned process would import torch and sf again, about 2 s of CPU each)
        start_ctx = self.supervisor.context(process_start.preload_modules(spec.envs), cfg.force_envs_single_thread)
        env_info = spec.env_info
        rnn_size = build_model(cfg, env_info, "cpu").rnn_state_size
        layout = replace(
            layout_of(cfg, env_info, rnn_size),
            num_workers=len(spec.workers),
            first_worker=spec.workers[0],
        )
        self.buffers = TrajectoryBuffers(layout, shared=True)
        self.chunk_cap = max(1, trajectories_per_batch(cfg))
        self.stores = [
            SharedPolicyStore(build_model(cfg, env_info, "cpu", seed_offset=p), self.stop_event)
            for p in range(cfg.num_policies)
        ]
        self.semaphores = named_semaphores(os.getpid())
        self.supervisor.own(self.semaphores)
        for update in weights:
            self._apply(update)
        self.inbox = faster_fifo.Queue(QUEUE_BYTES)
        self.queues = {RUNNER: self.inbox}
        for p in range(cfg.num_policies):
            self.queues[policy_queue_name(p)] = faster_fifo.Queue(QUEUE_BYTES)
            self.queues[learner_name(p)] = self.inbox  # the batcher's address: trajectories come to the agent
        for w in spec.workers:
            self.queues[rollout_worker_name(w)] = faster_fifo.Queue(QUEUE_BYTES)
        self.policy_of = {batcher_name(p): p for p in range(cfg.num_policies)}
        device = resolve_device(cfg)  # this node's: it may have a GPU where the driver's has none, or the reverse
        settings = RunSettings(device, precision_choice(cfg, env_info, device), spec.inference_placement)
        log.info("%s: precision %s", spec.name, settings.precision.describe())
        ctx = ProcessContext(
            cfg=cfg,
            settings=settings,
            env_info=env_info,
            buffers=self.buffers,
            stores=self.stores,
            queues=self.queues,
            control=self.stop_event,
            experiment_dir=spec.experiment_dir,
            envs=spec.envs,
            models=model_factory_snapshot(),
            ledger=str(self.supervisor.ledger.path),
        )
        self.supervisor.begin()
        starts = [("inference", p, i) for p in range(cfg.num_policies) for i in spec.inference_workers]
        starts += [("rollout", w, None) for w in spec.workers]
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            for slot, (kind, a, b) in enumerate(starts):
                start_component_process(self.supervisor, start_ctx, kind, a, b, ctx, slot)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        self.thread = threading.Thread(target=self._forward, name=spec.name, daemon=True)
        self.thread.start()
        pids = {label: child.pid for label, child in self.supervisor.children.items()}
        pids[spec.name] = os.getpid()
        owned = {*pids.values(), *process_start.server_pids()}
        return (
            this_node(),
            pids,
            Remains({pid: psutil.Process(pid).create_time() for pid in owned}, tuple(self.semaphores)),
        )

    def take(self, acks: list[int], inbound: list[tuple[str, Message]], weights: list[WeightsUpdate]) -> Reply:
        """Hand over what is ready (waiting up to TAKE_WAIT_S for something); take acknowledgements, messages for
        this node's workers and newer weights."""
        with self.cond:
            self.acks += acks
            self.inbound += inbound
            self.wanted.update({update.policy_id: update for update in weights})
            self.cond.wait_for(lambda: self.ready or self.control or self.done, timeout=TAKE_WAIT_S)
            self._watch()
            reply = Reply(self.ready, self.control, dict(self.versions), self.finished, self.done)
            self.ready, self.control = [], []
        return reply

    def stop(self, grace_s: float) -> None:
        """Stop this node's processes: they get `grace_s` to send their final trees, then are killed."""
        with self.cond:
            if self.done:
                return
            if self.stop_deadline is None:
                self.stop_deadline = time.monotonic() + grace_s
            self.stop_event.set()

    # the forwarding thread --------------------------------------------------------------------------------
    def _forward(self) -> None:
        try:
            self._forward_until_stopped()
        except Exception:
            self._post(RUNNER, ComponentError(self.spec.name, traceback.format_exc()))
            with self.cond:
                self.stop_deadline = self.stop_deadline or time.monotonic() + EXIT_WAIT_S
                self.stop_event.set()
        self._end()

    def _forward_until_stopped(self) -> None:
        cfg = self.spec.cfg
        self.pending: dict[int, list[int]] = defaultdict(list)
        self.pending_since: dict[int, float] = {}  # policy -> when its oldest waiting trajectory arrived
        self.unacked: dict[int, list[int]] = {}
        self.deferred: list[tuple[str, Message]] = []
        self.seq = 0
        timers = [
            [time.monotonic() + snapshot_interval(cfg), snapshot_interval(cfg), lambda: self._share_tree(final=False)],
        ]
        while not self._stopped():
            self._take_requests()
            due, wait_s = self._due()
            if due and len(self.unacked) < cfg.ray_transfers_in_flight:
                self._ship(due)
                continue
            with self.timing.add_time("wait_transfer" if due else "wait_trajectories"):
                try:
                    msgs = self.inbox.get_many(block=True, timeout=0.01 if due else wait_s)
                except faster_fifo.Empty:
                    msgs = ()
            for dest, msg in map(decode, msgs):
                self._on_message(dest, unwrap(msg))
            now = time.monotonic()
            for timer in timers:
                if now >= timer[0]:
                    timer[0] = now + timer[1]
                    timer[2]()

    def _stopped(self) -> bool:
        if self.stop_deadline is None:
            return False
        return (self.supervisor.all_ended() and self.inbox.empty()) or time.monotonic() > self.stop_deadline

    def _take_requests(self) -> None:
        with self.cond:
            acks, self.acks = self.acks, []
            inbound, self.inbound = self.inbound, []
            wanted, self.wanted = self.wanted, {}
        for update in wanted.values():
            self._apply(update)
        with self.timing.add_time("release_slots"):
            for seq in acks:
                by_worker: dict[int, list[int]] = defaultdict(list)
                for slot in self.unacked.pop(seq, ()):
                    by_worker[self.buffers.layout.worker_of_slot(slot)].append(slot)
                for worker, slots in by_worker.items():
                    name = rollout_worker_name(worker)
                    self.queues[name].put(encode(name, Release(slots)))
        messages, self.deferred = self.deferred + inbound, []
        for dest, msg in messages:
            # a worker told of a new version before this node holds its weights would collect with the old ones
            if type(msg) is PolicyVersion and self.versions.get(msg.policy_id, -1) < msg.version:
                self.deferred.append((dest, msg))
            else:
                self.queues[dest].put(encode(dest, msg))

    def _apply(self, update: WeightsUpdate) -> None:
        with self.timing.add_time("update_weights"):
            state = {key: np.array(value) for key, value in ray.get(update.data[0]).items()}
            self.stores[update.policy_id].publish_state(state, update.version)
        with self.cond:
            self.versions[update.policy_id] = update.version
        self.stats["weight_updates"] += 1
        self.stats["weight_bytes_received"] += nbytes(state)

    def _due(self) -> tuple[list[int], float]:
        """Policies whose trajectories should leave now: a batch's worth waiting, or the oldest waiting for
        --ray_chunk_wait_s (each chunk costs a reply, so a fast node sends few large ones and a slow one is not held
        back); and, with none due, how long until one is."""
        now, wait_s = time.monotonic(), self.spec.cfg.ray_chunk_wait_s
        due = [
            p
            for p, slots in self.pending.items()
            if len(slots) >= self.chunk_cap or (slots and now - self.pending_since[p] >= wait_s)
        ]
        until = min((self.pending_since[p] + wait_s - now for p, s in self.pending.items() if s), default=IDLE_WAIT_S)
        return due, min(IDLE_WAIT_S, max(0.001, until))

    def _ship(self, policies: list[int]) -> None:
        """One chunk per policy in `policies`: copy its trajectories out, to go with the next reply."""
        frames_per_traj = self.spec.cfg.rollout * self.spec.env_info.frameskip
        for policy_id in policies:
            slots = self.pending[policy_id]
            chosen, self.pending[policy_id] = slots[: self.chunk_cap], slots[self.chunk_cap :]
            self.pending_since[policy_id] = time.monotonic()  # the rest waits afresh: it fills the next chunk
            with self.timing.add_time("gather"):
                tensors = pack(self.buffers, chosen)
            self.seq += 1
            self.unacked[self.seq] = chosen
            size = nbytes(tensors)
            with self.cond:
                self.ready.append(Chunk(self.seq, policy_id, len(chosen), size, tensors))
                self.cond.notify_all()
            self.stats["bytes_sent"] += size
            self.stats["chunks_sent"] += 1
            self.stats["trajectories_sent"] += len(chosen)
            self.stats["frames_sent"] += len(chosen) * frames_per_traj

    def _on_message(self, dest: str, msg: Message) -> None:
        """Trajectories are shipped from here in the batcher's place; anything else goes on to the driver."""
        if type(msg) is Trajectories:
            policy_id = self.policy_of[dest]
            if not self.pending[policy_id]:
                self.pending_since[policy_id] = time.monotonic()
            self.pending[policy_id].extend(msg.slots)
            with self.cond:
                self.finished += len(msg.slots)
        else:
            self._post(dest, msg)

    def _post(self, dest: str, msg: Message) -> None:
        with self.cond:
            self.control.append((dest, msg))
            self.cond.notify_all()

    def _watch(self) -> None:
        """Called under `cond` by `take`, not by the forwarding thread (which a queue lock left taken by a dead process
        could hold for good): a process that exits or misses its heartbeats before the stop fails this node."""
        failures = self.supervisor.poll()
        if self.stop_deadline is None:
            self.control += [(RUNNER, ComponentError(failure.label, failure.cause)) for failure in failures]

    def _share_tree(self, final: bool) -> None:
        name, tree, pid = self.spec.name, self.timing.to_dict(), os.getpid()
        lifetime = time.monotonic() - self.started_at
        self._post(RUNNER, NodeStats(name, dict(self.stats)))  # first: the final tree ends the wait
        res, activity = resources.snapshot().to_dict(), activity_of(tree, lifetime).to_dict()
        if final:
            self._post(RUNNER, FinalProfile(name, pid, tree, res, activity))
        else:
            self._post(RUNNER, ProfileSnapshot(name, pid, tree, res, activity))

    def _end(self) -> None:
        """Kill what did not stop in time, pass on the last messages and the agent's own final tree."""
        self.supervisor.stop(set(), EXIT_WAIT_S, crashed=False, exit_wait_s=EXIT_WAIT_S)
        try:
            for dest, msg in map(decode, self.inbox.get_many(block=False)):
                msg = unwrap(msg)
                if type(msg) is not Trajectories:
                    self._post(dest, msg)
        except faster_fifo.Empty:
            pass
        if self.spec.cfg.profiling.backend != "none" or self.spec.cfg.profiling_timeline:
            self._post(self.spec.name, ProfilerOutputs(self.spec.name, self._profiler_outputs()))  # for its link
        self._share_tree(final=True)
        self._release_semaphores()
        with self.cond:
            self.done = True
            self.cond.notify_all()

    def _profiler_outputs(self) -> dict[str, bytes]:
        """Files this node's processes wrote under the profiling folder (profiler outputs, timeline parts), by path
        relative to it, for the driver to write into its own."""
        folder = Path(self.spec.cfg.profiling.output_dir)
        labels = [label.replace(" ", "_") for label in self.supervisor.children]
        if not folder.is_dir():
            return {}
        return {
            str(path.relative_to(folder)): path.read_bytes()
            for path in folder.rglob("*")
            if path.is_file()
            and path.stat().st_mtime >= self.started_wall
            and any(label in path.name for label in labels)
        }

    def _release_semaphores(self) -> None:
        """Unlink the /dev/shm names of the stop event's and the stores' semaphores once every process that used
        them is gone: an actor ends by being killed, so neither its exit handlers nor its resource tracker would."""
        for path in self.semaphores:
            Path(path).unlink(missing_ok=True)


def reap(remains: Remains, timeout_s: float = 5.0) -> list[int]:
    """Run on a node whose agent died: kill the processes it had started (and theirs, such as env engines) that
    are still there, wait for them to go, unlink its semaphores; return the pids killed. A pid is only killed if
    the process holding it started when the agent's did, so a reused pid is left alone."""
    victims = []
    for pid, created in remains.processes.items():
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - created) < 0.01:
                victims += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
    for proc in victims:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(victims, timeout=timeout_s)
    for path in remains.semaphores:
        Path(path).unlink(missing_ok=True)
    return [proc.pid for proc in victims]
