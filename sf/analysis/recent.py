"""The last few seconds of a run as an `Experiment`: what the progress line, `sf.profile top` and the live verdict
read, built from the same snapshots as the report's steady window (`run_data.window_activity`), so all of them
apply one bottleneck model to one kind of data.
"""

from __future__ import annotations

from pathlib import Path

from sf.analysis.run_data import WORKING_ROLES, Experiment, machine_cores, window_activity
from sf.profiling.series import Snapshot
from sf.utils.roles import Role, role_of

LIVE_WINDOW_S = 4.0  # two snapshots at the live cadence: a changed bottleneck shows within a few seconds


def window_pair(snaps: list[Snapshot], seconds: float, until: float | None = None) -> tuple[Snapshot, Snapshot] | None:
    """The newest snapshot (at or before `until`) and the newest one at least `seconds` older; the oldest one when
    the run is younger than that. None with fewer than two."""
    usable = [s for s in snaps if until is None or s.t <= until + 1e-9]
    if len(usable) < 2:
        return None
    last = usable[-1]
    first = next((s for s in reversed(usable[:-1]) if last.t - s.t >= seconds - 1e-6), usable[0])
    return first, last


def recent_experiment(
    series: dict[str, list[Snapshot]],
    seconds: float = LIVE_WINDOW_S,
    until: float | None = None,
    path: Path | str = ".",
    summary: dict | None = None,
    config: dict | None = None,
) -> Experiment | None:
    """Every component over its last `seconds` (up to `until` on the runner's clock, for a replay). A component with
    fewer than two periodic snapshots uses its final one as the second (a short run, a worker that started late);
    one with fewer than two in all is left out (`waiting_for` names it). None until every working role present
    (rollout workers, inference workers, learners) has a component with a window. FPS comes from the frame counter
    over the longest span."""
    components, rates, machine = [], [], None
    for name, snaps in series.items():
        if role_of(name) == Role.RUNNER:
            continue
        pair = window_pair([s for s in snaps if not s.final], seconds, until) or window_pair(snaps, seconds, until)
        if pair is None:
            continue
        a, b = pair
        components.append(window_activity(name, b.pid, a, b))
        rates.append((b.frames - a.frames, b.t - a.t))
        machine = machine if machine is not None else machine_cores(a, b)
    present = {c.role for c in components}
    if not components or any(role_of(name) in WORKING_ROLES and role_of(name) not in present for name in series):
        return None
    frames, span = max(rates, key=lambda r: r[1])
    fps = frames / span if span > 0 else 0.0
    return Experiment(Path(path), components, summary or {}, config or {}, series, frames, fps, machine_cores=machine)


def waiting_for(series: dict[str, list[Snapshot]], experiment: Experiment | None) -> list[str]:
    """The components of the series that the experiment leaves out, for want of two snapshots."""
    shown = {c.name for c in experiment.components} if experiment else set()
    return [name for name in series if name not in shown and role_of(name) != Role.RUNNER]


def fps_over(series: dict[str, list[Snapshot]], seconds: float, until: float | None = None) -> float | None:
    """Frames per second over the last `seconds` of the frame counter the snapshots carry (None without two)."""
    snaps = max((s for n, s in series.items() if role_of(n) != Role.RUNNER), key=len, default=[])
    pair = window_pair(snaps, seconds, until)
    if pair is None or pair[1].t <= pair[0].t:
        return None
    a, b = pair
    return (b.frames - a.frames) / (b.t - a.t)
