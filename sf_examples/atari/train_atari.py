"""Train on an Atari game: `python -m sf_examples.atari.train_atari --env=atari_breakout --experiment=breakout`."""

from __future__ import annotations

import sys

from sf.cfg.arguments import main_cfg_or_exit
from sf.train import run_rl
from sf_examples.atari.atari_envs import atari_defaults, register_atari_envs


def main(argv: list[str] | None = None) -> int:
    register_atari_envs()
    cfg = main_cfg_or_exit(argv, defaults=atari_defaults)
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
