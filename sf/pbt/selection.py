"""Who a policy becomes at its population-based training step: Sample Factory's replacement rule.

The policies are ranked by their objective, best first (ties: the higher policy id first). The first
`ceil(--pbt_replace_fraction * policies)` are the best, as many at the end the worst. A best policy is left alone.
A worst one draws one of the best at random and takes its weights, optimizer state and hyperparameters when the
objectives differ by more than `--pbt_replace_reward_gap_absolute` and by more than `--pbt_replace_reward_gap` of the
best one's (`|delta / (best + 1e-8)|`, Sample Factory's formula, which reads oddly for negative objectives); else it
keeps its own. Every policy that is not among the best then mutates the hyperparameters it ends up with, except
policy 0, which Sample Factory keeps unmutated as the reference (it can still be replaced).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

EPS = 1e-8


@dataclass(frozen=True)
class Gaps:
    relative: float  # --pbt_replace_reward_gap
    absolute: float  # --pbt_replace_reward_gap_absolute

    @classmethod
    def from_cfg(cls, cfg) -> Gaps:
        return cls(cfg.pbt_replace_reward_gap, cfg.pbt_replace_reward_gap_absolute)


@dataclass(frozen=True)
class Step:
    """What one policy's step does: take `source`'s weights (itself: keep its own), then mutate or not."""

    policy: int
    source: int
    mutate: bool
    best: tuple[int, ...]
    worst: tuple[int, ...]

    @property
    def replaced(self) -> bool:
        return self.source != self.policy


def ranked(objectives: list[float]) -> list[int]:
    """Policies best first; among equal objectives the higher id first (Sample Factory sorts (objective, id) pairs
    in reverse)."""
    return [p for _, p in sorted(zip(objectives, range(len(objectives))), reverse=True)]


def step(policy: int, objectives: list[float], fraction: float, gaps: Gaps, rng: random.Random) -> Step | None:
    """Policy `policy`'s step given every policy's objective; None for a best policy (left alone)."""
    order = ranked(objectives)
    count = math.ceil(fraction * len(objectives))
    best, worst = tuple(order[:count]), tuple(order[-count:])
    if policy in best:
        return None
    source = policy
    if policy in worst:
        candidate = rng.choice(best)
        delta = objectives[candidate] - objectives[policy]
        relative = abs(delta / (objectives[candidate] + EPS))
        if abs(delta) > gaps.absolute and relative > gaps.relative:
            source = candidate
    return Step(policy, source, mutate=policy != 0, best=best, worst=worst)
