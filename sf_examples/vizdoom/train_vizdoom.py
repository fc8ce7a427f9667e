"""Train on a bundled VizDoom scenario: `python -m sf_examples.vizdoom.train_vizdoom --env=doom_basic`."""

from __future__ import annotations

import sys

from sf.cfg.arguments import main_cfg_or_exit
from sf.train import run_rl
from sf_examples.vizdoom.doom_envs import add_doom_args, doom_defaults, register_doom_envs


def main(argv: list[str] | None = None) -> int:
    register_doom_envs()
    cfg = main_cfg_or_exit(argv, add_args=add_doom_args, defaults=doom_defaults)
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
