"""`sf.profile report <dir> --compare <baseline>`: two runs key by key, with run-to-run noise from their series.

Every Timing key of every component is compared as seconds per env frame over the steady-state window, so runs of
different lengths compare directly; so are each process's CPU seconds per frame, the peak memory and the FPS.
The noise of a key comes from `profile_series.jsonl`: the steady part of each run is cut into five consecutive
blocks, the key's share of time (seconds per second) is taken in each block, and its relative standard deviation over
the blocks is the run's noise; the two runs' noises combine as sqrt(a^2 + b^2). Shares of time, not seconds per
frame, because the frame counter moves in whole learner batches. The spread of block means is deliberately not
divided by sqrt(5) (the standard error of the run's mean): on a shared machine load drifts over minutes, and two
runs of the same command differ by about as much as two fifths of one run do.

The blocks see the noise inside a run, not a machine that was busier during one run than during the other (load
on a shared machine drifts over minutes). That part is read from each process's scheduler clocks: over the steady
window it ran `cpu` seconds and was runnable but waiting for a core `delay` seconds, so its work took about
`s = 1 + delay / cpu` times as long as on a free core. A move of `s` from `a` to `b` between the runs explains a
change of `max(a / b, b / a) - 1` in any of that process's keys, and that joins their noise (for the FPS, `s` of
all the run's processes together). Two runs that met the same machine add nothing; a synthetic change (a copy of a
run with one scope scaled) adds nothing either.

Neither sees a whole process, or the whole machine, running its Python faster or slower between runs: on a shared
2-core virtual machine without scheduler statistics, eleven runs of one command moved all the CPU-bound keys of a
process together by up to 40-70 % from one run to the next while each run's blocks stayed within a few percent. So a
key's noise also holds its process's common move: the median change of that process's other work keys (the key
itself left out, so that one scope made slower still stands out against the others), when it went the key's way, and
scaled by the part of the key that can be CPU time (`_cpu_bound_part`). A key that moves with its process is
explained by it; a key that moves alone is not.

A key is marked when its change exceeds `Z` times that noise and `MIN_CHANGE`, and its share of its component's
lifetime moved by at least `MIN_MOVED_SHARE` between the runs (a key only one run has: holds that much): a key
that grew 100-fold from almost nothing (a serial run's `update_model` against a parallel run's) costs its component
too little to explain a change in the frame rate. Waits are listed but not marked: a wait per frame moves whenever
anything else does, so marking it would only repeat the cause.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass

from sf.analysis.run_data import Experiment
from sf.profiling.series import Snapshot
from sf.utils.roles import Role, role_of

Z = 2.0
MIN_CHANGE = 0.15  # two runs of one command on a shared 2-core machine differed by up to 12 % per key
MIN_SHARE = 0.02
# a key whose time moved by less than this share of its component's time changes that component's rate by less: a
# third of MIN_CHANGE
MIN_MOVED_SHARE = 0.05
BLOCKS = 5
MIN_BLOCKS = 3
DEFAULT_NOISE = 0.10  # when a run has too few intervals to measure its own
FIXED_NOISE = {"peak_rss_bytes": 0.10, "gpu_peak_mem_bytes": 0.10}
MIN_OTHER_KEYS = 3  # a process with fewer other work keys has no common move to speak of


@dataclass
class DiffRow:
    key: str
    unit: str
    a: float | None  # the baseline (--compare)
    b: float | None  # the run reported on
    change: float  # relative: (b - a) / a
    noise: float  # relative, one standard deviation of the difference
    marked: bool
    process_change: float | None = None  # the median change of its process's other work keys
    load: float = 0.0  # the part of the noise that the runs' different waits for a core explain


@dataclass
class Comparison:
    baseline: str
    run: str
    rows: list[DiffRow]

    @property
    def marked(self) -> list[DiffRow]:
        return [r for r in self.rows if r.marked]


def _flat(tree: dict, prefix: str = "") -> dict[str, float]:
    out = {}
    for key, node in tree.items():
        out[prefix + key] = node["time"]
        out.update(_flat(node.get("children", {}), f"{prefix}{key}/"))
    return out


def _blocks(snapshots: list[Snapshot]) -> list[tuple[Snapshot, Snapshot]]:
    """The steady part of a run cut into `BLOCKS` consecutive stretches of about equal length (fewer if short)."""
    counted = [s for s in snapshots if s.frames > 0 and not s.final]
    n = len(counted) - 1
    blocks = min(BLOCKS, n // 2)
    if blocks < MIN_BLOCKS:
        return []
    edges = [round(i * n / blocks) for i in range(blocks + 1)]
    return [(counted[a], counted[b]) for a, b in zip(edges, edges[1:])]


def _rel_spread(values: list[float]) -> float | None:
    """Relative standard deviation of a series; None when too short to tell."""
    if len(values) < MIN_BLOCKS:
        return None
    mean = sum(values) / len(values)
    if mean <= 0:
        return None
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(var) / mean


@dataclass
class _Measure:
    value: float
    spread: float | None
    share: float  # of the component's lifetime, for the relevance filter
    slowdown: float | None = None  # how much longer its process's work took for waiting on cores (1 = a free machine)
    process: str | None = None  # the component it belongs to, whose other keys give its common move


def core_wait_slowdown(cpu_s: float | None, run_delay_s: float | None) -> float | None:
    """1 + seconds runnable but waiting for a core per CPU second: how much longer the CPU work took than on a free
    core. None without scheduler clocks."""
    if cpu_s is None or run_delay_s is None or cpu_s <= 0:
        return None
    return 1.0 + max(0.0, run_delay_s) / cpu_s


def run_slowdown(experiment: Experiment) -> float | None:
    """`core_wait_slowdown` of all the run's processes together (its own processes included, so two runs of one
    command on a free machine read the same): how oversubscribed the machine was while the run ran."""
    clocks = {
        c.pid: (c.cpu_s, c.run_delay_s)
        for c in experiment.components
        if c.cpu_s is not None and c.run_delay_s is not None
    }
    return core_wait_slowdown(sum(cpu for cpu, _ in clocks.values()), sum(delay for _, delay in clocks.values()))


def load_change(a: float | None, b: float | None) -> float:
    """The relative change, either way, that a move of the slowdown from `a` to `b` alone explains."""
    return 0.0 if a is None or b is None else max(a / b, b / a) - 1.0


def _measures(experiment: Experiment) -> dict[tuple[str, str], _Measure]:
    """(key, unit) -> the run's value and its interval spread."""
    out: dict[tuple[str, str], _Measure] = {}
    for c in experiment.components:
        if c.role == Role.RUNNER:
            continue
        snaps = experiment.series.get(c.name, [])
        blocks = _blocks(snaps)
        window_frames = _window_frames(snaps) or experiment.frames
        if window_frames <= 0:
            continue
        flat = _flat(c.tree)
        lifetime = c.activity.lifetime_s or 1e-12
        slowdown = core_wait_slowdown(c.cpu_s, c.run_delay_s)
        flat_blocks = [(_flat(a.tree), _flat(b.tree), b.t - a.t) for a, b in blocks]
        for path, seconds in flat.items():
            rates = [(fb.get(path, 0.0) - fa.get(path, 0.0)) / dt for fa, fb, dt in flat_blocks]
            out[(f"{c.name}/{path}", "s/frame")] = _Measure(
                seconds / window_frames, _rel_spread(rates), seconds / lifetime, slowdown, c.name
            )
        if c.cpu_s is not None:
            cpu_rates = [
                (b.cpu_s - a.cpu_s) / (b.t - a.t) for a, b in blocks if a.cpu_s is not None and b.cpu_s is not None
            ]
            out[(f"{c.name}/cpu", "cpu s/frame")] = _Measure(
                c.cpu_s / window_frames, _rel_spread(cpu_rates), 1.0, slowdown, c.name
            )
    fps_series = _fps_series(experiment)
    out[("fps", "frames/s")] = _Measure(experiment.fps, _rel_spread(fps_series), 1.0, run_slowdown(experiment))
    profile = json.loads((experiment.path / "profile.json").read_text())
    for name, entry in profile.items():
        for field, value in (entry.get("resources") or {}).items():
            if field in FIXED_NOISE and value is not None:
                out[(f"{name}/{field}", "bytes")] = _Measure(float(value), FIXED_NOISE[field], 1.0)
    return out


def _window_frames(snaps: list[Snapshot]) -> int:
    counted = [s for s in snaps if s.frames > 0 and not s.final] or [s for s in snaps if s.frames > 0]
    return counted[-1].frames - counted[0].frames if len(counted) >= 2 else 0


def _fps_series(experiment: Experiment) -> list[float]:
    """FPS per block, from the component with the most snapshots (all share the runner's frame counter)."""
    snaps = max((s for n, s in experiment.series.items() if role_of(n) != Role.RUNNER), key=len, default=[])
    return [(b.frames - a.frames) / (b.t - a.t) for a, b in _blocks(snaps)]


def _is_wait(key: str) -> bool:
    """Waits per frame follow whatever changed elsewhere (a faster run waits less per frame): listed, never marked."""
    return "/wait_" in key


def _work_ratios(ma: dict, mb: dict) -> dict[str, dict[str, float]]:
    """Per process, the ratio (this run / baseline) of each work key timed in both runs."""
    ratios: dict[str, dict[str, float]] = {}
    for key, a in ma.items():
        b = mb.get(key)
        if key[1] == "s/frame" and b is not None and a.process and not _is_wait(key[0]) and a.value > 0 < b.value:
            ratios.setdefault(a.process, {})[key[0]] = b.value / a.value
    return ratios


def _process_move(ratios: dict[str, dict[str, float]], process: str | None, key: str) -> float | None:
    """The median ratio of the process's work keys other than `key`; None when too few to say."""
    others = [r for k, r in ratios.get(process, {}).items() if k != key]
    return statistics.median(others) if len(others) >= MIN_OTHER_KEYS else None


def _cpu_bound_part(ma: dict, mb: dict, process: str, a: float, b: float) -> float:
    """At most how much of a key is its process's CPU time: no more than the process's CPU seconds per frame. A key
    that takes longer per frame than that (a sleep, a wait inside a call) runs on no core for the rest, which a process
    running its code slower or faster does not move."""
    key = (f"{process}/cpu", "cpu s/frame")
    if key not in ma or key not in mb or min(a, b) <= 0:
        return 1.0
    return min(1.0, max(ma[key].value, mb[key].value) / min(a, b))


def compare(baseline: Experiment, run: Experiment) -> Comparison:
    ma, mb = _measures(baseline), _measures(run)
    ratios = _work_ratios(ma, mb)
    rows = []
    for key in sorted(set(ma) | set(mb)):
        a, b = ma.get(key), mb.get(key)
        if a is None or b is None:
            present = a or b
            rows.append(
                DiffRow(
                    key[0],
                    key[1],
                    a.value if a else None,
                    b.value if b else None,
                    float("inf") if a is None else -1.0,
                    0.0,
                    present.share >= MIN_MOVED_SHARE and not _is_wait(key[0]),  # a wait only one run has is a wait
                )
            )
            continue
        change = (b.value - a.value) / a.value if a.value > 0 else (0.0 if b.value == 0 else float("inf"))
        spreads = [s if s is not None else DEFAULT_NOISE for s in (a.spread, b.spread)]
        load = load_change(a.slowdown, b.slowdown)
        move = _process_move(ratios, a.process, key[0])
        # a process that moved one way explains its keys moving that way, not the other, and only their CPU part
        common = 0.0
        if move is not None and (move - 1.0) * change > 0:
            common = load_change(move, 1.0) * _cpu_bound_part(ma, mb, a.process, a.value, b.value)
        noise = math.sqrt(spreads[0] ** 2 + spreads[1] ** 2 + load**2 + common**2)
        relevant = (
            max(a.share, b.share) >= MIN_SHARE and abs(b.share - a.share) >= MIN_MOVED_SHARE and not _is_wait(key[0])
        )
        marked = relevant and abs(change) > max(Z * noise, MIN_CHANGE)
        process_change = None if move is None else move - 1.0
        rows.append(DiffRow(key[0], key[1], a.value, b.value, change, noise, marked, process_change, load))
    return Comparison(str(baseline.path), str(run.path), rows)


def value_text(value: float | None, unit: str) -> str:
    """A value with its unit: `23,877 frames/s`, `7.95 µs/frame`, `1.2 ms/frame`, `245.8 MiB`."""
    if value is None:
        return "-"
    if unit == "frames/s":
        return f"{value:,.0f} frames/s"
    if unit == "bytes":
        return f"{value / 2**20:,.1f} MiB"
    if unit.endswith("s/frame"):
        if value >= 1e-3:
            return f"{value * 1e3:.3g} ms/frame"
        return f"{value * 1e6:.3g} µs/frame"
    return f"{value:.4g} {unit}"


def _change_text(row: DiffRow) -> str:
    return f"{row.change:+.0%}" if math.isfinite(row.change) else "new"


def fps_line(comparison: Comparison) -> str:
    """The headline: the frame rate against the baseline's, and whether the change is beyond run-to-run noise."""
    fps = next((r for r in comparison.rows if r.key == "fps"), None)
    if fps is None or fps.a is None or fps.b is None:
        return "FPS: not in both runs"
    judged = "beyond" if fps.marked else "within"
    why = ""
    if fps.load > 0.5 * fps.noise:
        why = ", most of it from how long each run's processes waited for a core"
    rule = f"a change counts beyond it above {Z:g}x the noise and {MIN_CHANGE:.0%}"
    return (
        f"FPS: {value_text(fps.b, fps.unit)} against {value_text(fps.a, fps.unit)}, {_change_text(fps)}: "
        f"{judged} run-to-run noise (noise {fps.noise:.0%}{why}; {rule})"
    )


def _moved(row: DiffRow) -> float:
    """How much a row moved in its own unit per frame (time keys: seconds per frame), for the order of the table."""
    return abs((row.b or 0.0) - (row.a or 0.0))


def ordered(rows: list[DiffRow]) -> list[DiffRow]:
    """The FPS first; then marked keys before the rest; within each, the time keys by the seconds per frame they
    moved (what a change costs the frame rate), then memory."""
    return sorted(
        rows,
        key=lambda r: (r.key != "fps", not r.marked, r.unit == "bytes", -_moved(r) if r.unit != "bytes" else 0.0),
    )


def format_text(comparison: Comparison, top: int = 30) -> str:
    marked = comparison.marked
    lines = [
        f"sf profile diff: {comparison.run}",
        f"baseline:        {comparison.baseline}",
        fps_line(comparison),
        f"{len(marked)} of {len(comparison.rows)} keys changed beyond run-to-run noise (marked *: above {Z:g}x "
        f"their noise and {MIN_CHANGE:.0%}, and moving at least {MIN_MOVED_SHARE:.0%} of their component's time); the "
        "FPS first, then the keys that moved the most time per frame",
        "",
        f"  {'key':<56} {'baseline':>16} {'this run':>16} {'change':>8} {'process':>8} {'noise':>7}",
    ]
    for r in ordered(comparison.rows)[:top]:
        process = "" if r.process_change is None else f"{r.process_change:+.0%}"
        lines.append(
            f"{'*' if r.marked else ' '} {r.key:<56} {value_text(r.a, r.unit):>16} {value_text(r.b, r.unit):>16} "
            f"{_change_text(r):>8} {process:>8} {r.noise:>6.0%}"
        )
    return "\n".join(lines)
