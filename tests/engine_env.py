"""A training entry point whose envs each run an engine process, as VizDoom's do, and whose step waits forever (with
the GIL released) once that engine is gone: a call into a dead engine that never returns."""

import subprocess
import sys
import threading

import gymnasium as gym

from sf.cfg.arguments import main_cfg_or_exit
from sf.envs import register_env
from sf.train import run_rl


class EngineCartPole(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.engine = subprocess.Popen(["sleep", "3600"])

    def step(self, action):
        if self.engine.poll() is not None:
            threading.Event().wait()
        return self.env.step(action)

    def close(self):
        self.engine.kill()
        self.engine.wait()
        super().close()


def make_engine_env(full_env_name, cfg, env_config=None, render_mode=None):
    return EngineCartPole(gym.make("CartPole-v1"))


if __name__ == "__main__":
    register_env("engine_cartpole", make_engine_env)
    sys.exit(run_rl(main_cfg_or_exit(sys.argv[1:])))
