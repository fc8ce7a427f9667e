"""Vector env sources: one call steps a whole group of envs (EnvPool's C++ threads), where the per-env path loops over
`EnvAdapter`s in Python.

A rollout worker with a vector env asks it for one batch step per split of its envs and writes the results into the
trajectory buffers with array operations; the episode bookkeeping per env is the same as on the per-env path. A family
offers a vector version of its envs with `sf.envs.registry.register_vector_env`, and `--envpool=True` selects it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces

from sf.envs.spaces import (
    ActionSpec,
    ObsSpec,
    UnsupportedSpaceError,
    _float32_bounds_inside,
    action_spec_from_space,
    obs_spec_from_space,
)


@dataclass(frozen=True)
class VectorConfig:
    """Where a vector env lives in the run: its envs are the worker's envs 0..num_envs-1, global ids from
    `first_env_id` on (for seeding)."""

    worker_index: int = 0
    num_envs: int = 1
    first_env_id: int = 0


@dataclass
class VectorStep:
    """One batch step, rows in the order of the env ids asked for. The row of an env whose episode ended holds the
    first observation of its next episode (the env has been reset already), as the per-env path's reset does."""

    obs: dict[str, np.ndarray]
    rewards: np.ndarray  # float32
    terminated: np.ndarray  # bool
    truncated: np.ndarray  # bool
    infos: dict[int, dict] = field(default_factory=dict)  # row -> info, for rows whose episode ended


class VectorEnv(Protocol):
    """What the rollout worker needs of a vector env; observations and actions in sf's layout (`sf.envs.spaces`)."""

    num_envs: int
    obs_spec: ObsSpec
    action_spec: ActionSpec
    frameskip: int  # env frames per step: frame counts and FPS include them
    reward_scale: float  # the learner multiplies rewards by this; returns stay raw
    max_episode_steps: int | None  # the time limit in steps, if the envs have one

    def reset(self) -> dict[str, np.ndarray]:
        """Reset every env; rows in env order."""
        ...

    def step(self, env_ids: np.ndarray, actions: np.ndarray) -> VectorStep:
        """Step the envs `env_ids` (int32) with `actions[k]`, the flat action vector of env `env_ids[k]`."""
        ...

    def cut_first_episodes(self, steps: np.ndarray) -> None:
        """End env i's running episode as truncated after at most `steps[i]` more steps (no cut where it is 0), once:
        `--decorrelate_by_truncation` on a vector env, as `EnvAdapter.cut_first_episode` does per env."""
        ...

    def close(self) -> None: ...


# batch conversions at the boundary ------------------------------------------------------------------------------------
def batch_obs_converter(space: Any) -> tuple[ObsSpec, Callable[[np.ndarray], dict[str, np.ndarray]]]:
    """sf's obs spec of one env and the function turning a batch of raw observations into sf's dict of rows.

    A vector env hands out plain Box observations (images already channels first, as EnvPool's are).
    """
    if not isinstance(space, spaces.Box):
        raise UnsupportedSpaceError(f"vector envs need a Box observation space, got {space!r}")
    spec = obs_spec_from_space(space)
    ((key, (shape, dtype)),) = spec.items()
    if shape != space.shape:  # a channels-last image: sf would transpose it per env
        raise UnsupportedSpaceError(f"vector envs need channels-first images, got shape {space.shape}")
    if space.dtype == dtype:
        return spec, lambda batch: {key: batch}
    return spec, lambda batch: {key: batch.astype(dtype)}


def batch_action_converter(space: Any) -> tuple[ActionSpec, Callable[[np.ndarray], np.ndarray]]:
    """sf's action spec of one env and the function turning `(n, flat_dim)` float32 rows into the env's actions."""
    spec = action_spec_from_space(space)
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return spec, lambda rows: rows[:, 0].astype(np.int32) + start
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        low, high = _float32_bounds_inside(space)
        return spec, lambda rows: rows.clip(low, high)
    raise UnsupportedSpaceError(f"vector envs take a Discrete or a flat Box action space, got {space!r}")
