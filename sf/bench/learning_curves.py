"""Learning curves over seeds: each run's metric sampled on a common grid of env frames, then the mean and spread
per side, written as CSV, a PNG (one panel per env) and a Markdown table of scores at a few frame counts.

A run's value at x frames is the last value it logged up to x (each logged value is already a mean over the last 100
episodes); runs stop at the end of a batch, a little past their frame budget, so "up to x" reaches 3 % beyond x. A
run that has logged nothing by then, or stopped well before x, has no value there.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

SLACK = 0.03  # a value logged up to 3 % past x frames counts at x


@dataclass(frozen=True)
class Curve:
    """One run's metric: (frames, value) pairs in logging order."""

    points: tuple[tuple[int, float], ...]

    def value_at(self, frames: int) -> float | None:
        seen = [value for step, value in self.points if step <= frames * (1 + SLACK)]
        if not seen or self.points[-1][0] < frames * (1 - SLACK):
            return None
        return seen[-1]


@dataclass(frozen=True)
class Spread:
    """The seeds' values at one frame count."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation over seeds (0 with one seed)."""
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    @property
    def low(self) -> float:
        return min(self.values) if self.values else math.nan

    @property
    def high(self) -> float:
        return max(self.values) if self.values else math.nan

    def cell(self) -> str:
        if not self.values:
            return "-"
        return f"{self.mean:.2f} ± {self.std:.2f}" if self.n > 1 else f"{self.mean:.2f}"


def spread_at(curves: list[Curve], frames: int) -> Spread:
    values = [v for v in (c.value_at(frames) for c in curves) if v is not None]
    return Spread(tuple(values))


def frame_grid(total: int, points: int = 60) -> list[int]:
    """`points` evenly spaced frame counts, the last one `total`."""
    step = max(1, total // points)
    return [*range(step, total - step // 2, step), total]


def checkpoints(total: int) -> list[int]:
    """The table's columns: a third, two thirds and all of the frames (the early lead and the end)."""
    return [round(total / 3), round(2 * total / 3), total]


# Curves by env, then by side label, one per seed
Results = dict[str, dict[str, list[Curve]]]


def write_csv(results: Results, total: int, path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env", "side", "frames", "seeds", "mean", "std", "min", "max"])
        for env, sides in results.items():
            for side, curves in sides.items():
                for x in frame_grid(total):
                    s = spread_at(curves, x)
                    if s.n:
                        writer.writerow([env, side, x, s.n, *(f"{v:.4f}" for v in (s.mean, s.std, s.low, s.high))])


def markdown_table(results: Results, total: int, metric: str) -> str:
    """Scores at a third, two thirds and all of the frames: mean ± standard deviation over seeds, then each seed's
    final value."""
    sides = list(dict.fromkeys(side for per_env in results.values() for side in per_env))
    lines = [
        f"Metric: {metric}; mean ± standard deviation over seeds.",
        "",
        "| env | frames | " + " | ".join(sides) + " |",
        "| --- | --- | " + " | ".join("---" for _ in sides) + " |",
    ]
    for env, per_env in results.items():
        for x in checkpoints(total):
            cells = [spread_at(per_env.get(side, []), x).cell() for side in sides]
            lines.append(f"| {env} | {x:,} | " + " | ".join(cells) + " |")
    lines += ["", "Final value of each seed:", "", "| env | side | seeds |", "| --- | --- | --- |"]
    for env, per_env in results.items():
        for side, curves in per_env.items():
            values = [c.value_at(total) for c in curves]
            shown = ", ".join("-" if v is None else f"{v:.2f}" for v in values)
            lines.append(f"| {env} | {side} | {shown} |")
    return "\n".join(lines) + "\n"


def plot(results: Results, total: int, metric: str, path: Path) -> None:
    """One panel per env: each side's mean over seeds, its min-max band shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(results)
    cols = min(3, len(envs))
    rows = math.ceil(len(envs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sides = list(dict.fromkeys(side for per_env in results.values() for side in per_env))
    grid = frame_grid(total)
    for ax, env in zip(axes.flat, envs):
        for i, side in enumerate(sides):
            spreads = [(x, spread_at(results[env].get(side, []), x)) for x in grid]
            spreads = [(x, s) for x, s in spreads if s.n]
            if not spreads:
                continue
            xs = [x / 1e3 for x, _ in spreads]
            n = max(s.n for _, s in spreads)
            color = colors[i % len(colors)]
            ax.plot(xs, [s.mean for _, s in spreads], color=color, label=f"{side} ({n} seed{'s' if n > 1 else ''})")
            ax.fill_between(xs, [s.low for _, s in spreads], [s.high for _, s in spreads], color=color, alpha=0.2)
        ax.set_title(env, fontsize=9)
        ax.set_xlabel("env frames (thousands)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(envs) :]:
        ax.axis("off")
    axes[0][0].set_ylabel(metric, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
