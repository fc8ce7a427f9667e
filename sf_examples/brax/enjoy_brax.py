"""Evaluate a Brax run: `python -m sf_examples.brax.enjoy_brax --env=ant --experiment=...` (`--save_video` records
the first copy through Brax's renderer)."""

from __future__ import annotations

import sys

from sf.enjoy import enjoy
from sf.envs.families import family_named


def main(argv: list[str] | None = None) -> int:
    status, _avg_reward = enjoy(family_named("brax").cfg_or_exit(argv, evaluation=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
