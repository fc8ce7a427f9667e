"""CueDuel: a small two-player competitive game with Sample Factory's multi-agent API, for self-play in a population.

Each step both players see the same cue (one of `cues` symbols, one-hot) and their seat (one-hot), and name a symbol;
the player in seat s is right when it names `(cue + s) % cues`, so a policy must learn both seats. The step goes to
a player who is right while the other is wrong: +1 to it, -1 to the other; 0 to both otherwise (zero-sum). Episodes
last `episode_len` steps (16: with a `--rollout` that is a multiple of it, a policy plays whole episodes between its
changes), after which the env resets itself.

Skill does not show in the reward, which averages 0 when equals meet: each player's episode reports its
`true_objective`, the share of steps it was right (0.25 at random, 1 when perfect, whoever the opponent), and
`episode_extra_stats`: `won` and `lost`, the steps it won and lost. The module needs only gymnasium and numpy.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class CueDuel(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, cues: int = 4, episode_len: int = 16):
        self.num_agents = 2
        self.is_multiagent = True
        self.cues = cues
        self.episode_len = episode_len
        self.observation_space = spaces.Box(0.0, 1.0, (cues + 2,), np.float32)
        self.action_space = spaces.Discrete(cues)
        self._cue = 0
        self._steps = 0
        self._right = np.zeros(2, np.int64)
        self._won = np.zeros(2, np.int64)

    def _obs(self) -> list[np.ndarray]:
        observations = []
        for seat in range(2):
            obs = np.zeros(self.cues + 2, np.float32)
            obs[self._cue] = 1.0
            obs[self.cues + seat] = 1.0
            observations.append(obs)
        return observations

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(self.cues))
        self._steps = 0
        self._right[:] = 0
        self._won[:] = 0
        return self._obs(), [{}, {}]

    def step(self, actions):
        self._steps += 1
        right = [int(actions[s]) == (self._cue + s) % self.cues for s in range(2)]
        rewards = [float(right[s]) - float(right[1 - s]) for s in range(2)]
        self._right += right
        self._won += [r > 0 for r in rewards]
        if self._steps < self.episode_len:
            self._cue = int(self.np_random.integers(self.cues))
            return self._obs(), rewards, [False, False], [False, False], [{}, {}]
        ended = [
            {
                "true_objective": self._right[s] / self.episode_len,
                "episode_extra_stats": {"won": int(self._won[s]), "lost": int(self._won[1 - s])},
            }
            for s in range(2)
        ]
        obs, _ = self.reset()
        return obs, rewards, [True, True], [False, False], ended
