"""A training entry point whose env burns a known amount of CPU in pure Python on every step (breakdown tests)."""

import sys
import time

import gymnasium as gym

from sf.cfg.arguments import main_cfg_or_exit
from sf.envs import register_env
from sf.train import run_rl

BURN_S = 200e-6
burned_s: dict[str, float] = {}  # by experiment: seconds the envs spent burning, by the env's own clock


class BurningCartPole(gym.Wrapper):
    def __init__(self, env, experiment: str):
        super().__init__(env)
        self.experiment = experiment

    def step(self, action):
        start = time.perf_counter()
        while time.perf_counter() - start < BURN_S:
            pass
        burned_s[self.experiment] = burned_s.get(self.experiment, 0.0) + time.perf_counter() - start
        return self.env.step(action)


def make_burning_env(full_env_name, cfg, env_config=None, render_mode=None):
    return BurningCartPole(gym.make("CartPole-v1"), cfg.experiment)


def main(argv: list[str]) -> int:
    register_env("burning_cartpole", make_burning_env)
    return run_rl(main_cfg_or_exit(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
