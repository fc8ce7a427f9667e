"""Evaluate a MuJoCo experiment: `python -m sf_examples.mujoco.enjoy_mujoco --env=mujoco_ant --experiment=...`.

With `--save_video` an OpenGL backend is chosen first (see `gl_backend`); when none can render, one line
says how to get one and the evaluation runs without video.
"""

from __future__ import annotations

import sys

from sf.enjoy import enjoy
from sf.envs.families import family_named
from sf.utils.logging import setup_logging
from sf_examples.mujoco.gl_backend import setup_gl_backend


def main(argv: list[str] | None = None) -> int:
    cfg = family_named("mujoco").cfg_or_exit(argv, evaluation=True)
    if cfg.save_video:
        log = setup_logging(cfg.log_level)
        backend, advice = setup_gl_backend()
        if backend is None:
            log.warning("%s", advice)
            cfg.save_video = False
        else:
            log.info("rendering with MUJOCO_GL=%s", backend)
    status, _avg_reward = enjoy(cfg)
    return status


if __name__ == "__main__":
    sys.exit(main())
