"""What one instrumentation event costs, measured on this machine at start, so the breakdown can subtract it.

Each cost is a difference of two loops' CPU time (the thread's own, so time a busy machine keeps the thread waiting
does not count), with and without the instrumentation, each repeated and reduced to its fastest run:

- `scope_s`: a Timing scope observed by the range hook under the profiler, minus a plain Timing scope;
- `sim_s`: a call through the simulator-range wrapper, minus the plain call;
- `op_s`: a small torch operator under the profiler, minus the same operator without it;
- `op_inside_s`: the part of `op_s` that falls between an op's own recorded start and end, measured as the
  recorded length of an operator that does nothing (`resolve_conj` of a real tensor). An op nested in another
  puts its whole `op_s` inside its parent; an outermost op puts `op_inside_s` in the backend and the rest in Python.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch

from sf.profiling.capture import ScopeRanges, in_sim_range, profiler_activities
from sf.utils.timing import Timing


@dataclass(frozen=True)
class EventCosts:
    scope_s: float
    sim_s: float
    op_s: float
    op_inside_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def _loop_scopes(timing: Timing, n: int) -> float:
    start = time.thread_time()
    for _ in range(n):
        with timing.add_time("calibration"):
            pass
    return time.thread_time() - start


def _loop_calls(fn, n: int) -> float:
    start = time.thread_time()
    for _ in range(n):
        fn()
    return time.thread_time() - start


def _loop_ops(x: torch.Tensor, out: torch.Tensor, n: int) -> float:
    start = time.thread_time()
    for _ in range(n):
        torch.add(x, x, out=out)
    return time.thread_time() - start


def measure_event_costs(n: int = 20_000, repeats: int = 5) -> EventCosts:
    """The four per-event costs of this process on this machine (about a second)."""
    timing = Timing("calibration")
    x, out = torch.ones(16), torch.empty(16)

    def nothing():
        return None

    wrapped = in_sim_range(nothing)
    ranges = ScopeRanges()
    plain: dict[str, list[float]] = {"scope": [], "sim": [], "op": []}
    observed: dict[str, list[float]] = {"scope": [], "sim": [], "op": []}
    inside: list[float] = []
    for _ in range(repeats):
        plain["scope"].append(_loop_scopes(timing, n))
        plain["sim"].append(_loop_calls(nothing, n))
        plain["op"].append(_loop_ops(x, out, n))
        with ranges.installed(), torch.profiler.profile(activities=profiler_activities()) as prof:
            ranges.active = True
            observed["scope"].append(_loop_scopes(timing, n))
            ranges.active = False
            observed["sim"].append(_loop_calls(wrapped, n))
            observed["op"].append(_loop_ops(x, out, n))
            for _ in range(n // 10):
                x.resolve_conj()
        lengths = [e.duration_ns() for e in prof.profiler.kineto_results.events() if e.name() == "aten::resolve_conj"]
        inside.append(statistics.median(lengths) / 1e9)
    scope, sim, op = (max(0.0, (min(observed[k]) - min(plain[k])) / n) for k in ("scope", "sim", "op"))
    return EventCosts(scope, sim, op, min(inside))
