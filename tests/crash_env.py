"""A training entry point whose env raises after a few hundred steps (for the failure tests)."""

import sys

import gymnasium as gym

from sf.cfg.arguments import main_cfg_or_exit
from sf.envs import register_env
from sf.train import run_rl


class CrashingCartPole(gym.Wrapper):
    def __init__(self, env, crash_after: int):
        super().__init__(env)
        self.steps = 0
        self.crash_after = crash_after

    def step(self, action):
        self.steps += 1
        if self.steps >= self.crash_after:
            raise RuntimeError("env exploded on purpose")
        return self.env.step(action)


def make_crashing_env(full_env_name, cfg, env_config=None, render_mode=None):
    # the probe env (env_id -1) must survive so the run starts; workers' envs crash
    crash_after = 10**9 if env_config is None or env_config.env_id < 0 else 300
    return CrashingCartPole(gym.make("CartPole-v1"), crash_after)


if __name__ == "__main__":
    register_env("crashing_cartpole", make_crashing_env)
    sys.exit(run_rl(main_cfg_or_exit(sys.argv[1:])))
