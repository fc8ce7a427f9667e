"""The one object the rollout loop steps: a gymnasium env seen through sf's flat action vector and obs dict."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from sf.envs.framestack import FrameStack, stacked_spec
from sf.envs.spaces import ActionConverter, ObsConverter


def _wrapped_attr(env: gymnasium.Env, name: str, default: Any) -> Any:
    """An attribute on the env, any wrapper below it, or the unwrapped env (gymnasium 1.x wrappers do not forward);
    on an env that is no `gymnasium.Env`, its own attribute."""
    get = getattr(env, "get_wrapper_attr", None)
    if get is None:
        return getattr(env, name, default)
    try:
        return get(name)
    except AttributeError:
        return default


class EnvAdapter:
    """Converts at the boundary only; the conversion functions are fixed in __init__ so `step` does no dispatch.

    With `framestack` > 1 the observations are the last `framestack` frames (see `sf.envs.framestack`); the
    returned arrays are then the adapter's own and change with the next step, so callers copy what they keep.
    """

    def __init__(self, env: gymnasium.Env, framestack: int = 1):
        self.env = env
        obs_converter = ObsConverter(env.observation_space)
        action_converter = ActionConverter(env.action_space)
        self.obs_spec = obs_converter.spec
        self._stack = FrameStack(self.obs_spec, framestack) if framestack > 1 else None
        if self._stack is not None:
            self.obs_spec = stacked_spec(self.obs_spec, framestack)
        self.action_spec = action_converter.spec
        self.reward_scale = float(_wrapped_attr(env, "reward_scale", 1.0))
        self.frameskip = int(_wrapped_attr(env, "frameskip", 1))
        spec = getattr(env, "spec", None)  # the registered time limit, if the env has one
        self.max_episode_steps: int | None = getattr(spec, "max_episode_steps", None)
        self._obs = obs_converter.convert
        self._action = action_converter.convert
        self._env_step = env.step

    def reset(self, seed: int | None = None) -> dict[str, np.ndarray]:
        obs, _ = self.env.reset(seed=seed)
        return self._obs(obs) if self._stack is None else self._stack.reset(self._obs(obs))

    def step(self, flat_action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        return self._step_env_action(self._action(flat_action))

    def _step_env_action(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self._env_step(action)
        obs = self._obs(obs) if self._stack is None else self._stack.step(self._obs(obs))
        return obs, float(reward), bool(terminated), bool(truncated), info

    def cut_first_episode(self, steps: int) -> None:
        """End the running episode as truncated after at most `steps` more steps, once: the env then resets on the
        same schedule as if it had started `max_episode_steps - steps` steps into that episode, without simulating
        those steps. The plain step comes back at the first episode end, so later steps pay nothing for it."""
        remaining, env_step = steps, self.env.step

        def step_until_cut(action):
            nonlocal remaining
            obs, reward, terminated, truncated, info = env_step(action)
            remaining -= 1
            if terminated or truncated or remaining <= 0:
                self._env_step = env_step
                truncated = truncated or not terminated
            return obs, reward, terminated, truncated, info

        self._env_step = step_until_cut

    def random_steps(self, n: int, seed: int | None = None) -> dict[str, np.ndarray] | None:
        """Take `n` uniformly random actions, resetting on episode ends; the last observation (None if n == 0).

        Used to start the envs of one worker at different points of their episodes.
        """
        self.env.action_space.seed(seed)
        obs = None
        for _ in range(n):
            obs, _, terminated, truncated, _ = self._step_env_action(self.env.action_space.sample())
            if terminated or truncated:
                obs = self.reset()
        return obs

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()
