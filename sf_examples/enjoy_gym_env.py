"""Evaluate an experiment trained with `train_gym_env`:
`python -m sf_examples.enjoy_gym_env --env=CartPole-v1 --experiment=...`."""

from __future__ import annotations

import sys

from sf.enjoy import enjoy
from sf.envs.families import family_named


def main(argv: list[str] | None = None) -> int:
    status, _avg_reward = enjoy(family_named("gym").cfg_or_exit(argv, evaluation=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
