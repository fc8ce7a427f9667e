"""A training entry point whose rollout worker 0, after a few hundred steps, takes every queue lock its process can
reach, says so on its output (`locks taken: N`) and waits there to be killed: the worst moment for a component to
die (the policy store has no lock: `sf.runtime.policy_store`). It does so once a run: the experiment folder keeps a
mark, so the worker started in its place trains on."""

import gc
import sys
import threading
from pathlib import Path

import faster_fifo
import gymnasium as gym
from queue_layout import lock_queue

from sf.cfg.arguments import main_cfg_or_exit
from sf.envs import register_env
from sf.train import run_rl


def take_every_lock() -> int:
    """Lock every faster-fifo queue of this process; the number of locks taken."""
    return sum(lock_queue(obj) for obj in gc.get_objects() if isinstance(obj, faster_fifo.Queue))


class LockHoldingCartPole(gym.Wrapper):
    def __init__(self, env, hold_after: int, mark: Path):
        super().__init__(env)
        self.steps = 0
        self.hold_after = hold_after
        self.mark = mark

    def step(self, action):
        self.steps += 1
        if self.steps == self.hold_after and not self.mark.exists():
            self.mark.touch()
            taken = take_every_lock()
            print(f"locks taken: {taken}", flush=True)
            threading.Event().wait()  # until killed
        return self.env.step(action)


def make_env(full_env_name, cfg, env_config=None, render_mode=None):
    # only the first env of rollout worker 0 holds the locks; the probe env (env_id -1) and the others never do
    holds = env_config is not None and env_config.worker_index == 0 and env_config.env_id == 0
    mark = Path(cfg.train_dir, cfg.experiment, "locks_were_taken")
    return LockHoldingCartPole(gym.make("CartPole-v1"), 300 if holds else -1, mark)


if __name__ == "__main__":
    register_env("lock_holding_cartpole", make_env)
    sys.exit(run_rl(main_cfg_or_exit(sys.argv[1:])))
