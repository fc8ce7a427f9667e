"""Train on Brax: `python -m sf_examples.brax.train_brax --env=ant` (needs `pip install 'sf[brax]'`)."""

from __future__ import annotations

import sys

from sf.envs.families import family_named
from sf.train import run_rl


def main(argv: list[str] | None = None) -> int:
    return run_rl(family_named("brax").cfg_or_exit(argv))


if __name__ == "__main__":
    sys.exit(main())
