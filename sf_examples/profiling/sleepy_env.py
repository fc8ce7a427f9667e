"""CartPole whose every step first sleeps a fixed time: a stand-in for a slow simulator.

`python -m sf_examples.profiling.sleepy_env --env=sleepy_cartpole_2000us` trains on CartPole-v1 with a 2 ms step, a
run that `python -m sf.profile report` should call simulation-bound. Any sleep can be named in microseconds, so two
runs that differ only in the simulator's speed are one flag apart.

`--env=switch_cartpole_2000us` sleeps only while the file `<train_dir>/<experiment>/induce_simulation` exists: the
slow simulator switched on and off in a running experiment (`touch` / `rm` the file), to watch the verdict of
`python -m sf.profile top` follow it.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import gymnasium as gym

from sf.envs import register_env
from sf.envs.families import family_named
from sf.train import run_rl
from sf_examples.train_gym_env import gym_defaults

NAME = re.compile(r"(sleepy|switch)_cartpole_(\d+)us")
SWITCH_FILE = "induce_simulation"
SWITCH_CHECK_S = 0.5


class SleepyStep(gym.Wrapper):
    def __init__(self, env: gym.Env, sleep_s: float):
        super().__init__(env)
        self.sleep_s = sleep_s

    def step(self, action):
        time.sleep(self.sleep_s)
        return self.env.step(action)


class SwitchedSleep(gym.Wrapper):
    """Sleeps each step while a file exists; looks for it at most every SWITCH_CHECK_S seconds."""

    def __init__(self, env: gym.Env, sleep_s: float, switch: Path):
        super().__init__(env)
        self.sleep_s = sleep_s
        self.switch = switch
        self.on = False
        self.checked = 0.0

    def step(self, action):
        now = time.monotonic()
        if now - self.checked >= SWITCH_CHECK_S:
            self.on, self.checked = self.switch.exists(), now
        if self.on:
            time.sleep(self.sleep_s)
        return self.env.step(action)


def make_sleepy_env(full_env_name: str, cfg, env_config=None, render_mode=None) -> gym.Env:
    kind, micros = NAME.fullmatch(full_env_name).groups()
    env = gym.make("CartPole-v1", render_mode=render_mode)
    if kind == "switch":
        return SwitchedSleep(env, int(micros) / 1e6, Path(cfg.train_dir) / cfg.experiment / SWITCH_FILE)
    return SleepyStep(env, int(micros) / 1e6)


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
            f"--env: {cfg.env!r} is not sleepy_cartpole_<microseconds>us or switch_cartpole_<microseconds>us; for "
            "example --env=sleepy_cartpole_2000us",
            file=sys.stderr,
        )
        return 2
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
