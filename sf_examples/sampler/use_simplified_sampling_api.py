"""Collect trajectories without a learner, as Sample Factory's `sf_examples/sampler/use_simplified_sampling_api.py`:

    python -m sf_examples.sampler.use_simplified_sampling_api --env=CartPole-v1 --sample_env_steps=100000
    python -m sf_examples.sampler.use_simplified_sampling_api --env=CartPole-v1 --experiment=cartpole \\
        --use_checkpoint=True --sample_env_steps=20000

Any env an sf example trains works (its family registers it). With `--use_checkpoint=True` the weights are those of
the experiment's `--load_checkpoint_kind` checkpoint, and the average episode reward at the end evaluates it.
"""

from __future__ import annotations

import sys
import time
from collections import deque

import torch

from sf.cfg.arguments import resolve_device, str2bool
from sf.enjoy import load_policy, merged_cfg
from sf.envs.families import family_of_argv
from sf.runner.sampling_api import SyncSamplingAPI, obtain_env_info_in_a_separate_process, samples_per_trajectory
from sf.utils.logging import log, setup_logging
from sf.utils.typing import Config, InitModelData, PolicyID, StatusCode

PRINT_INTERVAL_S = 1.0


def add_sampler_args(parser) -> None:
    parser.add_argument("--sample_env_steps", type=int, default=1_000_000, help="env steps to collect, then stop")
    parser.add_argument(
        "--use_checkpoint",
        type=str2bool,
        default=False,
        help="sample with the experiment's --load_checkpoint_kind checkpoint instead of freshly initialized weights",
    )


def checkpoint_weights(cfg: Config, env_info) -> dict[PolicyID, InitModelData]:
    """Policy 0's weights from the experiment's checkpoint, in Sample Factory's InitModelData form."""
    model = load_policy(cfg, env_info, resolve_device(cfg))
    return {0: (0, model.state_dict(), torch.device(resolve_device(cfg)), 0)}


def generate_trajectories(cfg: Config, env_info, sample_env_steps: int) -> StatusCode:
    sampler = SyncSamplingAPI(cfg, env_info)
    sampler.start(checkpoint_weights(cfg, env_info) if cfg.use_checkpoint else None)
    fps_stats = deque([(time.time(), 0)], maxlen=10)
    sampled, last_print = 0, time.time()
    while sampled < sample_env_steps:
        try:
            trajectory = sampler.get_trajectories_sync()
            if trajectory is None:
                break
            sampled += samples_per_trajectory(trajectory)
            if time.time() - last_print > PRINT_INTERVAL_S:
                fps_stats.append((time.time(), sampled))
                (t0, s0), (t1, s1) = fps_stats[0], fps_stats[-1]
                log.info("Samples collected: %d, throughput: %.1f FPS", sampled, (s1 - s0) / (t1 - t0))
                last_print = time.time()
        except KeyboardInterrupt:
            log.info("KeyboardInterrupt in generate_trajectories()")
            break
    status = sampler.stop()
    log.info(
        "%d env steps; avg episode reward %.3f over %d episodes",
        sampled,
        sampler.avg_episode_reward(),
        len(sampler.episodes()),
    )
    return status


def main(argv: list[str] | None = None) -> StatusCode:
    argv = sys.argv[1:] if argv is None else list(argv)
    cfg = family_of_argv(argv).cfg_or_exit(argv, evaluation=True, add_args=add_sampler_args)
    if cfg.use_checkpoint:
        cfg = merged_cfg(cfg)  # the model as the experiment trained it, this command line's flags on top
    setup_logging(cfg.log_level)
    env_info = obtain_env_info_in_a_separate_process(cfg)
    return generate_trajectories(cfg, env_info, cfg.sample_env_steps)


if __name__ == "__main__":
    sys.exit(main())
