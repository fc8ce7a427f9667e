"""How old the experience is when the learner trains on it: trajectory age in seconds (env step to learner) and
policy lag in versions, both as histograms that add up over batches and across processes.

Rollout workers stamp each trajectory slot with the monotonic time of its first and last env step
(`traj_time` in the buffers; CLOCK_MONOTONIC is one clock for every process of the machine); the learner turns a
batch's stamps into per-step ages, interpolating between the two, and sends sparse bin counts to the runner.
Ages fall into log-spaced bins (20 per decade, 0.1 ms to 10,000 s), so percentiles are exact to about 6 %.
"""

from __future__ import annotations

import math

import torch

BINS_PER_DECADE = 20
MIN_EXPONENT = -4  # 0.1 ms
NUM_AGE_BINS = 8 * BINS_PER_DECADE  # up to 10^4 s


def step_ages(traj_time: torch.Tensor, rollout: int, now: float) -> torch.Tensor:
    """Seconds from each env step of the batch's trajectories to `now`: `[n, 2]` first/last stamps -> `[n * T]`."""
    first, last = now - traj_time[:, 0:1], now - traj_time[:, 1:2]
    fraction = torch.linspace(0.0, 1.0, rollout, dtype=traj_time.dtype)
    return (first + (last - first) * fraction).reshape(-1)


def age_counts(ages: torch.Tensor) -> dict[int, int]:
    """Sparse counts per log bin (bin b covers 10^(MIN_EXPONENT + b / BINS_PER_DECADE) seconds and up)."""
    bins = ((ages.clamp_min(1e-12).log10() - MIN_EXPONENT) * BINS_PER_DECADE).floor().clamp(0, NUM_AGE_BINS - 1)
    values, counts = torch.unique(bins.long(), return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


def lag_counts(lags: torch.Tensor) -> dict[int, int]:
    """Sparse counts per policy lag (versions between the policy that acted and the one being trained)."""
    values, counts = torch.unique(lags.long().reshape(-1).clamp_min(0), return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


def add_counts(total: dict[int, int], more: dict[int, int]) -> None:
    for key, count in more.items():
        total[key] = total.get(key, 0) + count


def age_edge(bin_index: int) -> float:
    return 10.0 ** (MIN_EXPONENT + bin_index / BINS_PER_DECADE)


def age_quantile(counts: dict[int, int], q: float) -> float | None:
    """The q-quantile of the ages in `counts`, interpolated geometrically inside its bin; None when empty."""
    total = sum(counts.values())
    if total == 0:
        return None
    target, seen = q * total, 0
    for index in sorted(counts):
        count = counts[index]
        if seen + count >= target:
            low, high = age_edge(index), age_edge(index + 1)
            return low * math.exp(math.log(high / low) * (target - seen) / count)
        seen += count
    return age_edge(max(counts) + 1)


def lag_histogram(counts: dict[int, int]) -> dict[str, list]:
    """`{"edges": [0, 1, ..., max + 1], "counts": [...]}`: bin i holds the steps with lag edges[i]."""
    top = max(counts) + 1 if counts else 1
    return {"edges": list(range(top + 1)), "counts": [counts.get(lag, 0) for lag in range(top)]}
