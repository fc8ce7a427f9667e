"""PettingZoo parallel envs as Sample Factory multi-agent envs (`sf.envs.multi_agent`), so sf trains them.

Two ways in:
- `--env=pettingzoo:<module>` (the `pettingzoo` family, `sf_examples.pettingzoo.train_pettingzoo`): the module's
  `parallel_env(render_mode=..., **kwargs)`, e.g. `--env=pettingzoo:pettingzoo.sisl.pursuit_v5`, its keyword
  arguments from `--pettingzoo_kwargs` (a JSON object);
- `register_pettingzoo_env(name, make_parallel_env, **kwargs)`: any function returning a `ParallelEnv` (with the
  user's wrappers, say), trained as `--env=<name>`.

The agents are the env's `possible_agents`, in that order; they must share one observation and one action space
(one policy acts for all). PettingZoo drops an agent from `env.agents` when its episode ends before the others':
from then on the agent is inactive (its steps are masked out of training, as Sample Factory does, its observation
is its last one and it gets no action), until the whole env's episode ends. Then every agent's episode ends on the
same step, each with its own terminated/truncated flags, and the env resets itself: an agent's episode statistics
cover the env's episode, its return what it earned while active.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium
import numpy as np

from sf.envs.registry import EnvConfig, EnvNotFoundError, register_env
from sf.envs.spaces import UnsupportedSpaceError

PREFIX = "pettingzoo:"


class PettingZooEnv(gymnasium.Env):
    """A PettingZoo `ParallelEnv` behind Sample Factory's multi-agent API: lists in `possible_agents` order, and
    auto-reset once every agent's episode has ended."""

    def __init__(self, env: Any):
        self.env = env
        self.agent_ids = list(env.possible_agents)
        self.num_agents = len(self.agent_ids)
        self.is_multiagent = True
        self.observation_space = _shared_space(env.observation_space, self.agent_ids, "observation")
        self.action_space = _shared_space(env.action_space, self.agent_ids, "action")
        self.render_mode = getattr(env, "render_mode", None)
        self._last_obs: dict[str, Any] = {}
        self._ended: dict[str, tuple[bool, bool]] = {}  # agent -> (terminated, truncated) when its episode ended

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        self._ended = {}
        self._last_obs = {agent: obs.get(agent) for agent in self.agent_ids}
        blank = next((o for o in obs.values() if o is not None), None)
        for agent, value in self._last_obs.items():
            if value is None and blank is not None:  # an agent that joins later: zeros until it observes
                self._last_obs[agent] = _zeros_like(blank)
        live = set(self.env.agents)
        return self._agent_obs(), [{**infos.get(agent, {}), "is_active": agent in live} for agent in self.agent_ids]

    def step(self, actions):
        live = set(self.env.agents)
        obs, rewards, terminations, truncations, infos = self.env.step(
            {agent: action for agent, action in zip(self.agent_ids, actions) if agent in live}
        )
        self._last_obs.update(obs)
        for agent in self.agent_ids:
            if agent in live and (terminations.get(agent, False) or truncations.get(agent, False)):
                self._ended[agent] = (bool(terminations.get(agent, False)), bool(truncations.get(agent, False)))
        reward_list = [float(rewards.get(agent, 0.0)) for agent in self.agent_ids]
        still_live = set(self.env.agents)
        if still_live:
            info_list = [{**infos.get(agent, {}), "is_active": agent in still_live} for agent in self.agent_ids]
            no = [False] * self.num_agents
            return self._agent_obs(), reward_list, no, no, info_list
        ended = [self._ended.get(agent, (False, True)) for agent in self.agent_ids]
        next_obs, next_infos = self.reset()
        for info, agent in zip(next_infos, self.agent_ids):  # the last step's infos (episode_extra_stats, say) win
            info.update(infos.get(agent, {}))
        return next_obs, reward_list, [t for t, _ in ended], [c for _, c in ended], next_infos

    def _agent_obs(self) -> list:
        return [self._last_obs[agent] for agent in self.agent_ids]

    def render(self):
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def _shared_space(space_of: Callable[[str], Any], agents: list[str], role: str) -> Any:
    spaces = [space_of(agent) for agent in agents]
    if not spaces:
        raise UnsupportedSpaceError("a PettingZoo env without possible_agents")
    different = [agent for agent, space in zip(agents, spaces) if space != spaces[0]]
    if different:
        raise UnsupportedSpaceError(
            f"one policy acts for every agent, so they must share one {role} space: {agents[0]} has {spaces[0]}, "
            f"{different[0]} has {spaces[agents.index(different[0])]}"
        )
    return spaces[0]


def _zeros_like(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {key: _zeros_like(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_zeros_like(value) for value in obs)
    return np.zeros_like(obs)


# registration ---------------------------------------------------------------------------------------------------
def make_pettingzoo_env(
    make_parallel_env: Callable[..., Any],
    kwargs: dict[str, Any],
    full_env_name: str,
    cfg: Any,
    env_config: EnvConfig | None,
    render_mode: str | None = None,
) -> PettingZooEnv:
    return PettingZooEnv(make_parallel_env(render_mode=render_mode, **kwargs))


def register_pettingzoo_env(name: str, make_parallel_env: Callable[..., Any], **kwargs: Any) -> None:
    """Train `make_parallel_env(render_mode=..., **kwargs)` (a PettingZoo `ParallelEnv`) as `--env=<name>`. Name a
    module-level function (a run's processes import it by name)."""
    register_env(name, partial(make_pettingzoo_env, make_parallel_env, kwargs))


def register_pettingzoo_module(env: str) -> None:
    """The `pettingzoo` family's registration: `pettingzoo:<module>` trains `<module>.parallel_env`, with keyword
    arguments from `--pettingzoo_kwargs`, read when each env is made."""
    register_env(env, partial(_make_from_module, env[len(PREFIX) :]))


def _make_from_module(
    module_name: str, full_env_name: str, cfg: Any, env_config: EnvConfig | None, render_mode: str | None = None
) -> PettingZooEnv:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvNotFoundError(
            f"cannot import {module_name!r} ({exc}); PettingZoo's envs come with `pip install sf[pettingzoo]` and "
            f"their own extras (pettingzoo[sisl], ...)"
        ) from None
    make = getattr(module, "parallel_env", None)
    if make is None:
        raise EnvNotFoundError(f"{module_name!r} has no parallel_env(): name a PettingZoo env module")
    return PettingZooEnv(make(render_mode=render_mode, **pettingzoo_kwargs(cfg)))


def pettingzoo_kwargs(cfg: Any) -> dict[str, Any]:
    text = getattr(cfg, "pettingzoo_kwargs", None) or "{}"
    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--pettingzoo_kwargs is not JSON ({exc}): {text!r}") from None
    if not isinstance(kwargs, dict):
        raise ValueError(f"--pettingzoo_kwargs must be a JSON object, got {text!r}")
    return kwargs


def _json_object(text: str) -> str:
    try:
        pettingzoo_kwargs(argparse.Namespace(pettingzoo_kwargs=text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--pettingzoo_kwargs ")) from None
    return text


def pettingzoo_defaults(env_name: str) -> dict[str, Any]:
    """The family's flag defaults: the experiment named after the env's module (`pettingzoo:mpe2.simple_spread_v3`
    trains into `<train_dir>/simple_spread_v3`), not the parser's shared `default_experiment`."""
    return {"experiment": env_name.removeprefix(PREFIX).rsplit(".", 1)[-1] or "pettingzoo"}


def add_pettingzoo_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pettingzoo_kwargs",
        type=_json_object,
        default="{}",
        metavar="JSON",
        help="keyword arguments of the module's parallel_env(), a JSON object: '{\"n_pursuers\": 4}'",
    )
