"""A training entry point whose env raises after a few hundred steps (for the failure tests): `crashing_cartpole`
every time, `fails_once` only the first time in a train dir (a simulator that crashed once)."""

import sys
from pathlib import Path

import gymnasium as gym

from sf.cfg.arguments import main_cfg_or_exit
from sf.envs import register_env
from sf.train import run_rl


class CrashingCartPole(gym.Wrapper):
    def __init__(self, env, crash_after: int, once: Path | None = None):
        super().__init__(env)
        self.steps = 0
        self.crash_after = crash_after
        self.once = once

    def step(self, action):
        self.steps += 1
        if self.steps >= self.crash_after and (self.once is None or not self.once.exists()):
            if self.once is not None:
                self.once.touch()
                raise RuntimeError("the simulator crashed")
            raise RuntimeError("env exploded on purpose")
        return self.env.step(action)


def make_crashing_env(full_env_name, cfg, env_config=None, render_mode=None):
    # the probe env (env_id -1) must survive so the run starts; workers' envs crash
    crash_after = 10**9 if env_config is None or env_config.env_id < 0 else 300
    return CrashingCartPole(gym.make("CartPole-v1"), crash_after)


def make_failing_once(full_env_name, cfg, env_config=None, render_mode=None):
    crash_after = 10**9 if env_config is None or env_config.env_id < 0 else 300
    return CrashingCartPole(gym.make("CartPole-v1"), crash_after, Path(cfg.train_dir) / "crashed_once")


if __name__ == "__main__":
    register_env("crashing_cartpole", make_crashing_env)
    register_env("fails_once", make_failing_once)
    sys.exit(run_rl(main_cfg_or_exit(sys.argv[1:])))
