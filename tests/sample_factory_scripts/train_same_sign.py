"""A training script written for Sample Factory 2.1.1's public API: a two-agent env (`num_agents`, `is_multiagent`,
lists of observations, rewards and infos, resetting itself), its episodes' `true_objective` and
`episode_extra_stats`, and an `AlgoObserver` registered on the runner `make_runner` returns.

It runs under Sample Factory as it is, and under sf with its `sample_factory` imports changed by the table of
docs/customizing.md and nothing else (tests/test_sample_factory_scripts.py). At its end the observer writes what it
saw to `<train_dir>/<experiment>/observed.json`.
"""

import json
import os
import sys

import gymnasium as gym
import numpy as np
from sample_factory.algo.runners.runner import AlgoObserver, Runner
from sample_factory.algo.utils.misc import ExperimentStatus
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.envs.env_utils import register_env
from sample_factory.train import make_runner

STEPS = 10


class SameSign(gym.Env):
    """Two agents see one number each step; each is paid for naming its sign, both for both being right."""

    def __init__(self):
        self.num_agents, self.is_multiagent = 2, True
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.x, self.t, self.right = 0.0, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t, self.right = self.np_random.uniform(-1, 1), 0, 0
        return [np.array([self.x], np.float32)] * 2, [{}, {}]

    def step(self, actions):
        correct = [int(a) == int(self.x > 0) for a in actions]
        self.t, self.right = self.t + 1, self.right + all(correct)
        rewards = [0.5 * c + 0.5 * all(correct) for c in correct]
        if self.t < STEPS:
            self.x = self.np_random.uniform(-1, 1)
            return [np.array([self.x], np.float32)] * 2, rewards, [False] * 2, [False] * 2, [{}, {}]
        end = {"true_objective": self.right, "episode_extra_stats": {"both_right": self.right / STEPS}}
        obs, _ = self.reset()
        return obs, rewards, [True] * 2, [False] * 2, [end, end]


def make_same_sign(full_env_name, cfg=None, env_config=None, render_mode=None):
    return SameSign()


class Observed(AlgoObserver):
    """Counts the hooks' calls; the summaries' writer gets one scalar of its own."""

    def __init__(self):
        self.calls = {"on_init": 0, "on_start": 0, "on_training_step": 0, "extra_summaries": 0, "on_stop": 0}

    def on_init(self, runner: Runner) -> None:
        self.calls["on_init"] += 1

    def on_start(self, runner: Runner) -> None:
        self.calls["on_start"] += 1

    def on_training_step(self, runner: Runner, training_iteration_since_resume: int) -> None:
        self.calls["on_training_step"] += 1

    def extra_summaries(self, runner: Runner, policy_id, writer, env_steps: int) -> None:
        self.calls["extra_summaries"] += 1
        writer.add_scalar("observed/training_steps", self.calls["on_training_step"], env_steps)

    def on_stop(self, runner: Runner) -> None:
        self.calls["on_stop"] += 1
        folder = os.path.join(runner.cfg.train_dir, runner.cfg.experiment)
        with open(os.path.join(folder, "observed.json"), "w") as f:
            json.dump(self.calls, f)


def main():
    register_env("same_sign", make_same_sign)
    parser, _ = parse_sf_args()
    parser.set_defaults(use_rnn=False, rollout=10, batch_size=200, num_envs_per_worker=4)
    cfg = parse_full_cfg(parser)
    cfg, runner = make_runner(cfg)
    runner.register_observer(Observed())
    status = runner.init()
    if status == ExperimentStatus.SUCCESS:
        status = runner.run()
    return status


if __name__ == "__main__":
    sys.exit(main())
