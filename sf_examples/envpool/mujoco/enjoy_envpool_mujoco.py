"""Evaluate a MuJoCo experiment trained through EnvPool:
`python -m sf_examples.envpool.mujoco.enjoy_envpool_mujoco --env=mujoco_ant --experiment=... --save_video`.

Evaluation plays gymnasium's version of the task (`sf_examples.mujoco.enjoy_mujoco`): the same model and
observations, one env, rendered for the video.
"""

from __future__ import annotations

import sys

from sf_examples.mujoco.enjoy_mujoco import main

if __name__ == "__main__":
    sys.exit(main())
