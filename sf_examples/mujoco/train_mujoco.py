"""Train on a gymnasium MuJoCo v5 task: `python -m sf_examples.mujoco.train_mujoco --env=mujoco_ant`."""

from __future__ import annotations

import sys

from sf.cfg.arguments import main_cfg_or_exit
from sf.train import run_rl
from sf_examples.mujoco.mujoco_envs import mujoco_defaults, register_mujoco_envs


def main(argv: list[str] | None = None) -> int:
    register_mujoco_envs()
    cfg = main_cfg_or_exit(argv, defaults=mujoco_defaults)
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
