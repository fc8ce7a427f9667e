"""A training entry point whose env shows every step the same observation and writes each action it receives to
`<train_dir>/actions_w<worker>.txt`: the actions then differ between workers only through their random draws."""

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

from sf.cfg.arguments import main_cfg_or_exit
from sf.envs import register_env
from sf.train import run_rl


class SameEveryStep(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(8)

    def __init__(self, log: Path):
        self.log = open(log, "a")
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.log.write(f"{int(action)}\n")
        self.log.flush()
        self.t += 1
        return np.zeros(4, np.float32), 0.0, False, self.t >= 50, {}

    def close(self):
        self.log.close()


def make_env(full_env_name, cfg, env_config=None, render_mode=None):
    worker = env_config.worker_index if env_config is not None else "probe"
    return SameEveryStep(Path(cfg.train_dir) / f"actions_w{worker}.txt")


if __name__ == "__main__":
    register_env("same_every_step", make_env)
    sys.exit(run_rl(main_cfg_or_exit(sys.argv[1:])))
