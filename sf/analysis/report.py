"""`sf.profile report`: per component work / wait / overhead, hotspots, who waits on whom, and the verdict.

The text, `--json` and `profiling/report.html` all render the same `Report`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from sf.analysis.advice import Move, advise
from sf.analysis.bottleneck import Verdict
from sf.analysis.charts import ShareBar
from sf.analysis.consistency import check, clip_share
from sf.analysis.json_safe import finite_json
from sf.analysis.population import PolicyLine, policy_lines
from sf.analysis.run_data import UNATTRIBUTED, ComponentActivity, Experiment
from sf.profiling.activity import WAIT_PREFIX
from sf.utils.roles import Role

TOP_HOTSPOTS = 5
WAITED_ON = {
    "wait_actions": "inference workers",
    "wait_policy_version": "the learner (next policy version)",
    "wait_slots": "the batcher and learner (free trajectory slots)",
    "wait_requests": "rollout workers",
    "wait_batch": "the batcher (experience from rollout workers)",
    "wait_trajectories": "rollout workers",
    "wait_messages": "the other components (the runner only watches)",
    "wait_transfer": "cross-node transfers (chunks the driver has not acknowledged yet)",
    UNATTRIBUTED: "not attributed (this profile names no waits)",
}
# the role a wait is for, where it is one role: it may live in the waiting component's own process
WAITED_ROLE = {
    "wait_actions": Role.INFERENCE_WORKER,
    "wait_requests": Role.ROLLOUT_WORKER,
    "wait_trajectories": Role.ROLLOUT_WORKER,
}


@dataclass
class ComponentRow:
    name: str
    role: str
    lifetime_s: float
    work: float  # shares of the lifetime
    wait: float
    overhead: float
    waits: dict[str, float]  # wait key -> share
    hotspots: list[tuple[str, float]]  # (path, share of lifetime)
    pid: int = 0
    cpu: float | None = None  # cores its process used over the window (never more than the machine has)


@dataclass
class FpsFigure:
    """One frame rate and the window it covers: a run has several, and each is named wherever it is shown."""

    fps: float
    window: str


@dataclass
class WaitLine:
    role: str
    count: int
    idle: float
    waiting_for: str
    key: str


@dataclass
class Report:
    experiment: str
    window: str
    fps: float
    components: list[ComponentRow]
    waits: list[WaitLine]
    verdict: Verdict
    headline: str = ""  # `simulation-bound 92 %`, as the progress line and `sf.profile top` say it
    fps_figures: list[FpsFigure] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    serial: bool = False  # every component in one process (--serial_mode)
    policies: list[PolicyLine] = field(default_factory=list)  # with several policies: each one's learner and objective

    def to_json(self) -> dict:
        return finite_json(asdict(self))


def hotspots(tree: dict, lifetime: float, top: int = TOP_HOTSPOTS) -> list[tuple[str, float]]:
    """The `top` busiest scopes (any depth, waits left out) as (path, share of the lifetime)."""
    items: list[tuple[str, float]] = []

    def walk(node: dict, prefix: str) -> None:
        for key, child in node.items():
            if not prefix and key.startswith(WAIT_PREFIX):
                continue
            items.append((prefix + key, child["time"]))
            walk(child.get("children", {}), f"{prefix}{key}/")

    walk(tree, "")
    items.sort(key=lambda kv: -kv[1])
    return [(path, seconds / lifetime if lifetime > 0 else 0.0) for path, seconds in items[:top]]


def component_row(c: ComponentActivity) -> ComponentRow:
    """Shares as shown: clipped to 0-100 % (`consistency.check` says when the data claimed more)."""
    a = c.activity
    cpu = None
    if c.cpu_s is not None and (c.wall_s or a.lifetime_s) > 0:
        cpu = min(c.cpu_s / (c.wall_s or a.lifetime_s), float(c.cores or math.inf))
    return ComponentRow(
        c.name,
        str(c.role),
        a.lifetime_s,
        clip_share(a.share(a.work_s)),
        clip_share(a.share(a.wait_s)),
        clip_share(a.share(a.overhead_s)),
        {k: clip_share(a.share(v)) for k, v in a.waits.items()},
        [(path, clip_share(share)) for path, share in hotspots(c.tree, a.lifetime_s)],
        c.pid,
        cpu,
    )


SERIAL_WAITS = "one process: the components take turns, so each one waits while the others work"


def wait_lines(components: list[ComponentActivity], serial: bool = False) -> list[WaitLine]:
    """Per role, its main wait and whom that wait is for, averaged over the role's components. In a serial run
    every wait is the others' turn in the one process, which the heading says once (`SERIAL_WAITS`)."""
    lines = []
    roles: dict[str, list[ComponentActivity]] = {}
    for c in components:
        roles.setdefault(c.role, []).append(c)
    for role, members in roles.items():
        totals: dict[str, float] = {}
        for c in members:
            for key, seconds in c.activity.waits.items():
                totals[key] = totals.get(key, 0.0) + c.activity.share(seconds) / len(members)
        if not totals:
            continue
        key = max(totals, key=totals.get)
        idle = sum(c.activity.share(c.activity.wait_s) for c in members) / len(members)
        waiting_for = WAITED_ON.get(key, key[len(WAIT_PREFIX) :])
        waited = WAITED_ROLE.get(key)
        hosts = {c.pid for c in components if waited is not None and c.role == waited}
        if not serial and hosts and all(c.pid in hosts for c in members):  # inference inside each rollout worker
            waiting_for += ", in its own process"
        lines.append(WaitLine(str(role), len(members), idle, waiting_for, key))
    return lines


def fps_figures(experiment: Experiment, steady: bool) -> list[FpsFigure]:
    """The report's FPS first, then the run's other two, each with its window."""
    summary = experiment.summary
    if steady and experiment.span:
        first, last = experiment.span
        own = f"this report: {first:.1f} s to {last:.1f} s of the run, between periodic snapshots"
    else:
        own = "this report: the whole run (no steady window in the series)"
    figures = [FpsFigure(experiment.fps, own)]
    if summary.get("fps_steady"):
        figures.append(
            FpsFigure(summary["fps_steady"], "from the first trained batch to the end (summary.json fps_steady)")
        )
    if summary.get("fps"):
        figures.append(
            FpsFigure(summary["fps"], "the whole session, start-up included (summary.json fps; the Collected line)")
        )
    return figures


def build_report(experiment: Experiment) -> Report:
    steady = all(c.steady for c in experiment.components if c.role != Role.RUNNER)
    window = "steady state (start-up and shutdown left out)" if steady else "whole lifetime"
    if steady and experiment.span:
        window = (
            f"steady state, {experiment.span[0]:.1f} s to {experiment.span[1]:.1f} s (start-up and shutdown left out)"
        )
    components = sorted(experiment.components, key=lambda c: (c.role == Role.RUNNER, str(c.role), c.name))
    advice = advise(experiment)
    serial = bool(experiment.config.get("serial_mode"))
    return Report(
        str(experiment.path),
        window,
        experiment.fps,
        [component_row(c) for c in components],
        wait_lines(experiment.components, serial),
        advice.verdict,
        advice.headline(),
        fps_figures(experiment, steady),
        advice.moves,
        [f.line() for f in check(experiment)],
        serial,
        policy_lines(experiment.summary),
    )


def format_text(report: Report) -> str:
    lines = [f"sf profile report: {report.experiment}", f"window: {report.window}; {report.fps:,.0f} frames/s"]
    if len(report.fps_figures) > 1:
        lines.append("FPS by window (a run has several; each is named where it is shown):")
        lines += [f"  {f.fps:>10,.0f}  {f.window}" for f in report.fps_figures]
    if report.warnings:
        lines.append("warnings:")
        lines += [f"  ! {w}" for w in report.warnings]
    lines.append("")
    lines.append(
        f"{'component':<24} {'lifetime':>9} {'work':>6} {'wait':>6} {'loop':>6}  top hotspots (share of lifetime)"
    )
    for row in report.components:
        spots = ", ".join(f"{path} {share:.0%}" for path, share in row.hotspots[:3])
        lines.append(
            f"{row.name:<24} {row.lifetime_s:>8.1f}s {row.work:>6.0%} {row.wait:>6.0%} {row.overhead:>6.0%}  {spots}"
        )
    if report.policies:
        work = {row.name: row.work for row in report.components}
        lines.append("")
        lines.append(f"policies, best first by {report.policies[0].objective}:")
        for line in report.policies:
            share = work.get(line.learner)
            busy = f" (work {share:.0%})" if share is not None else ""
            lines.append(f"  {line.text().replace(line.learner, line.learner + busy, 1)}")
    lines.append("")
    lines.append(f"who waits on whom ({SERIAL_WAITS}):" if report.serial else "who waits on whom:")
    for w in report.waits:
        who = f"{w.role} (x{w.count})" if w.count > 1 else w.role
        lines.append(f"  {who} idle {w.idle:.0%}, waiting for {w.waiting_for} ({w.key})")
    v = report.verdict
    lines += ["", f"verdict: {v.kind}-bound", f"  in a few words: {report.headline}"]
    lines.append(f"  rate limited by: {v.explanation or v.limiting}")
    lines += [f"  {e}" for e in v.evidence]
    lines.append("  what if:")
    for w in v.what_if:
        lines.append(
            f"    if {w.kind} were {w.speedup:g}x faster: about {w.fps_gain:+.0%} FPS (then limited by {w.limit})"
        )
    if report.moves:
        lines.append("  advice (layout moves the model can price; estimates, not promises):")
        lines += [f"    {m.line()}" for m in report.moves]
    return "\n".join(lines)


def hotspot_items(report: Report, per_component: int = 3, top: int = 15) -> list[ShareBar]:
    """The busiest hotspots over all components, each as a share of its own component's lifetime."""
    items = [
        ShareBar(f"{r.name}: {path}", share)
        for r in report.components
        for path, share in r.hotspots[:per_component]
        if share > 0
    ]
    return sorted(items, key=lambda item: -item.share)[:top]
