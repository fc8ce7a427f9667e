"""Train a tensor env, batched: `python -m sf_examples.tensor_envs.train_tensor_env --env=tensor_cartpole`."""

from __future__ import annotations

import sys

from sf.envs.families import family_named
from sf.train import run_rl


def main(argv: list[str] | None = None) -> int:
    return run_rl(family_named("tensor_envs").cfg_or_exit(argv))


if __name__ == "__main__":
    sys.exit(main())
