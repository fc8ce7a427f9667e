"""Evaluate an Atari experiment:
`python -m sf_examples.atari.enjoy_atari --env=atari_breakout --experiment=... --save_video`.

Plays `--max_num_episodes` whole games (5 when not given) with the newest checkpoint and logs each game's score;
with `--save_video` writes the console's own frames (210x160 RGB, one per agent step) to
`<train_dir>/<experiment>/replay.mp4`, played back at game speed.
"""

from __future__ import annotations

import sys

from sf.enjoy import enjoy, merged_cfg
from sf.envs.families import family_named
from sf_examples.atari.atari_envs import ATARI_FPS


def main(argv: list[str] | None = None) -> int:
    cfg = family_named("atari").cfg_or_exit(argv, evaluation=True)
    if cfg.save_video and "fps" not in cfg.cli_args:
        cfg.fps = max(1, round(ATARI_FPS / merged_cfg(cfg).env_frameskip))
    status, _avg_reward = enjoy(cfg)
    return status


if __name__ == "__main__":
    sys.exit(main())
