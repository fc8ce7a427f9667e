"""Train on an Atari game: `python -m sf_examples.atari.train_atari --env=atari_breakout --experiment=breakout`."""

from __future__ import annotations

import sys

from sf.envs.families import family_named
from sf.train import run_rl


def main(argv: list[str] | None = None) -> int:
    return run_rl(family_named("atari").cfg_or_exit(argv))


if __name__ == "__main__":
    sys.exit(main())
