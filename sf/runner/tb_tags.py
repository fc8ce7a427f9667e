"""The runner's TensorBoard tags: Sample Factory 2.1.1's names (`reward/reward`, `len/len`, `train/loss`, ...) beside
sf's own, so a dashboard, a comparison script or a published Sample Factory curve lines up with an sf run unchanged.
docs/outputs.md lists both."""

from __future__ import annotations

from collections.abc import Sequence

import psutil

from sf.runner.stats import Progress

# sf's learner statistic -> the name Sample Factory's learner writes the same value under (both are written)
TRAIN_ALIASES = {
    "total_loss": "loss",
    "clip_fraction": "fraction_clipped",
    "policy_lag": "version_diff_avg",
    "policy_lag_max": "version_diff_max",
}
# statistics Sample Factory writes with their episode minimum and maximum, and the tag of each
MIN_MAX_TAGS = {"reward": "reward/reward", "len": "len/len", "true_objective": "policy_stats/avg_true_objective"}
MB = 1024 * 1024


def episode_scalars(progress: Progress, policy_id: int) -> dict[str, float]:
    """Each episode statistic of the policy over its last episodes: `reward/reward`, `len/len` and
    `policy_stats/avg_true_objective` with `_min` and `_max`, sf's `reward/avg_episode_reward` and
    `len/avg_episode_length`, and the envs' extra stats (a key with a "/" is its own tag, any other is
    `policy_stats/avg_<key>`). Empty before the policy's first episode."""
    stats = progress.policy_avg_stats
    if not stats["reward"][policy_id]:
        return {}
    scalars: dict[str, float] = {}
    for key, tag in MIN_MAX_TAGS.items():
        scalars.update(_mean_min_max(tag, stats[key][policy_id]))
    scalars["reward/avg_episode_reward"] = round(scalars["reward/reward"], 3)
    scalars["len/avg_episode_length"] = scalars["len/len"]
    for key, mean in progress.extra_means(policy_id).items():
        scalars[key if "/" in key else f"policy_stats/avg_{key}"] = mean
    return scalars


def train_scalars(means: dict[str, float]) -> dict[str, float]:
    """The learner's statistics as `train/<key>`, plus Sample Factory's name of each that has another one there."""
    scalars = {f"train/{key}": value for key, value in means.items()}
    scalars.update({f"train/{TRAIN_ALIASES[key]}": value for key, value in means.items() if key in TRAIN_ALIASES})
    return scalars


def runner_scalars(fps_10s: float) -> dict[str, float]:
    """What Sample Factory writes for policy 0 alone: `perf/_fps` (the 10-second rate, sf's `perf/fps`) and the
    main process's resident memory, `stats/master_process_memory_mb`."""
    return {"perf/_fps": fps_10s, "stats/master_process_memory_mb": psutil.Process().memory_info().rss / MB}


def _mean_min_max(tag: str, values: Sequence[float]) -> dict[str, float]:
    return {tag: sum(values) / len(values), f"{tag}_min": min(values), f"{tag}_max": max(values)}
