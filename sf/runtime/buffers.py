"""Preallocated trajectory storage that every component reads and writes in place.

Slot `s` holds one trajectory of `rollout` steps plus the bootstrap step: observations, RNN states and
values have `rollout + 1` entries, everything produced by a step has `rollout`. In parallel mode the
tensors live in shared memory, so processes exchange only slot indices.

A multi-agent env's agents have a slot each, `agents_per_env` consecutive slots that a rollout worker takes and
gives back together; the learner and the batcher see one trajectory per slot as for any env. Only then the buffers
hold `active`: whether the agent acted at that step (`info["is_active"]`), the learner's mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from sf.envs.spaces import ActionSpec


@dataclass(frozen=True)
class BufferLayout:
    num_workers: int
    envs_per_worker: int
    slots_per_env: int
    rollout: int
    obs_spec: dict
    action_spec: ActionSpec
    rnn_state_size: int
    first_worker: int = 0  # a node of a cluster holds the slots of its own workers only, from this one on
    agents_per_env: int = 1  # consecutive slots an env's agents fill together
    multi_agent: bool = False  # the env has Sample Factory's multi-agent API: the buffers hold `active`

    @property
    def slots_per_worker(self) -> int:
        return self.envs_per_worker * self.agents_per_env * self.slots_per_env

    @property
    def num_slots(self) -> int:
        return self.num_workers * self.slots_per_worker

    @property
    def num_action_params(self) -> int:
        """Columns of the stored action distribution parameters: logits, Gaussian means, Gaussian log stds."""
        return self.action_spec.num_logits + self.action_spec.continuous_dim

    def worker_of_slot(self, slot: int) -> int:
        return self.first_worker + slot // self.slots_per_worker

    def first_slot(self, worker: int) -> int:
        return (worker - self.first_worker) * self.slots_per_worker


def trajectories_per_batch(cfg) -> int:
    return cfg.batch_size * cfg.num_batches_per_epoch // cfg.rollout


def make_layout(
    cfg,
    obs_spec: dict,
    action_spec: ActionSpec,
    rnn_state_size: int,
    agents_per_env: int = 1,
    multi_agent: bool = False,
) -> BufferLayout:
    """Enough slots per env (and agent) that every policy's learner can always fill its batches while envs keep
    stepping: each policy's batcher may hold almost a batch while the others fill theirs (Sample Factory's count)."""
    num_envs = cfg.num_workers * cfg.num_envs_per_worker * agents_per_env
    per_batch = math.ceil(trajectories_per_batch(cfg) * cfg.num_policies / num_envs)
    accumulate = max(1, cfg.num_batches_to_accumulate) if cfg.async_rl else 1
    return BufferLayout(
        num_workers=cfg.num_workers,
        envs_per_worker=cfg.num_envs_per_worker,
        slots_per_env=per_batch * accumulate + 1,
        rollout=cfg.rollout,
        obs_spec=obs_spec,
        action_spec=action_spec,
        rnn_state_size=rnn_state_size,
        agents_per_env=agents_per_env,
        multi_agent=multi_agent,
    )


class TrajectoryBuffers:
    """Named tensors `[num_slots, T(+1), ...]` plus numpy views of them for per-env writes."""

    STEP_KEYS = ("actions", "log_prob", "action_logits", "rewards", "dones", "time_outs", "policy_version")
    BOOTSTRAP_KEYS = ("values", "rnn_states")

    def __init__(self, layout: BufferLayout, shared: bool):
        self.layout = layout
        n, t = layout.num_slots, layout.rollout
        self.obs = {
            key: torch.zeros((n, t + 1, *shape), dtype=_torch_dtype(dtype))
            for key, (shape, dtype) in layout.obs_spec.items()
        }
        self.tensors: dict[str, torch.Tensor] = {
            "rnn_states": torch.zeros((n, t + 1, layout.rnn_state_size), dtype=torch.float32),
            "values": torch.zeros((n, t + 1), dtype=torch.float32),
            "actions": torch.zeros((n, t, layout.action_spec.flat_dim), dtype=torch.float32),
            "log_prob": torch.zeros((n, t), dtype=torch.float32),
            "action_logits": torch.zeros((n, t, layout.num_action_params), dtype=torch.float32),
            "rewards": torch.zeros((n, t), dtype=torch.float32),
            "dones": torch.zeros((n, t), dtype=torch.float32),
            "time_outs": torch.zeros((n, t), dtype=torch.float32),
            "policy_version": torch.zeros((n, t), dtype=torch.int32),
            "traj_time": torch.zeros((n, 2), dtype=torch.float64),  # time.monotonic() of the first and last step
        }
        if layout.multi_agent:
            self.tensors["active"] = torch.ones((n, t), dtype=torch.bool)
        if shared:
            for tensor in self.all_tensors():
                tensor.share_memory_()
        self._make_views()

    def all_tensors(self) -> list[torch.Tensor]:
        return list(self.obs.values()) + list(self.tensors.values())

    def _make_views(self) -> None:
        self.obs_np = {key: tensor.numpy() for key, tensor in self.obs.items()}
        self.np = {key: tensor.numpy() for key, tensor in self.tensors.items()}

    def __getstate__(self):
        return {"layout": self.layout, "obs": self.obs, "tensors": self.tensors}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._make_views()

    def gather(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """Copy whole trajectories out of the buffers (so their slots can be reused at once)."""
        batch = {key: tensor.index_select(0, slots) for key, tensor in self.tensors.items()}
        batch["obs"] = {key: tensor.index_select(0, slots) for key, tensor in self.obs.items()}
        return batch


def _torch_dtype(dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype
