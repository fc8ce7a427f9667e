"""CooperativeCue: a small cooperative game with Sample Factory's multi-agent API, quick to learn.

Each step every agent sees the same cue (one of `cues` symbols, one-hot) and its own index (one-hot), and names a
symbol; agent a is right when it names `(cue + a) % cues`, so the agents must act differently on the same cue. The
team's reward, the fraction of active agents that were right, goes to every agent. Episodes last `episode_len`
steps, after which the env resets itself (the multi-agent API's auto-reset) and every agent's episode is truncated.
A random team earns `episode_len / cues` per episode (5 with the defaults), a perfect one `episode_len` (20).

With `rest_every` > 0 the last agent rests on every `rest_every`-th step of an episode: its info says
`is_active: False` on the step before, its action is ignored and the team's reward counts the other agents only.

On the last step of an episode each agent's info carries `episode_extra_stats` (`accuracy`, the fraction of its
active steps it was right) and `true_objective` (the steps it was right). The module needs only gymnasium and
numpy, so other frameworks can import the same env for side-by-side runs.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class CooperativeCue(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, num_agents: int = 2, cues: int = 4, episode_len: int = 20, rest_every: int = 0):
        self.num_agents = num_agents
        self.is_multiagent = True
        self.cues = cues
        self.episode_len = episode_len
        self.rest_every = rest_every
        self.observation_space = spaces.Box(0.0, 1.0, (cues + num_agents,), np.float32)
        self.action_space = spaces.Discrete(cues)
        self._cue = 0
        self._steps = 0
        self._right = np.zeros(num_agents, np.int64)
        self._acted = np.zeros(num_agents, np.int64)

    def _obs(self) -> list[np.ndarray]:
        observations = []
        for agent in range(self.num_agents):
            obs = np.zeros(self.cues + self.num_agents, np.float32)
            obs[self._cue] = 1.0
            obs[self.cues + agent] = 1.0
            observations.append(obs)
        return observations

    def _active(self, step: int) -> list[bool]:
        """Who acts on `step` (counted from 1) of the episode."""
        resting = self.rest_every > 0 and step % self.rest_every == 0
        return [not (resting and agent == self.num_agents - 1) for agent in range(self.num_agents)]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(self.cues))
        self._steps = 0
        self._right[:] = 0
        self._acted[:] = 0
        return self._obs(), [{"is_active": active} for active in self._active(1)]

    def step(self, actions):
        self._steps += 1
        active = self._active(self._steps)
        right = [active[a] and int(actions[a]) == (self._cue + a) % self.cues for a in range(self.num_agents)]
        self._right += right
        self._acted += active
        team_reward = sum(right) / sum(active)
        rewards = [team_reward] * self.num_agents
        if self._steps < self.episode_len:
            self._cue = int(self.np_random.integers(self.cues))
            infos = [{"is_active": next_active} for next_active in self._active(self._steps + 1)]
            return self._obs(), rewards, [False] * self.num_agents, [False] * self.num_agents, infos
        ended = [
            {
                "true_objective": float(self._right[a]),
                "episode_extra_stats": {"accuracy": self._right[a] / max(1, self._acted[a])},
            }
            for a in range(self.num_agents)
        ]
        obs, infos = self.reset()
        for info, end in zip(infos, ended):
            info.update(end)
        return obs, rewards, [False] * self.num_agents, [True] * self.num_agents, infos
