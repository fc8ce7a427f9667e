"""CartPole whose every step first sleeps a fixed time: a stand-in for a slow simulator.

`python -m sf_examples.profiling.sleepy_env --env=sleepy_cartpole_2000us` trains on CartPole-v1 with a 2 ms step, a
run that `python -m sf.profile report` should call simulation-bound. Any sleep can be named in microseconds, so two
runs that differ only in the simulator's speed are one flag apart.
"""

from __future__ import annotations

import re
import sys
import time

import gymnasium as gym

from sf.envs import register_env
from sf.envs.families import family_named
from sf.train import run_rl
from sf_examples.train_gym_env import gym_defaults

NAME = re.compile(r"sleepy_cartpole_(\d+)us")


class SleepyStep(gym.Wrapper):
    def __init__(self, env: gym.Env, sleep_s: float):
        super().__init__(env)
        self.sleep_s = sleep_s

    def step(self, action):
        time.sleep(self.sleep_s)
        return self.env.step(action)


def make_sleepy_env(full_env_name: str, cfg, env_config=None, render_mode=None) -> gym.Env:
    micros = int(NAME.fullmatch(full_env_name).group(1))
    return SleepyStep(gym.make("CartPole-v1", render_mode=render_mode), micros / 1e6)


def sleepy_defaults(env_name: str) -> dict:
    return gym_defaults("CartPole-v1")


def register_sleepy_env(env_name: str) -> None:
    """Register `env_name` when it names a sleep (`sleepy_cartpole_<microseconds>us`)."""
    if NAME.fullmatch(env_name):
        register_env(env_name, make_sleepy_env)


def main(argv: list[str] | None = None) -> int:
    cfg = family_named("sleepy").cfg_or_exit(argv)
    if not NAME.fullmatch(cfg.env):
        print(
            f"--env: {cfg.env!r} is not sleepy_cartpole_<microseconds>us; for example --env=sleepy_cartpole_2000us",
            file=sys.stderr,
        )
        return 2
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
