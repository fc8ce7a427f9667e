"""Train on an Atari game through EnvPool with Sample Factory's EnvPool defaults:
`python -m sf_examples.envpool.atari.train_envpool_atari --env=atari_breakout --experiment=breakout_envpool`.

The same as `python -m sf_examples.atari.train_atari --envpool=True` with those defaults (docs/envpool.md).
"""

from __future__ import annotations

import sys

from sf.cfg.arguments import main_cfg_or_exit
from sf.train import run_rl
from sf_examples.atari.atari_envs import register_atari_envs
from sf_examples.envpool.atari.envpool_atari import envpool_atari_defaults, register_envpool_atari_envs


def main(argv: list[str] | None = None) -> int:
    register_atari_envs()
    register_envpool_atari_envs()
    cfg = main_cfg_or_exit(argv, defaults=envpool_atari_defaults)
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
