"""Evaluate a VizDoom experiment:
`python -m sf_examples.vizdoom.enjoy_vizdoom --env=doom_basic --experiment=... --save_video`.

Loads the experiment's newest checkpoint, plays `--max_num_episodes` episodes (5 when not given), logs each
return and their average, and with `--save_video` writes `<train_dir>/<experiment>/replay.mp4`.
"""

from __future__ import annotations

import sys

from sf.enjoy import enjoy, merged_cfg
from sf.envs.families import family_named
from sf_examples.vizdoom.doom_env import TICRATE


def main(argv: list[str] | None = None) -> int:
    cfg = family_named("vizdoom").cfg_or_exit(argv, evaluation=True)
    if cfg.save_video and "fps" not in cfg.cli_args:
        # one video frame per agent step: at the trained frameskip, this plays back at game speed
        cfg.fps = max(1, round(TICRATE / merged_cfg(cfg).env_frameskip))
    status, _avg_reward = enjoy(cfg)
    return status


if __name__ == "__main__":
    sys.exit(main())
