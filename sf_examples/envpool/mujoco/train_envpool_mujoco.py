"""Train on a MuJoCo task through EnvPool with Sample Factory's EnvPool defaults:
`python -m sf_examples.envpool.mujoco.train_envpool_mujoco --env=mujoco_ant --experiment=ant_envpool`.

The same as `python -m sf_examples.mujoco.train_mujoco --envpool=True` with those defaults (docs/envpool.md).
"""

from __future__ import annotations

import sys

from sf.cfg.arguments import main_cfg_or_exit
from sf.train import run_rl
from sf_examples.envpool.mujoco.envpool_mujoco import envpool_mujoco_defaults, register_envpool_mujoco_envs
from sf_examples.mujoco.mujoco_envs import register_mujoco_envs


def main(argv: list[str] | None = None) -> int:
    register_mujoco_envs()
    register_envpool_mujoco_envs()
    cfg = main_cfg_or_exit(argv, defaults=envpool_mujoco_defaults)
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
