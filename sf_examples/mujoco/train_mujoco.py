"""Train on a gymnasium MuJoCo v5 task: `python -m sf_examples.mujoco.train_mujoco --env=mujoco_ant`."""

from __future__ import annotations

import sys

from sf.envs.families import family_named
from sf.train import run_rl


def main(argv: list[str] | None = None) -> int:
    return run_rl(family_named("mujoco").cfg_or_exit(argv))


if __name__ == "__main__":
    sys.exit(main())
