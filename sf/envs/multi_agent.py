"""Multi-agent envs with Sample Factory's API, and the one function that opens any env as the rollout loop sees it.

An env is multi-agent when it says so (`is_multiagent = True`) or has `num_agents > 1`, as Sample Factory reads
them. Such an env takes and returns lists with one entry per agent, all agents sharing one observation and one
action space:

    obs, infos = env.reset(seed=...)                                # lists of num_agents
    obs, rewards, terminated, truncated, infos = env.step(actions)  # lists (or arrays) of num_agents

and resets itself: on the step where an agent's episode ends, that agent's observation is already the first one of
its next episode (the step loop never calls `reset` after the first). An agent whose `info["is_active"]` is False
sits out the steps after it until an info says True again: the env still steps it (its action is computed and
ignored), and the learner masks those steps out of every loss, as Sample Factory does.

Every agent's experience trains the policy: each agent has its own trajectory rows, its own episode statistics and
counts its own frames.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from sf.envs.adapter import EnvAdapter, _wrapped_attr
from sf.envs.framestack import FrameStack, stacked_spec
from sf.envs.registry import EnvConfig, create_env
from sf.envs.spaces import ActionConverter, ObsConverter

StepResult = tuple[list[dict[str, np.ndarray]], list[float], list[bool], list[bool], list[dict]]


class MultiAgentEnvError(ValueError):
    """An env that calls itself multi-agent but does not keep the API's promises (lists of num_agents entries)."""


def multi_agent_info(env: Any) -> tuple[bool, int]:
    """(is_multiagent, num_agents) as Sample Factory reads them: `num_agents` defaults to 1, `is_multiagent` to
    `num_agents > 1`."""
    num_agents = int(_wrapped_attr(env, "num_agents", 1))
    is_multiagent = bool(_wrapped_attr(env, "is_multiagent", num_agents > 1))
    if num_agents < 1 or (num_agents > 1 and not is_multiagent):
        raise MultiAgentEnvError(f"an env with num_agents={num_agents} must be multi-agent (is_multiagent=True)")
    return is_multiagent, num_agents


class MultiAgentAdapter:
    """`EnvAdapter` for a multi-agent env: sf's obs dict and flat action vector per agent, converted at the boundary.

    `step` takes the agents' flat actions as rows of one array and returns per-agent lists. With `framestack` > 1
    each agent stacks its own last frames; the arrays returned are then the adapter's and change with the next step.
    """

    def __init__(self, env: gymnasium.Env, num_agents: int, framestack: int = 1):
        self.env = env
        self.num_agents = num_agents
        obs_converter = ObsConverter(env.observation_space)
        action_converter = ActionConverter(env.action_space)
        self.obs_spec = obs_converter.spec
        self.action_spec = action_converter.spec
        self._stacks = [FrameStack(self.obs_spec, framestack) for _ in range(num_agents)] if framestack > 1 else None
        if self._stacks is not None:
            self.obs_spec = stacked_spec(self.obs_spec, framestack)
        self.reward_scale = float(_wrapped_attr(env, "reward_scale", 1.0))
        self.frameskip = int(_wrapped_attr(env, "frameskip", 1))
        self.max_episode_steps = None  # the env resets itself, whatever its limit
        self._obs = obs_converter.convert
        self._action = action_converter.convert

    def reset(self, seed: int | None = None) -> list[dict[str, np.ndarray]]:
        obs, _ = self.env.reset(seed=seed)
        observations = [self._obs(o) for o in self._agents_list(obs, "reset's observations")]
        if self._stacks is None:
            return observations
        return [stack.reset(o) for stack, o in zip(self._stacks, observations)]

    def step(self, flat_actions: np.ndarray) -> StepResult:
        """`flat_actions[a]`: agent a's flat action vector."""
        return self._step_env_actions([self._action(row) for row in flat_actions])

    def _step_env_actions(self, actions: list) -> StepResult:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        agents = self._agents_list
        observations = [self._obs(o) for o in agents(obs, "observations")]
        terminated = [bool(d) for d in agents(terminated, "terminated")]
        truncated = [bool(d) for d in agents(truncated, "truncated")]
        if self._stacks is not None:
            observations = [
                stack.reset(o) if ended or cut else stack.step(o)
                for stack, o, ended, cut in zip(self._stacks, observations, terminated, truncated)
            ]
        rewards = [float(r) for r in agents(rewards, "rewards")]
        return observations, rewards, terminated, truncated, agents(infos, "infos")

    def _agents_list(self, values: Any, what: str) -> list:
        try:
            values = list(values)
        except TypeError:
            values = None
        if values is None or len(values) != self.num_agents:
            got = f"{len(values)} {what}" if values is not None else f"{what} that are no list"
            raise MultiAgentEnvError(
                f"a multi-agent env with num_agents={self.num_agents} returned {got}; it must return one per agent, "
                f"in agent order"
            )
        return values

    def random_steps(self, n: int, seed: int | None = None) -> list[dict[str, np.ndarray]] | None:
        """Take `n` steps of uniformly random actions for every agent; the last observations (None if n == 0)."""
        space = self.env.action_space
        space.seed(seed)
        obs = None
        for _ in range(n):
            obs = self._step_env_actions([space.sample() for _ in range(self.num_agents)])[0]
        return obs

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def open_env(
    cfg: Any, env_config: EnvConfig | None = None, render_mode: str | None = None
) -> EnvAdapter | MultiAgentAdapter:
    """Create `cfg.env` and wrap it as the rollout loop steps it: an `EnvAdapter`, or a `MultiAgentAdapter` for an env
    with Sample Factory's multi-agent API."""
    env = create_env(cfg.env, cfg, env_config, render_mode)
    try:
        is_multiagent, num_agents = multi_agent_info(env)
    except MultiAgentEnvError:
        env.close()
        raise
    if is_multiagent:
        return MultiAgentAdapter(env, num_agents, cfg.env_framestack)
    return EnvAdapter(env, cfg.env_framestack)
