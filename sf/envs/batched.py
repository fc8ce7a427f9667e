"""Batched envs (Sample Factory's `--batched_sampling=True`): one env object steps `num_agents` copies per call and
returns whole tensors; a rollout worker's env objects are one `sf.envs.vector.VectorEnv` of them.

What an env factory may return, each taken as it is (no wrapper of the user's):
- a tensor env in the IsaacGym style (Sample Factory's batched env API): `num_agents` copies, `observation_space` and
  `action_space` of one copy, `reset() -> (obs, info)` and `step(actions) -> (obs, rewards, terminated, truncated,
  infos)` with one row per copy (torch tensors on the CPU or a GPU, numpy arrays, or anything DLPack exports: JAX),
  obs a tensor or a dict of them, and a copy whose episode ends reset inside the env on that step. `infos` may hold
  `episode_extra_stats` (a dict of per-copy tensors) and `true_objective` (per copy), read where an episode ended;
- gymnasium's vector API (`gymnasium.make_vec`, `SyncVectorEnv`, `AsyncVectorEnv`): its `num_envs` copies; where its
  autoreset mode is not SAME_STEP the copies that ended are reset at once with `reset_mask`, so every row holds the
  next episode's first observation as above;
- an EnvPool (gymnasium API, sync mode): the copies that ended step once more at once (EnvPool resets them then);
- a plain gymnasium env: one copy.

Actions go to the env as one array: a numpy array, or with `--env_gpu_actions=True` a torch tensor on the env's
device; discrete actions as int32 of shape (copies,), continuous ones as float32 (copies, dim).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces

from sf.envs.registry import EnvConfig, create_env
from sf.envs.spaces import ActionSpec, ObsSpec, UnsupportedSpaceError, action_spec_from_space, obs_spec_from_space
from sf.envs.vector import VectorConfig, VectorStep

log = logging.getLogger("sf")

Rows = Any  # torch.Tensor | np.ndarray: one row per copy


def as_rows(x: Any) -> Rows:
    """A batch as a torch tensor or numpy array without copying: JAX and other DLPack exporters through DLPack."""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x
    if hasattr(x, "__dlpack__"):
        return torch.from_dlpack(x)
    return np.asarray(x)


def to_numpy(x: Any) -> np.ndarray:
    """A small per-copy vector (rewards, dones) on the host."""
    x = as_rows(x)
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def env_device(env: Any) -> torch.device:
    """Where a tensor env lives (`device`, as IsaacGym's and Sample Factory's examples name it); the CPU otherwise."""
    device = getattr(env, "device", None)
    try:
        return torch.device(device) if device is not None else torch.device("cpu")
    except (TypeError, RuntimeError):
        return torch.device("cpu")


# the kinds of batched env objects ---------------------------------------------------------------------------------
class TensorEnvSource:
    """An env with Sample Factory's batched API: it is already what the worker needs."""

    def __init__(self, env: Any):
        self.env = env
        self.num_agents = int(env.num_agents)
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.device = env_device(env)

    def reset(self, seed: int | None) -> Any:
        """The env seeds its copies itself (its factory has the env id); `seed` is for the other kinds."""
        return self.env.reset()[0]

    def step(self, actions: Any) -> tuple:
        return self.env.step(actions)

    def close(self) -> None:
        self.env.close()


class GymVectorSource:
    """gymnasium's vector API: ended copies reset in the same call whatever the env's autoreset mode."""

    def __init__(self, env: gymnasium.vector.VectorEnv):
        self.env = env
        self.num_agents = int(env.num_envs)
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self.device = torch.device("cpu")
        mode = env.metadata.get("autoreset_mode", gymnasium.vector.AutoresetMode.NEXT_STEP)
        self.same_step = mode == gymnasium.vector.AutoresetMode.SAME_STEP

    def reset(self, seed: int | None) -> Any:
        return self.env.reset(seed=seed)[0]

    def step(self, actions: Any) -> tuple:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        ended = np.logical_or(terminated, truncated)
        if not self.same_step and ended.any():
            obs, _ = self.env.reset(options={"reset_mask": ended})
        return obs, rewards, terminated, truncated, infos

    def close(self) -> None:
        self.env.close()


class EnvPoolSource:
    """An EnvPool in its sync mode: an ended copy is stepped once more at once, the step on which EnvPool resets it."""

    def __init__(self, pool: Any):
        self.env = pool
        self.num_agents = int(pool.config["num_envs"])
        self.observation_space = pool.observation_space
        self.action_space = pool.action_space
        self.device = torch.device("cpu")
        self._ids = np.arange(self.num_agents, dtype=np.int32)

    def reset(self, seed: int | None) -> Any:
        """EnvPool is seeded where it is made."""
        return self.env.reset()[0]

    def step(self, actions: Any) -> tuple:
        obs, rewards, terminated, truncated, infos = self.env.step(actions, self._ids)
        ended = np.flatnonzero(np.logical_or(terminated, truncated))
        if len(ended):
            obs[ended] = self.env.step(actions[ended], self._ids[ended])[0]
        return obs, rewards, terminated, truncated, infos

    def close(self) -> None:
        self.env.close()


def batched_source(env: Any) -> TensorEnvSource | GymVectorSource | EnvPoolSource:
    """The env object as one of the kinds above."""
    if hasattr(env, "all_env_ids") and hasattr(env, "config"):  # EnvPool's (a VectorEnv whose reset takes no mask)
        if env.is_async:
            raise UnsupportedSpaceError(
                "--batched_sampling steps an EnvPool in its sync mode: make it with batch_size=num_envs"
            )
        return EnvPoolSource(env)
    if isinstance(env, gymnasium.vector.VectorEnv):
        return GymVectorSource(env)
    if hasattr(env, "num_agents"):
        return TensorEnvSource(env)
    if isinstance(env, gymnasium.Env):
        return GymVectorSource(
            gymnasium.vector.SyncVectorEnv([lambda: env], autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
        )
    raise UnsupportedSpaceError(
        f"--batched_sampling needs an env with num_agents copies, a gymnasium vector env or an EnvPool, got {env!r}"
    )


# the worker's env objects as one vector env ---------------------------------------------------------------------
def batched_obs_spec(space: Any) -> ObsSpec:
    """sf's obs spec of one copy: a Box (key `obs`) or a flat Dict of Boxes, images channels first."""
    spec = obs_spec_from_space(space)
    boxes = {"obs": space} if isinstance(space, spaces.Box) else dict(getattr(space, "spaces", {}))
    for key, box in boxes.items():
        if key not in spec or spec[key][0] != box.shape:
            raise UnsupportedSpaceError(
                f"--batched_sampling needs a Box or a flat Dict of Boxes with images channels first, got {space!r}"
            )
    return spec


@dataclass(frozen=True)
class GpuFlags:
    """`--env_gpu_actions` / `--env_gpu_observations` as this run can honour them."""

    actions: bool
    observations: bool


_said_no_gpu: set[str] = set()


def gpu_flags(cfg: Any, device: torch.device) -> GpuFlags:
    """Sample Factory's two flags for an env on `device`; on the CPU they change nothing, said once per process."""
    actions = bool(getattr(cfg, "env_gpu_actions", False))
    observations = bool(getattr(cfg, "env_gpu_observations", True))
    if device.type == "cpu" and actions and "actions" not in _said_no_gpu:
        _said_no_gpu.add("actions")
        log.info("--env_gpu_actions=True: the env is on the CPU, so its actions are CPU torch tensors")
    if device.type == "cpu" and observations and getattr(cfg, "device", "cpu") != "cpu" and "obs" not in _said_no_gpu:
        _said_no_gpu.add("obs")
        log.info("--env_gpu_observations=True: the env is on the CPU, its observations are copied from there")
    return GpuFlags(actions, observations and device.type != "cpu")


class BatchedEnvs:
    """A rollout worker's `num_envs` env objects of `agents` copies each, as one `VectorEnv` whose env ids are the
    objects: a step of some of them returns their rows object after object. One object per split (Sample Factory's
    usual layout for GPU simulators) passes its tensors through untouched; several are concatenated once."""

    def __init__(self, sources: list, cfg: Any, seeds: list[int | None] | None = None):
        first = sources[0]
        self.seeds = seeds or [None] * len(sources)
        self.sources = sources
        self.num_envs = len(sources)
        self.agents = first.num_agents
        for source in sources:
            if source.num_agents != self.agents:
                raise UnsupportedSpaceError(
                    f"batched env objects differ in copies: {source.num_agents} != {self.agents}"
                )
        self.obs_spec: ObsSpec = batched_obs_spec(first.observation_space)
        self.action_spec: ActionSpec = action_spec_from_space(first.action_space)
        if not isinstance(first.action_space, (spaces.Discrete, spaces.Box)) or (
            isinstance(first.action_space, spaces.Box) and len(first.action_space.shape) != 1
        ):
            raise UnsupportedSpaceError(
                f"--batched_sampling takes a Discrete or a flat Box action space, got {first.action_space!r}"
            )
        self.discrete = isinstance(first.action_space, spaces.Discrete)
        self.action_start = int(first.action_space.start) if self.discrete else 0
        self.frameskip = int(getattr(first.env, "frameskip", 1))
        self.reward_scale = float(getattr(first.env, "reward_scale", 1.0))
        self.max_episode_steps = None  # the envs keep their own time limits; nothing is cut from outside
        self.device = first.device
        self.gpu = gpu_flags(cfg, self.device)
        self.env_stats = bool(getattr(cfg, "use_record_episode_statistics", False))

    def reset(self) -> dict[str, Rows]:
        return self._join([self._obs(source.reset(seed)) for source, seed in zip(self.sources, self.seeds)])

    def step(self, env_ids: np.ndarray, actions: np.ndarray) -> VectorStep:
        agents, parts = self.agents, []
        for k, env in enumerate(env_ids.tolist()):
            parts.append(self.sources[env].step(self._actions(actions[k * agents : (k + 1) * agents])))
        obs = self._join([self._obs(part[0]) for part in parts])
        rewards, terminated, truncated = (
            np.concatenate([to_numpy(part[j]).reshape(-1) for part in parts]) for j in (1, 2, 3)
        )
        terminated, truncated = terminated.astype(bool), truncated.astype(bool)
        ended = np.flatnonzero(terminated | truncated)
        infos = self._ended_infos([part[4] for part in parts], ended) if len(ended) else {}
        return VectorStep(obs, rewards.astype(np.float32, copy=False), terminated, truncated, infos)

    def cut_first_episodes(self, steps: np.ndarray) -> None:
        """Batched envs start together and keep their own time limits, as in Sample Factory: nothing to cut."""

    def close(self) -> None:
        for source in self.sources:
            source.close()

    # at the boundary ------------------------------------------------------------------------------------------
    def _actions(self, rows: np.ndarray) -> Any:
        """One object's rows of sf's flat actions as the env takes them."""
        if self.discrete:
            rows = rows[:, 0].astype(np.int32) + self.action_start
        if self.gpu.actions:
            return torch.from_numpy(rows).to(self.device, non_blocking=True)
        return rows

    def _obs(self, obs: Any) -> dict[str, Rows]:
        if isinstance(obs, dict):
            return {key: as_rows(obs[key]) for key in self.obs_spec}
        return {"obs": as_rows(obs)}

    @staticmethod
    def _join(parts: list[dict[str, Rows]]) -> dict[str, Rows]:
        if len(parts) == 1:
            return parts[0]
        joined = {}
        for key in parts[0]:
            rows = [part[key] for part in parts]
            if all(isinstance(r, np.ndarray) for r in rows):
                joined[key] = np.concatenate(rows)
            else:
                joined[key] = torch.cat([torch.as_tensor(r) for r in rows])
        return joined

    def _ended_infos(self, infos: list, ended: np.ndarray) -> dict[int, dict]:
        """Row -> the info of an episode that ended there: its extra stats and true objective (per-copy entries of
        the env's vectorized info), and with `--use_record_episode_statistics` gymnasium's `episode` entry."""
        agents = self.agents
        out: dict[int, dict] = {}
        for k, info in enumerate(infos):
            if not isinstance(info, dict) or not info:
                continue
            rows = ended[(ended >= k * agents) & (ended < (k + 1) * agents)]
            if not len(rows):
                continue
            local = rows - k * agents
            fields: dict[str, Any] = {}
            extra = info.get("episode_extra_stats")
            if isinstance(extra, dict):
                fields["episode_extra_stats"] = {key: _per_copy(value, local) for key, value in extra.items()}
            if "true_objective" in info:
                fields["true_objective"] = _per_copy(info["true_objective"], local)
            episode = info.get("episode")
            if self.env_stats and isinstance(episode, dict):
                fields["episode"] = {key: _per_copy(episode[key], local) for key in ("r", "l")}
            for j, row in enumerate(rows.tolist()):
                out[row] = _row_info(fields, j)
        return out


def _per_copy(value: Any, rows: np.ndarray) -> np.ndarray:
    """The entries of a per-copy info vector at `rows` (a scalar stands for every copy)."""
    array = to_numpy(value)
    if array.ndim == 0:
        return np.full(len(rows), array.item())
    return array[rows]


def _row_info(fields: dict[str, Any], j: int) -> dict:
    info: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, dict):
            info[name] = {key: column[j].item() for key, column in value.items()}
        else:
            info[name] = value[j].item()
    return info


def create_batched_envs(name: str, cfg: Any, config: VectorConfig) -> BatchedEnvs:
    """The worker's `config.num_envs` env objects from the env's factory, in env order."""
    sources = []
    ids = [config.first_env_id + i for i in range(config.num_envs)]
    try:
        for i, env_id in enumerate(ids):
            sources.append(batched_source(create_env(name, cfg, EnvConfig(config.worker_index, i, env_id))))
        seeds = [None if cfg.seed is None else cfg.seed * 100_003 + env_id * sources[0].num_agents for env_id in ids]
        return BatchedEnvs(sources, cfg, seeds)
    except BaseException:
        for source in sources:
            source.close()
        raise
