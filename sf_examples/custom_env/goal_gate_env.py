"""GoalGate: steer a point to a goal with a continuous action while naming the open gate with a discrete one.

Observations are a Dict (`pos`, `goal`: Box(2); `gate`: one-hot Box(3)), the action a Tuple(Discrete(3),
Box(-1, 1, (2,))). Each step pays the distance gained towards the goal, +0.1 when the discrete choice names the
gate (redrawn every step), and +1 on reaching the goal (a new one is drawn). Episodes last 100 steps. A random
policy earns about 3.5 per episode; a good one more than 20. The module needs only gymnasium and numpy, so other
frameworks can import the same env for side-by-side runs.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

EPISODE_STEPS = 100
STEP_SIZE = 0.1
REACH_RADIUS = 0.15
NUM_GATES = 3


class GoalGateEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, render_mode: str | None = None):
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-1.0, 1.0, (2,), np.float32),
                "goal": spaces.Box(-1.0, 1.0, (2,), np.float32),
                "gate": spaces.Box(0.0, 1.0, (NUM_GATES,), np.float32),
            }
        )
        self.action_space = spaces.Tuple((spaces.Discrete(NUM_GATES), spaces.Box(-1.0, 1.0, (2,), np.float32)))
        self.render_mode = render_mode
        self._pos = np.zeros(2, np.float32)
        self._goal = np.zeros(2, np.float32)
        self._gate = 0
        self._steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        gate = np.zeros(NUM_GATES, np.float32)
        gate[self._gate] = 1.0
        return {"pos": self._pos.copy(), "goal": self._goal.copy(), "gate": gate}

    def _new_goal(self) -> None:
        self._goal = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self._new_goal()
        self._gate = int(self.np_random.integers(NUM_GATES))
        self._steps = 0
        return self._obs(), {}

    def step(self, action):
        gate_choice, move = action
        move = np.clip(np.asarray(move, np.float32).reshape(2), -1.0, 1.0)
        before = float(np.linalg.norm(self._goal - self._pos))
        self._pos = np.clip(self._pos + STEP_SIZE * move, -1.0, 1.0)
        after = float(np.linalg.norm(self._goal - self._pos))
        reward = (before - after) + (0.1 if int(gate_choice) == self._gate else 0.0)
        if after < REACH_RADIUS:
            reward += 1.0
            self._new_goal()
        self._gate = int(self.np_random.integers(NUM_GATES))
        self._steps += 1
        return self._obs(), reward, False, self._steps >= EPISODE_STEPS, {}
