"""Evaluate an experiment trained with `train_gym_env`:
`python -m sf_examples.enjoy_gym_env --env=CartPole-v1 --experiment=...`."""

from __future__ import annotations

import sys

from sf.cfg.arguments import main_cfg_or_exit
from sf.enjoy import enjoy
from sf.envs.gym_family import register_gym_env
from sf_examples.train_gym_env import gym_defaults


def main(argv: list[str] | None = None) -> int:
    cfg = main_cfg_or_exit(argv, defaults=gym_defaults, evaluation=True)
    register_gym_env(cfg.env)
    return enjoy(cfg)


if __name__ == "__main__":
    sys.exit(main())
