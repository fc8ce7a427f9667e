"""PNG charts of plain rows (matplotlib, headless): the report and the diff build the rows, these only draw them.

matplotlib (extra `profiling`) is imported on the first chart, so reading and reporting a run works without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

# the colours of report.html and compare.html, so that a chart and the page it sits beside read alike
COLORS = {"work": "#2e7d32", "wait": "#e0a800", "loop overhead": "#8e44ad"}
MARKED = "#cf222e"
UNMARKED = "#8c959f"


class ActivityBar(NamedTuple):
    """One component: shares of its lifetime."""

    name: str
    work: float
    wait: float
    overhead: float


class ShareBar(NamedTuple):
    label: str
    share: float


class ChangeBar(NamedTuple):
    """One key of a diff: relative change, its noise (one standard deviation) and whether it is beyond the noise."""

    key: str
    change: float
    noise: float
    marked: bool


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def activity_bars(rows: Sequence[ActivityBar], title: str, path: Path) -> Path:
    """One horizontal bar per component, stacked work / wait / loop overhead as shares of its lifetime."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
    names = [r.name for r in rows]
    left = [0.0] * len(rows)
    for label, values in (
        ("work", [r.work for r in rows]),
        ("wait", [r.wait for r in rows]),
        ("loop overhead", [r.overhead for r in rows]),
    ):
        ax.barh(names, [100 * v for v in values], left=left, color=COLORS[label], label=label)
        left = [a + 100 * b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel("% of lifetime")
    ax.set_xlim(0, max(100.0, max(left, default=0)))
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title)
    return _save(plt, fig, path)


def share_bars(items: Sequence[ShareBar], xlabel: str, path: Path) -> Path:
    """Horizontal bars of shares, in the order given (the first on top)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(items) + 1.2))
    ax.barh([i.label for i in items], [100 * i.share for i in items], color=COLORS["work"])
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel(xlabel)
    return _save(plt, fig, path)


def change_bars(rows: Sequence[ChangeBar], path: Path, top: int = 25) -> Path:
    """Relative change of the largest keys; marked changes (beyond noise) in red, with the noise band as error bars."""
    plt = _pyplot()
    # a key only one run has changed by "new" (infinitely): no bar can draw it, the table lists it
    rows = [r for r in rows if math.isfinite(r.change) and math.isfinite(r.noise)]
    rows = sorted(rows, key=lambda r: (not r.marked, -abs(r.change)))[:top]
    rows.reverse()
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(rows) + 1.2))
    ax.barh(
        [r.key for r in rows],
        [100 * r.change for r in rows],
        xerr=[100 * r.noise for r in rows],
        color=[MARKED if r.marked else UNMARKED for r in rows],
        error_kw={"elinewidth": 0.8, "capsize": 2},
    )
    ax.axvline(0, color="black", linewidth=0.8)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("change, % (red: beyond run-to-run noise; bars: noise)")
    return _save(plt, fig, path)
