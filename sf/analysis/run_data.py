"""An experiment folder as the report reads it: work, wait and loop overhead of each component over a window.

The split follows `sf.profiling.activity` (top-level `wait_<what>` keys are waits, `loop_overhead` is the event loop's
own cost, every other top-level key is work; the runner's top level is inside `main_loop`). Where
`profile_series.jsonl` holds at least two snapshots taken after the first trained batch, the numbers cover only that
steady-state window (start-up and shutdown left out); otherwise they cover the component's whole life, with the
lifetime taken from the `activity` or `resources` entry, or the run's wall time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sf.experiment.config_file import read_config_or_empty
from sf.profiling.activity import LOOP_OVERHEAD, WAIT_PREFIX, Activity, activity_level, activity_of
from sf.profiling.series import Snapshot, read_series
from sf.utils.roles import Role, role_of

UNATTRIBUTED = "wait_unattributed"
INIT_KEYS = frozenset({"init", "init_envs"})  # set-up a component times before its loop serves anyone
WORKING_ROLES = (Role.ROLLOUT_WORKER, Role.INFERENCE_WORKER, Role.LEARNER)  # a run needs each of these to work


@dataclass
class ComponentActivity:
    """One component of a run over the span the report covers: who it is, and its `Activity` over that span."""

    name: str
    pid: int
    role: Role | None  # None for a name no sf component carries
    activity: Activity
    tree: dict  # the Timing tree over the same span ({key: {time, children}})
    cpu_s: float | None = None  # CPU seconds of the whole process over the span, where sampled
    run_delay_s: float | None = None  # seconds the process was runnable but waited for a core
    cores: int | None = None
    steady: bool = False  # True: a steady-state window; False: the whole lifetime
    wall_s: float | None = None  # wall seconds the span covers (the runner's clock), which CPU seconds divide


@dataclass
class Experiment:
    path: Path
    components: list[ComponentActivity]
    summary: dict
    config: dict
    series: dict[str, list[Snapshot]] = field(default_factory=dict)
    frames: int = 0  # frames in the window the activity covers
    fps: float = 0.0  # frames per second over that window (or the run's steady FPS)
    span: tuple[float, float] | None = None  # the window on the runner's clock (seconds since start), if steady
    machine_cores: float | None = None  # cores the whole machine kept busy over the window, every program's


def machine_cores(a: Snapshot, b: Snapshot) -> float | None:
    """Cores the whole machine kept busy between two snapshots (this run's processes and every other program)."""
    if a.machine_busy_s is None or b.machine_busy_s is None or b.t <= a.t:
        return None
    return max(0.0, b.machine_busy_s - a.machine_busy_s) / (b.t - a.t)


def did_not_run(c: ComponentActivity) -> bool:
    """A rollout worker, inference worker or learner whose tree holds no work but its set-up (a worker that never
    stepped an env, as a profiler's start-up can leave one): it took no part in the frames counted."""
    if c.role not in WORKING_ROLES:
        return False
    return not any(
        node["time"] > 0
        for key, node in c.tree.items()
        if key not in INIT_KEYS and not key.startswith(WAIT_PREFIX) and key != LOOP_OVERHEAD
    )


def subtract_trees(later: dict, earlier: dict) -> dict:
    """The tree of what was timed between two snapshots of the same component."""
    out = {}
    for key, node in later.items():
        before = earlier.get(key, {"time": 0.0, "children": {}})
        out[key] = {
            "time": max(0.0, node["time"] - before["time"]),
            "children": subtract_trees(node.get("children", {}), before.get("children", {})),
        }
    return out


def _activity(name: str, pid: int, tree: dict, lifetime: float, steady: bool, **clock) -> ComponentActivity:
    role = role_of(name)
    if role == Role.RUNNER and "main_loop" in tree:
        tree = activity_level(tree, "main_loop")  # main_loop spans the whole run
    activity = activity_of(tree, lifetime)
    if not activity.waits:
        activity.waits = {UNATTRIBUTED: max(0.0, lifetime - activity.work_s - activity.overhead_s)}
        activity.wait_s = activity.waits[UNATTRIBUTED]
    return ComponentActivity(name, pid, role, activity, tree, steady=steady, **clock)


MIN_STEADY_SHARE = 0.25  # a steady window shorter than this share of the run says more about its edges


def steady_window(snapshots: list[Snapshot]) -> tuple[Snapshot, Snapshot] | None:
    """First and last periodic snapshots after frames started counting; the final one if no other is left. None
    (use the whole life) when that pair spans under a quarter of the run: a short run's one periodic snapshot and
    its final one can lie a few milliseconds apart, and shares of such a window are noise."""
    counted = [s for s in snapshots if s.frames > 0]
    periodic = [s for s in counted if not s.final]
    if len(periodic) >= 2:
        first, last = periodic[0], periodic[-1]
    elif len(counted) >= 2:
        first, last = counted[0], counted[-1]
    else:
        return None
    if last.t - first.t < MIN_STEADY_SHARE * snapshots[-1].t:
        return None
    return first, last


def load_experiment(path: str | Path) -> Experiment:
    path = Path(path)
    profile = json.loads((path / "profile.json").read_text())
    summary = _read_json(path / "summary.json")
    config = read_config_or_empty(path)
    series = read_series(path)
    windows = {name: steady_window(snaps) for name, snaps in series.items()}
    cores = next((snaps[-1].cores for snaps in series.values() if snaps), None)  # of the machine the run ran on
    use_windows = bool(windows) and all(windows.get(n) for n in profile if role_of(n) != Role.RUNNER)
    components = []
    frame_rates = []
    edges = []
    for name, entry in profile.items():
        window = windows.get(name) if use_windows else None
        if window is not None:
            a, b = window
            components.append(window_activity(name, entry["pid"], a, b))
            edges += [a.t, b.t]
            if b.t > a.t:
                frame_rates.append(((b.frames - a.frames), b.t - a.t))
        else:
            components.append(_whole_life(name, entry, summary, cores))
    if frame_rates:
        frames = max(f for f, _ in frame_rates)
        fps = sum(f for f, _ in frame_rates) / sum(t for _, t in frame_rates)
    else:
        frames = sum(int(v) for v in summary.get("env_frames", {}).values())
        fps = summary.get("fps_steady") or summary.get("fps") or 0.0
    span = (min(edges), max(edges)) if edges else None
    longest = max((snaps for name, snaps in series.items() if role_of(name) != Role.RUNNER), key=len, default=[])
    pair = next((windows[n] for n in series if use_windows and windows.get(n)), None)
    pair = pair or ((longest[0], longest[-1]) if len(longest) >= 2 else None)
    machine = machine_cores(*pair) if pair else None
    return Experiment(path, components, summary, config, series, frames, fps, span, machine)


def window_activity(name: str, pid: int, a: Snapshot, b: Snapshot) -> ComponentActivity:
    """What a component did between two of its snapshots. The shares divide by its loop's own clock over the span;
    the CPU seconds by the wall clock (a loop that started late or stalled has lived less than the span, its
    process has not)."""
    clock = {}
    if a.cpu_s is not None and b.cpu_s is not None:
        delay = b.run_delay_s - a.run_delay_s if a.run_delay_s is not None and b.run_delay_s is not None else None
        clock = {"cpu_s": b.cpu_s - a.cpu_s, "run_delay_s": delay, "cores": b.cores}
    span = b.lifetime_s - a.lifetime_s if a.lifetime_s is not None and b.lifetime_s is not None else b.t - a.t
    return _activity(name, pid, subtract_trees(b.tree, a.tree), span, True, wall_s=b.t - a.t, **clock)


def _whole_life(name: str, entry: dict, summary: dict, cores: int | None = None) -> ComponentActivity:
    activity, resources = entry.get("activity") or {}, entry.get("resources") or {}
    lifetime = activity.get("lifetime_s") or resources.get("wall_s") or summary.get("wall_time_s") or 0.0
    cpu = None
    if resources.get("cpu_user_s") is not None:
        cpu = resources["cpu_user_s"] + resources.get("cpu_system_s", 0.0)
    wall = resources.get("wall_s") or lifetime
    return _activity(name, entry["pid"], entry["tree"], lifetime, False, cpu_s=cpu, wall_s=wall, cores=cores)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}
