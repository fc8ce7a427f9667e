"""A training entry point whose env, 1.5 s after its first step, writes `<train_dir>/hanging` and never returns from
its next step (a simulator stuck in a call): the serial watchdog tests."""

import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from sf.cfg.arguments import main_cfg_or_exit
from sf.envs import register_env
from sf.train import run_rl

HANG_AFTER_S = 1.5


class HangsLater(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, marker: Path):
        self.marker = marker
        self.first_step: float | None = None
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        now = time.monotonic()
        self.first_step = self.first_step or now
        if now - self.first_step > HANG_AFTER_S:
            self.marker.write_text("hanging")
            while True:
                time.sleep(3600)
        self.t += 1
        return np.zeros(4, np.float32), 1.0, False, self.t >= 20, {}


def make_env(full_env_name, cfg, env_config=None, render_mode=None):
    return HangsLater(Path(cfg.train_dir) / "hanging")


if __name__ == "__main__":
    register_env("hangs_later", make_env)
    sys.exit(run_rl(main_cfg_or_exit(sys.argv[1:])))
