"""Cross-stack attribution: every instant of the main thread's window goes to one operation (row) and one layer.

One sweep over the span boundaries. The row is the innermost Timing scope open on the main thread (serial mode
runs every component there, so the main thread is the training's critical path). The layer is the lowest one
active at that instant, in this order:

- GPU kernels: the main thread waits in a synchronizing CUDA call while a kernel runs (the time the GPU held it up);
- CUDA API: any other time inside a CUDA runtime or driver call;
- framework backend: inside a torch operator, on any CPU thread (autograd may run backward on its own thread
  while the main thread waits for it);
- simulator: inside the env's own code (its step, reset or construction);
- Python: the rest, the interpreter running sf's code and the instrumentation's own work.

Because each instant gets exactly one label, a row's layers sum to the time its scope was innermost, and the rows
sum to the window. Kernel time that overlaps CPU work is not on the critical path; it is reported on the side
per row (`kernel_busy_s`, attributed to the row that launched the kernel) and for the whole window.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from sf.breakdown.spans import CUDA_API, KERNEL, OP, SCOPE, SIM, Span

LAYERS = ("simulator", "python", "backend", "cuda_api", "gpu")


@dataclass
class RowTimes:
    """Seconds per layer of one operation, and how many instrumentation events it recorded."""

    simulator: float = 0.0
    python: float = 0.0
    backend: float = 0.0
    cuda_api: float = 0.0
    gpu: float = 0.0
    kernel_busy_s: float = 0.0
    nvml_busy_s: float | None = None
    scopes: int = 0
    sims: int = 0
    ops: int = 0  # outermost op events (their profiler cost lands partly outside the op, in Python)
    nested_ops: int = 0  # events inside another op (their whole profiler cost lands inside the parent op)

    @property
    def total(self) -> float:
        return sum(getattr(self, layer) for layer in LAYERS)


@dataclass
class Attribution:
    rows: dict[str, RowTimes]
    window_s: float
    kernel_busy_s: float  # union of kernel intervals inside the window
    nvml_busy_s: float | None  # utilization NVML reported, integrated over the window
    components: dict[str, RowTimes] = field(default_factory=dict)


def is_synchronizing(name: str) -> bool:
    """CUDA calls that block the CPU until the GPU has finished queued work."""
    return "Synchronize" in name or (name.startswith(("cudaMemcpy", "cuMemcpy")) and "Async" not in name)


def attribute(
    spans: list[Span],
    main_thread: int,
    window: tuple[int, int],
    row_of: Callable[[str], str],
    loop_row: str,
    nvml_samples: list[tuple[int, float]] | None = None,
) -> Attribution:
    """Split `window` (ns) of `main_thread` by row and layer. `row_of` maps a scope span's name to its row;
    time under no scope goes to `loop_row`. `nvml_samples` are (end of sample period ns, utilization 0..1)."""
    lo, hi = window
    boundaries = []
    kernel_corr: set[int] = set()
    for i, span in enumerate(spans):
        if span.end_ns <= lo or span.start_ns >= hi:
            continue
        if span.kind in (SCOPE, SIM) and span.thread != main_thread:
            continue
        start, end = max(span.start_ns, lo), min(span.end_ns, hi)
        # at equal times: ends first; among starts the outer (longer) first, among ends the inner (later) first
        boundaries.append((start, 1, -end, i))
        boundaries.append((end, 0, -start, i))
        if span.kind == KERNEL:
            kernel_corr.add(span.correlation)
    boundaries.sort()

    rows: dict[str, RowTimes] = {}
    stack: list[tuple[int, str]] = []
    active = {SIM: 0, OP: 0, CUDA_API: 0, KERNEL: 0}
    syncs = 0
    op_depth: dict[int, int] = {}
    launched_by: dict[int, str] = {}
    kernel_rows: list[tuple[int, int, int]] = []  # (span index, start, end)
    kernel_union = 0.0
    sample_times = [t for t, _ in nvml_samples] if nvml_samples else []
    nvml_total = 0.0 if nvml_samples else None
    components: dict[str, RowTimes] = {}

    def row_times(row: str) -> RowTimes:
        times = rows.get(row)
        if times is None:
            times = rows[row] = RowTimes()
        return times

    now = lo
    for t, is_start, _, i in boundaries:
        if t > now:
            dt = (t - now) / 1e9
            row = stack[-1][1] if stack else loop_row
            times = row_times(row)
            if syncs and active[KERNEL]:
                times.gpu += dt
            elif active[CUDA_API]:
                times.cuda_api += dt
            elif active[OP]:
                times.backend += dt
            elif active[SIM]:
                times.simulator += dt
            else:
                times.python += dt
            if active[KERNEL]:
                kernel_union += dt
            if sample_times:
                k = min(bisect.bisect_left(sample_times, t), len(sample_times) - 1)
                busy = dt * nvml_samples[k][1]
                nvml_total += busy
                component = components.setdefault(row.split("/", 1)[0], RowTimes())
                component.nvml_busy_s = (component.nvml_busy_s or 0.0) + busy
            now = t
        span = spans[i]
        kind = span.kind
        if kind == SCOPE:
            if is_start:
                stack.append((i, row_of(span.name)))
                row_times(stack[-1][1]).scopes += 1
            elif stack and stack[-1][0] == i:
                stack.pop()
            else:
                stack[:] = [entry for entry in stack if entry[0] != i]
            continue
        active[kind] += 1 if is_start else -1
        depth = 0
        if kind in (OP, CUDA_API):
            depth = op_depth.get(span.thread, 0)
            op_depth[span.thread] = depth + 1 if is_start else depth - 1
        if kind == CUDA_API and is_synchronizing(span.name):
            syncs += 1 if is_start else -1
        if not is_start or kind == KERNEL:
            if kind == KERNEL and is_start:
                kernel_rows.append((i, max(span.start_ns, lo), min(span.end_ns, hi)))
            continue
        row = stack[-1][1] if stack else loop_row
        if kind == SIM:
            row_times(row).sims += 1
        else:
            if depth:
                row_times(row).nested_ops += 1
            else:
                row_times(row).ops += 1
            if span.correlation in kernel_corr:
                launched_by[span.correlation] = row
    for i, start, end in kernel_rows:
        row = launched_by.get(spans[i].correlation, loop_row)
        row_times(row).kernel_busy_s += (end - start) / 1e9
    for row, times in rows.items():
        component = components.setdefault(row.split("/", 1)[0], RowTimes())
        for name in (*LAYERS, "kernel_busy_s", "scopes", "sims", "ops", "nested_ops"):
            setattr(component, name, getattr(component, name) + getattr(times, name))
    return Attribution(rows, (hi - lo) / 1e9, kernel_union, nvml_total, components)
