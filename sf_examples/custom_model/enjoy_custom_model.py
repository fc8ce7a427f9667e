"""Evaluate a run of `train_custom_model`: `python -m sf_examples.custom_model.enjoy_custom_model --env=collect
--experiment=...`. The same registration builds the same network, whose weights the checkpoint holds."""

from __future__ import annotations

import sys

from sf.enjoy import enjoy
from sf.envs.families import family_named


def main(argv: list[str] | None = None) -> int:
    status, _avg_reward = enjoy(family_named("custom_model").cfg_or_exit(argv, evaluation=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
