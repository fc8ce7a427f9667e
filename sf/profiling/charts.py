"""PNG charts for the report and the diff (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if TYPE_CHECKING:
    from sf.profiling.compare import Comparison
    from sf.profiling.report import Report

COLORS = {"work": "#4c72b0", "wait": "#dd8452", "loop overhead": "#8c8c8c"}


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def activity_bars(report: Report, path: Path) -> Path:
    """One horizontal bar per component, stacked work / wait / loop overhead as shares of its lifetime."""
    rows = report.components
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
    ax.set_title(f"verdict: {report.verdict.kind}-bound")
    return _save(fig, path)


def hotspot_bars(report: Report, path: Path) -> Path:
    """The top hotspots of every component, as shares of that component's lifetime."""
    items = [(f"{r.name}: {p}", share) for r in report.components for p, share in r.hotspots[:3] if share > 0]
    items.sort(key=lambda kv: -kv[1])
    items = items[:15]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(items) + 1.2))
    ax.barh([k for k, _ in items], [100 * v for _, v in items], color=COLORS["work"])
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("% of the component's lifetime")
    return _save(fig, path)


def diff_bars(comparison: Comparison, path: Path, top: int = 25) -> Path:
    """Relative change of the largest keys; marked changes (beyond noise) in red, with the noise band as error bars."""
    rows = sorted(comparison.rows, key=lambda r: (not r.marked, -abs(r.change)))[:top]
    rows.reverse()
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(rows) + 1.2))
    labels = [r.key for r in rows]
    values = [100 * r.change for r in rows]
    noise = [100 * r.noise for r in rows]
    ax.barh(
        labels,
        values,
        xerr=noise,
        color=["#c44e52" if r.marked else "#8c8c8c" for r in rows],
        error_kw={"elinewidth": 0.8, "capsize": 2},
    )
    ax.axvline(0, color="black", linewidth=0.8)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("change, % (red: beyond run-to-run noise; bars: noise)")
    return _save(fig, path)
