"""An EnvPool as an sf vector env (`sf.envs.vector.VectorEnv`): one call steps a group of a rollout worker's envs in
EnvPool's C++ threads.

Two modes (`--envpool_mode`):
- sync: the pool's batch is all of its envs, and a call steps exactly the envs it is given (EnvPool takes any subset
  of env ids in this mode) and returns when all of them have; the worker's splits then double-buffer as usual.
- async: EnvPool's asynchronous mode, receiving one env at a time: a call sends the group's actions at once and
  collects each env as it finishes, while the rest still step. It takes any group too (a fixed batch larger than one
  would wait forever for envs the worker holds back, e.g. one waiting for a free trajectory slot).

An env whose episode ended is reset by stepping it once more at once: on that step EnvPool resets it and ignores the
action. For Atari this is what keeps the game going after a lost life under `episodic_life`, where EnvPool's
`reset(env_id)` would start a new game.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from sf.envs.registry import EnvNotFoundError
from sf.envs.vector import VectorConfig, VectorStep, batch_action_converter, batch_obs_converter

INSTALL_HINT = "pip install 'sf[envpool]'"


def require_envpool(task_id: str, env_name: str) -> Any:
    """The envpool module, once it is known to have `task_id`; otherwise an error naming what to do."""
    try:
        import envpool
    except ImportError as exc:
        raise EnvNotFoundError(f"--envpool=True needs the envpool package ({exc}): {INSTALL_HINT}") from None
    if task_id not in envpool.list_all_envs():
        raise EnvNotFoundError(f"EnvPool has no {task_id!r} (asked for by {env_name!r}); leave --envpool out")
    return envpool


def pool_threads(cfg: Any, num_envs: int) -> int:
    """`--envpool_num_threads`, where 0 means one thread per core this process may run on (a pinned rollout
    worker: one), and never more threads than envs."""
    wanted = int(getattr(cfg, "envpool_num_threads", 0))
    if wanted <= 0:
        wanted = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(wanted, num_envs))


def pool_seed(cfg: Any, config: VectorConfig) -> int:
    """EnvPool seeds env i with seed + i: the same global env gets the same seed as on the per-env path."""
    if cfg.seed is None:
        return int(np.random.SeedSequence().entropy % 2**31)
    return (cfg.seed * 100_003 + config.first_env_id) % 2**31


def make_pool(task_id: str, env_name: str, cfg: Any, config: VectorConfig, **options: Any) -> Any:
    envpool = require_envpool(task_id, env_name)
    asynchronous = getattr(cfg, "envpool_mode", "sync") == "async"
    return envpool.make(
        task_id,
        env_type="gymnasium",
        num_envs=config.num_envs,
        batch_size=1 if asynchronous else config.num_envs,
        num_threads=pool_threads(cfg, config.num_envs),
        thread_affinity_offset=int(getattr(cfg, "envpool_thread_affinity_offset", -1)),
        seed=pool_seed(cfg, config),
        **options,
    )


class EnvPoolEnv:
    """sf's layout at the boundary; returns are the raw ones (EnvPool's unclipped `info["reward"]` where it clips), and
    an episode's statistics are reported when the game is over (`info["terminated"]` under episodic life)."""

    def __init__(self, pool: Any, frameskip: int = 1, reward_scale: float = 1.0):
        self.pool = pool
        self.num_envs = int(pool.config["num_envs"])
        self.asynchronous = pool.is_async
        self.obs_spec, self._obs = batch_obs_converter(pool.observation_space)
        self.action_spec, self._actions = batch_action_converter(pool.action_space)
        self.frameskip = frameskip
        self.reward_scale = reward_scale
        self._returns = np.zeros(self.num_envs, np.float64)
        self._lengths = np.zeros(self.num_envs, np.int64)
        self._ignored = self._actions(np.zeros((self.num_envs, self.action_spec.flat_dim), np.float32))
        self.max_episode_steps: int | None = int(pool.config["max_episode_steps"])
        self._cut = np.zeros(self.num_envs, np.int64)  # steps left before a first episode is cut; 0: no cut
        self._cutting = False

    def reset(self) -> dict[str, np.ndarray]:
        self._returns[:] = 0.0
        self._lengths[:] = 0
        if self.asynchronous:
            self.pool.async_reset()
            obs, *_ = self._collect(self.pool.all_env_ids)
        else:
            obs, _ = self.pool.reset()
        return self._obs(obs)

    def step(self, env_ids: np.ndarray, actions: np.ndarray) -> VectorStep:
        obs, rewards, terminated, truncated, info = self._step(self._actions(actions), env_ids)
        raw = info["reward"] if "reward" in info else rewards
        self._returns[env_ids] += raw
        self._lengths[env_ids] += 1
        ended = terminated | truncated
        if self._cutting:
            truncated = truncated | self._count_down(env_ids, ended)
        infos: dict[int, dict] = {}
        if (terminated | truncated).any():
            cut = truncated & ~ended
            if ended.any():
                rows = np.flatnonzero(ended)
                obs[rows] = self._step(self._ignored[: len(rows)], env_ids[rows])[0]
            if cut.any():
                rows = np.flatnonzero(cut)
                obs[rows] = self.pool.reset(env_ids[rows])[0]
            ended = terminated | truncated
            rows = np.flatnonzero(ended)
            ids = env_ids[rows]
            game_over = truncated[rows] | (info["terminated"][rows] != 0) if "terminated" in info else ended[rows]
            for row, env in zip(rows[game_over].tolist(), ids[game_over].tolist()):
                infos[row] = {"episode": {"r": float(self._returns[env]), "l": int(self._lengths[env])}}
                self._returns[env] = 0.0
                self._lengths[env] = 0
        return VectorStep(self._obs(obs), rewards.astype(np.float32), terminated, truncated, infos)

    def cut_first_episodes(self, steps: np.ndarray) -> None:
        """Sync mode only: EnvPool's `reset(env_id)` is not defined in its asynchronous mode."""
        if not self.asynchronous:
            self._cut[:] = steps
        self._cutting = bool(self._cut.any())

    def _count_down(self, env_ids: np.ndarray, ended: np.ndarray) -> np.ndarray:
        """Rows whose first episode is cut now; an episode that ended on its own cancels its env's cut."""
        left = self._cut[env_ids]
        counting = left > 0
        left = np.where(counting, left - 1, 0)
        cut_now = counting & (left == 0) & ~ended
        self._cut[env_ids] = np.where(ended, 0, left)
        self._cutting = bool(self._cut.any())
        return cut_now

    def _step(self, actions: np.ndarray, env_ids: np.ndarray) -> tuple:
        if not self.asynchronous:
            return self.pool.step(actions, env_ids)
        self.pool.send(actions, env_ids)
        return self._collect(env_ids)

    def _collect(self, env_ids: np.ndarray) -> tuple:
        """Receive one env at a time until every env of `env_ids` is back; rows in the order of `env_ids`."""
        order = {env: row for row, env in enumerate(env_ids.tolist())}
        parts = [self.pool.recv() for _ in range(len(env_ids))]
        rows = np.argsort([order[int(part[-1]["env_id"][0])] for part in parts])
        obs = np.concatenate([parts[i][0] for i in rows])
        rewards, terminated, truncated = (np.concatenate([parts[i][k] for i in rows]) for k in (1, 2, 3))
        info = {
            key: np.concatenate([parts[i][-1][key] for i in rows])
            for key in ("reward", "terminated")
            if key in parts[0][-1]
        }
        return obs, rewards, terminated, truncated, info

    def close(self) -> None:
        self.pool.close()
