"""What the env benchmark shows: the table on stdout, `benchmark.json` and the bar chart `benchmark.png`."""

from __future__ import annotations

import json
from pathlib import Path

from sf.bench.env_mode import CEILINGS, PHASE_TITLES, EnvBenchmark
from sf.model.precision import NAMES

HEADER = ("phase", "FPS", "whole run", "of ceiling", "verdict")


def _cells(bench: EnvBenchmark) -> list[tuple[str, ...]]:
    rows = []
    for phase in bench.phases:
        failed = phase.status != "ok"
        rows.append(
            (
                PHASE_TITLES[phase.name],
                f"failed ({phase.status})" if failed else f"{phase.fps:,.0f}",
                "-" if phase.fps_whole_run is None else f"{phase.fps_whole_run:,.0f}",
                "-" if phase.share_of_ceiling is None or failed else f"{100 * phase.share_of_ceiling:.0f} %",
                "-" if phase.name in CEILINGS else (f"{phase.verdict}-bound" if phase.verdict else "n/a"),
            )
        )
    return rows


def _inference(layout: dict) -> str:
    if layout.get("inference_placement") == "rollout_worker":
        return "inference in the rollout workers"
    return f"{layout['policy_workers_per_policy']} inference workers"


def format_table(bench: EnvBenchmark) -> str:
    """Fixed-width table, one row per phase; FPS is the steady rate, "whole run" includes start-up."""
    rows = [HEADER, *_cells(bench)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 or i == 4 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]
    layout = bench.layout
    title = (
        f"{bench.env}: {layout['num_workers']} workers x {layout['num_envs_per_worker']} envs, "
        f"{layout['worker_num_splits']} splits, {_inference(layout)}, "
        f"device {bench.device}, {bench.cpus} CPUs (load {bench.load_avg_start:.1f} at start)"
    )
    notes = [
        f"ceiling: the layout's envs stepped by {bench.ceiling_processes} processes (every core), nothing else",
        *_learner_notes(bench),
        f"precision: {describe_precision(bench.precision)}",
    ]
    return "\n".join([title, lines[0], "-" * len(lines[0]), *lines[1:], *notes])


def _learner_notes(bench: EnvBenchmark) -> list[str]:
    """What a learner on a core of its own would allow: the bound a learner-bound training row stands under."""
    ceiling = next((p.fps for p in bench.phases if p.name == "ceiling"), 0.0)
    notes = []
    for phase in bench.phases:
        if phase.learner_alone_fps is None or phase.status != "ok":
            continue
        share = f" ({100 * phase.learner_alone_fps / ceiling:.0f} % of the ceiling)" if ceiling > 0 else ""
        notes.append(
            f"learner: {phase.learner_cores:.2f} of a core in the steady window; on a core of its own, doing the same "
            f"work per frame, at most {phase.learner_alone_fps:,.0f} FPS{share}"
        )
    return notes


def describe_precision(precision: dict | None) -> str:
    """One line for a `PrecisionChoice` read back from JSON: "float32 (auto; no AMX; ...)"."""
    if not precision:
        return "unknown (the runs wrote no config)"
    return f"{NAMES.get(precision['used'], precision['used'])} ({precision['reason']})"


def write_json(bench: EnvBenchmark, path: Path) -> Path:
    path.write_text(json.dumps(bench.to_json(), indent=2))
    return path


def write_chart(bench: EnvBenchmark, path: Path) -> Path | None:
    """Bars of steady FPS per phase, each labelled with its share of the ceiling; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    titles = [PHASE_TITLES[p.name] for p in bench.phases]
    fps = [p.fps for p in bench.phases]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    colors = {"ceiling": "#888888", "gymnasium_ceiling": "#bbbbbb", "sampling": "#4c72b0", "training": "#dd8452"}
    bars = ax.bar([t.strip() for t in titles], fps, color=[colors[p.name] for p in bench.phases])
    for bar, phase in zip(bars, bench.phases):
        share = "" if phase.share_of_ceiling is None else f"{100 * phase.share_of_ceiling:.0f} %"
        verdict = f"\n{phase.verdict}-bound" if phase.verdict else ""
        ax.annotate(
            share + verdict, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8
        )
    ax.set_ylabel("env frames / s")
    ax.set_title(
        f"{bench.env}, {bench.layout['num_workers']} x {bench.layout['num_envs_per_worker']} envs, {bench.device}",
        fontsize=10,
    )
    ax.margins(y=0.2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
