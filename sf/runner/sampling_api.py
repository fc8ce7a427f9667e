"""Sampling without a learner (Sample Factory's `SyncSamplingAPI`): rollout workers and inference workers run as in
training, with the weights given, and hand every finished trajectory to the caller instead of a batcher; for data
collection and evaluation.

The components run on one event loop in a thread of the caller's process (sf's serial placement, whatever
`--serial_mode` says), and collection never waits for a new policy version (`--async_rl` is taken as True): the
weights change only when the caller passes others to `start`. docs/customizing.md, "Sampling without a learner".
"""

from __future__ import annotations

import logging
import math
import queue
import threading
from argparse import Namespace
from collections.abc import Mapping

import torch

from sf.cfg.arguments import resolve_device
from sf.envs.episodes import EpisodeRecord
from sf.envs.spaces import EnvInfo
from sf.runner.build import ComponentInputs, build_buffers, build_components, build_model, probe_env
from sf.runtime.buffers import TrajectoryBuffers
from sf.runtime.event_loop import Component, EventLoop, StopLoop
from sf.runtime.kernel_compile import compile_kernels
from sf.runtime.messages import ComponentError, Episodes, LearnerVersion, Release, Trajectories
from sf.runtime.policy_store import LocalPolicyStore
from sf.utils.roles import RUNNER, Role, batcher_name, rollout_worker_name
from sf.utils.typing import Config, InitModelData, PolicyID, StatusCode

log = logging.getLogger("sf")

SUCCESS, FAILURE = 0, 1  # Sample Factory's status codes (`sf.train.ExperimentStatus`)
QUEUE_TRAJECTORIES = 100  # finished trajectories held for the caller before collection waits (Sample Factory's)
PUT_POLL_S = 0.5  # how often a full queue looks whether the sampler was stopped meanwhile
GET_POLL_S = 1.0

__all__ = ["SyncSamplingAPI", "obtain_env_info_in_a_separate_process", "samples_per_trajectory"]


def obtain_env_info_in_a_separate_process(cfg: Config) -> EnvInfo:
    """The env's spaces, reward scale and frameskip (Sample Factory's name; sf opens one env in this process, as its
    training does before any component starts)."""
    return probe_env(cfg)


def samples_per_trajectory(trajectory: Mapping[str, torch.Tensor]) -> int:
    """Env steps in a trajectory dict (`[B, T]` rewards): Sample Factory's count, without frameskip."""
    batch, rollout = trajectory["rewards"].shape[:2]
    return batch * rollout


class TrajectoryTap(Component):
    """In the batcher's place for one policy: copies each finished trajectory out of the buffers, gives the slots
    back to their rollout worker and queues the copy for the caller (waiting while the caller's queue is full)."""

    role = Role.BATCHER
    wait_key = "wait_trajectories"

    def __init__(self, policy_id: int, buffers: TrajectoryBuffers, out: queue.Queue, stopped: threading.Event):
        super().__init__(batcher_name(policy_id))
        self.buffers, self.out, self.stopped = buffers, out, stopped

    def _on_trajectories(self, msg: Trajectories) -> None:
        with self.timing.add_time("copy_trajectories"):
            trajectory = self.buffers.gather(torch.tensor(msg.slots, dtype=torch.int64))
        self.send(rollout_worker_name(msg.worker), Release(list(msg.slots)))
        with self.timing.add_time("wait_caller"):
            while not self.stopped.is_set():
                try:
                    self.out.put(trajectory, timeout=PUT_POLL_S)
                    return
                except queue.Full:
                    continue
        raise StopLoop

    def _on_learner_version(self, msg: LearnerVersion) -> None:
        """No learner here: nothing sends it."""


class EpisodeSink(Component):
    """In the runner's place: keeps the finished episodes for the caller; the rest of what components report to a
    runner (profiles, statistics) has no reader here."""

    role = Role.RUNNER

    def __init__(self):
        super().__init__(RUNNER)
        self.episodes: dict[int, list[EpisodeRecord]] = {}
        self.lock = threading.Lock()

    def _on_episodes(self, msg: Episodes) -> None:
        with self.lock:
            self.episodes.setdefault(msg.policy_id, []).extend(msg.episodes)

    def _on_error(self, msg: ComponentError) -> None:
        raise RuntimeError(f"{msg.component}: {msg.traceback}")

    def _ignore(self, msg) -> None:
        """Reports for a runner's statistics and profiles."""

    _on_weights_saved = _on_weights_adopted = _on_learner_stats = _on_staleness = _ignore
    _on_snapshot = _on_final_profile = _on_node_stats = _on_node_restarted = _ignore


class SyncSamplingAPI:
    """`SyncSamplingAPI(cfg, env_info)`, `start(init_model_data)`, then `get_trajectories_sync()` as often as wanted
    (a dict of `[B, T, ...]` tensors, `obs`, `values` and `rnn_states` with `T + 1` steps; None once stopped),
    then `stop()` for the status. Sample Factory's shape and names."""

    def __init__(self, cfg: Config, env_info: EnvInfo):
        self.cfg = Namespace(**{**vars(cfg), "async_rl": True})
        self.env_info = env_info
        self.device = resolve_device(self.cfg)
        policies = range(self.cfg.num_policies)
        self.models = [build_model(self.cfg, env_info, self.device, seed_offset=p) for p in policies]
        self.buffers = build_buffers(self.cfg, env_info, self.models[0].rnn_state_size, shared=False)
        compile_kernels(self.cfg, self.models[0], self.buffers, self.device)
        self.trajectories: queue.Queue = queue.Queue(maxsize=QUEUE_TRAJECTORIES)
        self.stopped = threading.Event()
        self.loop = EventLoop(stop_event=self.stopped)
        self.sink = EpisodeSink()
        self.stores = [LocalPolicyStore() for _ in policies]
        self.status: StatusCode | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def start(self, init_model_data: dict[PolicyID, InitModelData] | None = None) -> None:
        """Start collecting with the weights of `init_model_data` (policy id -> (policy id, state dict, device,
        version), Sample Factory's form), or each policy's freshly initialized model without it."""
        for p, (model, store) in enumerate(zip(self.models, self.stores)):
            if init_model_data is not None and p in init_model_data:
                _, state, _, version = init_model_data[p]
                model.load_state_dict(state)
                store.publish(model, version)
            self.loop.add(TrajectoryTap(p, self.buffers, self.trajectories, self.stopped))
        inputs = ComponentInputs(
            self.cfg, self.env_info, self.device, False, self.buffers, self.stores, lambda p: self.models[p]
        )
        built = [c for p in range(self.cfg.num_policies) for c in build_components("inference", p, 0, inputs)]
        built += [c for w in range(self.cfg.num_workers) for c in build_components("rollout", w, None, inputs)]
        for component, aliases in built:
            self.loop.add(component, aliases=aliases)
        self.loop.add(self.sink)
        self.thread = threading.Thread(target=self._run, name="SamplingLoop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with torch.no_grad():
                self.loop.run()
            self.status = SUCCESS
        except BaseException as exc:  # the caller hears of it from get_trajectories_sync and stop
            log.exception("sampling stopped: %s failed", self.loop.failed or "the sampling loop")
            self.error, self.status = exc, FAILURE
        finally:
            self.stopped.set()
            for name, message in self.loop.stop_components():
                log.error("%s failed while stopping:\n%s", name, message)
            self.loop.deliver_local(RUNNER)  # the episodes the rollout workers finished as they stopped

    def get_trajectories_sync(self) -> dict | None:
        """The next finished trajectory of any policy, waiting for it; None once the sampler stopped."""
        while True:
            try:
                return self.trajectories.get(timeout=GET_POLL_S)
            except queue.Empty:
                if self.stopped.is_set():
                    return None

    def episodes(self, policy_id: PolicyID = 0) -> list[EpisodeRecord]:
        """The policy's episodes finished so far, (return, length, true objective, extra stats) each (reported
        by the rollout workers once a second and when they stop)."""
        with self.sink.lock:
            return list(self.sink.episodes.get(policy_id, ()))

    def avg_episode_reward(self, policy_id: PolicyID = 0) -> float:
        returns = [episode[0] for episode in self.episodes(policy_id)]
        return sum(returns) / len(returns) if returns else math.nan

    def stop(self) -> StatusCode:
        """Stop the workers and close their envs; the status (0, or 1 when a component failed)."""
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()
        while not self.trajectories.empty():
            self.trajectories.get_nowait()
        return SUCCESS if self.status is None else self.status
