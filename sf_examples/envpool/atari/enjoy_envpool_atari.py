"""Evaluate an Atari experiment trained through EnvPool:
`python -m sf_examples.envpool.atari.enjoy_envpool_atari --env=atari_breakout --experiment=... --save_video`.

Evaluation plays the gymnasium version of the game (`sf_examples.atari.enjoy_atari`): the same game, wrappers and
observations, one env, with the console's frames to film.
"""

from __future__ import annotations

import sys

from sf_examples.atari.enjoy_atari import main

if __name__ == "__main__":
    sys.exit(main())
