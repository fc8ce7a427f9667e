"""The one object the rollout loop steps: a gymnasium env seen through sf's flat action vector and obs dict."""
from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from sf.envs.spaces import ActionConverter, ObsConverter


def _wrapped_attr(env: gymnasium.Env, name: str, default: Any) -> Any:
    """An attribute on the env, any wrapper below it, or the unwrapped env (gymnasium 1.x wrappers do not forward)."""
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return default


class EnvAdapter:
    """Converts at the boundary only; the conversion functions are fixed in __init__ so `step` does no dispatch."""

    def __init__(self, env: gymnasium.Env):
        self.env = env
        obs_converter = ObsConverter(env.observation_space)
        action_converter = ActionConverter(env.action_space)
        self.obs_spec = obs_converter.spec
        self.action_spec = action_converter.spec
        self.reward_scale = float(_wrapped_attr(env, "reward_scale", 1.0))
        self.frameskip = int(_wrapped_attr(env, "frameskip", 1))
        self._obs = obs_converter.convert
        self._action = action_converter.convert
        self._env_step = env.step

    def reset(self, seed: int | None = None) -> dict[str, np.ndarray]:
        obs, _ = self.env.reset(seed=seed)
        return self._obs(obs)

    def step(self, flat_action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self._env_step(self._action(flat_action))
        return self._obs(obs), float(reward), bool(terminated), bool(truncated), info

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()
