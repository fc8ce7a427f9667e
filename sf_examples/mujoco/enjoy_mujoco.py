"""Evaluate a MuJoCo experiment: `python -m sf_examples.mujoco.enjoy_mujoco --env=mujoco_ant --experiment=...`."""
from __future__ import annotations

import sys

from sf.cfg.arguments import main_cfg_or_exit
from sf.enjoy import enjoy
from sf_examples.mujoco.mujoco_envs import mujoco_defaults, register_mujoco_envs


def main(argv: list[str] | None = None) -> int:
    register_mujoco_envs()
    cfg = main_cfg_or_exit(argv, defaults=mujoco_defaults, evaluation=True)
    return enjoy(cfg)


if __name__ == "__main__":
    sys.exit(main())
