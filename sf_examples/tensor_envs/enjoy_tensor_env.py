"""Evaluate a tensor env run: `python -m sf_examples.tensor_envs.enjoy_tensor_env --env=tensor_cartpole
--experiment=...`; every copy of one env object plays."""

from __future__ import annotations

import sys

from sf.enjoy import enjoy
from sf.envs.families import family_named


def main(argv: list[str] | None = None) -> int:
    status, _avg_reward = enjoy(family_named("tensor_envs").cfg_or_exit(argv, evaluation=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
