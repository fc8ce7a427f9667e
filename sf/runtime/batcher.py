"""Turns finished trajectories into training batches and gives their slots back to the rollout workers.

Trajectories older than `--max_policy_lag` versions are dropped (and counted) here, before they cost a
copy. The frames a batch reports (the learner's `env_steps`) are those of its trajectories and of the ones dropped for
their lag, counted when they leave: trajectories a restart drops while they wait here are not counted. The batch is
copied out of the shared buffers, so slots are free again before training starts.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from sf.runtime.buffers import TrajectoryBuffers, trajectories_per_batch
from sf.runtime.event_loop import Component
from sf.runtime.messages import LearnerVersion, Release, Train, Trajectories
from sf.utils.roles import Role, batcher_name, learner_name, rollout_worker_name


class Batcher(Component):
    role = Role.BATCHER
    wait_key = "wait_trajectories"

    def __init__(self, cfg, policy_id: int, buffers: TrajectoryBuffers, frames_per_step: int, incarnations=None):
        """`incarnations`: each rollout worker's life (`sf.supervision.incarnations`): trajectories of a worker that
        died since are dropped, not trained on, and their slots not released (its replacement starts with them)."""
        super().__init__(batcher_name(policy_id))
        self.cfg = cfg
        self.incarnations = incarnations
        self.policy_id = policy_id
        self.buffers = buffers
        self.per_batch = trajectories_per_batch(cfg)
        self.frames_per_traj = cfg.rollout * frames_per_step
        self.pending: list[int] = []
        self.new_frames = 0
        self.dropped = 0
        self.learner_version = 0

    def _on_learner_version(self, msg: LearnerVersion) -> None:
        self.learner_version = msg.version

    def forget_worker(self, worker: int) -> None:
        layout = self.buffers.layout
        kept = [slot for slot in self.pending if layout.worker_of_slot(slot) != worker]
        self.incarnations.count_dropped(len(self.pending) - len(kept))
        self.pending = kept

    def _on_trajectories(self, msg: Trajectories) -> None:
        if msg.worker >= 0 and self.incarnations is not None and msg.incarnation != self.incarnations.of[msg.worker]:
            self.incarnations.count_dropped(len(msg.slots))  # a dead incarnation's: its replacement took the slots over
            return
        slots = msg.slots
        if self.cfg.async_rl:
            oldest = self.buffers.tensors["policy_version"][slots].amin(dim=1)
            stale = (self.learner_version - oldest) > self.cfg.max_policy_lag
            if bool(stale.any()):
                stale_slots = [s for s, old in zip(slots, stale.tolist()) if old]
                self.dropped += len(stale_slots)
                self.new_frames += len(stale_slots) * self.frames_per_traj  # collected, as Sample Factory counts them
                self._release(stale_slots)
                slots = [s for s, old in zip(slots, stale.tolist()) if not old]
        self.pending += slots
        while len(self.pending) >= self.per_batch:
            chosen, self.pending = self.pending[: self.per_batch], self.pending[self.per_batch :]
            self.new_frames += len(chosen) * self.frames_per_traj  # counted once batched: a restart may drop pending
            with self.timing.add_time("batching"):
                batch = self.buffers.gather(torch.tensor(chosen, dtype=torch.int64))
            with self.timing.add_time("releasing_batches"):
                self._release(chosen)
            self.send(learner_name(self.policy_id), Train(batch, self.new_frames, self.dropped))
            self.new_frames = 0
            self.dropped = 0

    def _release(self, slots: list[int]) -> None:
        by_worker: dict[int, list[int]] = defaultdict(list)
        for slot in slots:
            by_worker[self.buffers.layout.worker_of_slot(slot)].append(slot)
        for worker, worker_slots in by_worker.items():
            self.send(rollout_worker_name(worker), Release(worker_slots))
