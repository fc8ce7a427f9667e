"""Runs a short CartPole training in this process, as a user's script calling `run_rl` would, and prints one JSON
line: the exit status and whether the config object still holds exactly the values it was given."""

import copy
import json
import sys

from sf.cfg.arguments import parse_full_cfg
from sf.envs.gym_family import register_gym_env
from sf.train import run_rl
from sf_examples.train_gym_env import gym_defaults

if __name__ == "__main__":
    register_gym_env("CartPole-v1")
    cfg = parse_full_cfg(sys.argv[1:], defaults=gym_defaults)
    given = copy.deepcopy(vars(cfg))
    status = run_rl(cfg)
    changed = sorted(key for key in {*given, *vars(cfg)} if given.get(key) != vars(cfg).get(key))
    print(json.dumps({"status": status, "changed": changed}))
