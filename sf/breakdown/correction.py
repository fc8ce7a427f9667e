"""Subtracting the instrumentation's own cost from an attribution, and folding small rows into their parents."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sf.breakdown.attribution import LAYERS, RowTimes
from sf.breakdown.calibration import EventCosts
from sf.utils.roles import Role, role_of

ROLLOUT_WORKERS_ROW = f"{Role.ROLLOUT_WORKER.value}_w*"  # every rollout worker's row as one


@dataclass(frozen=True)
class Overhead:
    python_s: float
    backend_s: float

    @property
    def total_s(self) -> float:
        return self.python_s + self.backend_s


def row_overhead(times: RowTimes, costs: EventCosts) -> Overhead:
    """Where a row's instrumentation events spent their time: range and outer-op bookkeeping runs as Python between
    recorded intervals (dearer in the training than in a tight loop by `python_scale`); an op's inside share and
    every nested op's whole cost lie inside a recorded op."""
    python = costs.python_scale * (
        times.scopes * costs.scope_s + times.sims * costs.sim_s + times.ops * max(0.0, costs.op_s - costs.op_inside_s)
    )
    backend = times.ops * costs.op_inside_s + times.nested_ops * costs.op_s
    return Overhead(python, backend)


def corrected(times: RowTimes, costs: EventCosts) -> tuple[RowTimes, float]:
    """The row without its instrumentation, and how much of the estimate exceeded what the column held (0 when the
    estimate fits; a large value means the calibration overestimates for this workload)."""
    overhead = row_overhead(times, costs)
    python = times.python - overhead.python_s
    backend = times.backend - overhead.backend_s
    excess = max(0.0, -python) + max(0.0, -backend)
    return replace(times, python=max(0.0, python), backend=max(0.0, backend)), excess


OTHER = "(other)"


def _add(into: RowTimes, times: RowTimes) -> None:
    for name in (*LAYERS, "kernel_busy_s", "scopes", "sims", "ops", "nested_ops"):
        setattr(into, name, getattr(into, name) + getattr(times, name))


def fold_small_rows(rows: dict[str, RowTimes], min_s: float, keep: tuple[str, ...] = ()) -> dict[str, RowTimes]:
    """Rows under `min_s` join their parent scope ("Learner 0/train/clip" into "Learner 0/train"), deepest first;
    a component's small top-level rows join one `<component>/(other)` row. Rows named in `keep` stay."""
    rows = {name: replace(times) for name, times in rows.items()}
    for depth in range(max((n.count("/") for n in rows), default=0), 0, -1):
        for name in [n for n in rows if n.count("/") == depth and rows[n].total < min_s and n not in keep]:
            parent = name.rsplit("/", 1)[0] if depth > 1 else f"{name.split('/', 1)[0]}/{OTHER}"
            if parent != name:
                _add(rows.setdefault(parent, RowTimes()), rows.pop(name))
    return rows


def merge_rollout_workers(name: str) -> str:
    """`RolloutWorker_w3/env_step` -> `RolloutWorker_w*/env_step`: the workers run the same code on equal shares."""
    component, sep, path = name.partition("/")
    if role_of(component) == Role.ROLLOUT_WORKER:
        component = ROLLOUT_WORKERS_ROW
    return component + sep + path
