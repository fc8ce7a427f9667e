"""A torch.profiler Chrome trace (`<component>.steps<a>-<b>.pt.trace.json`) read back per Timing key: CPU time of each
key's ranges, GPU kernel time charged to the key that launched the kernel, and the GPU's busy intervals.

A kernel is charged to the innermost Timing range (`learner/train/update`, `sf.profiling.ranges`) open on the CPU
thread whose CUDA runtime or driver call launched it (the two share the trace's `correlation` id), so the time a
kernel runs after its launch returns lands on the scope that launched it, not on the scope that later waits for
it. Times in the file are microseconds after `baseTimeNanoseconds` (the wall clock), so they line up with samples
taken with `time.time_ns()`, such as NVML's (`sf.breakdown.nvml`).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sf.profiling.ranges import range_name
from sf.utils.roles import Role

RANGE_GROUPS = tuple(range_name(role.value, "") for role in Role)  # "learner/", "inference_worker/", ...
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
KERNEL_CATEGORY = "kernel"
COPY_CATEGORIES = ("gpu_memcpy", "gpu_memset")


def is_timing_range(name: str) -> bool:
    return name.startswith(RANGE_GROUPS)


@dataclass
class KeyTimes:
    calls: int = 0
    cpu_s: float = 0.0  # the key's ranges on the CPU, children included
    kernel_self_s: float = 0.0  # kernels launched while this key was the innermost range
    kernel_s: float = 0.0  # the same with the kernels of its child keys
    kernels: int = 0  # launched while innermost


@dataclass
class TraceSummary:
    path: str
    start_ns: int  # the first and last event, wall clock
    end_ns: int
    keys: dict[str, KeyTimes]  # by range name, `learner/train/update`
    kernels: int
    kernel_s: float  # every kernel's duration added up (streams may overlap)
    unattributed_kernel_s: float  # kernels launched under no Timing range
    copy_s: float  # memcpy and memset on the device
    pids: list[int] = field(default_factory=list)  # the processes whose Timing ranges the trace holds
    busy: list[tuple[int, int]] = field(default_factory=list)  # kernel intervals merged, wall clock ns

    @property
    def window_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def to_dict(self) -> dict:
        out = asdict(self)
        del out["busy"]
        out["window_s"] = self.window_s
        out["gpu_busy_s"] = busy_s(self.busy, self.start_ns, self.end_ns)
        return out


def read_trace(path: str | Path) -> TraceSummary:
    doc = json.loads(Path(path).read_text())
    return summarize(doc, str(path))


def summarize(doc: dict, path: str = "") -> TraceSummary:
    """The trace `doc` (a Chrome trace as torch.profiler exports it) per Timing key."""
    base_ns = int(doc.get("baseTimeNanoseconds", 0))

    def ns(us: float) -> int:
        return base_ns + round(us * 1000)

    ranges: dict[tuple, list[tuple[int, int, str]]] = defaultdict(list)
    launches: dict[int, tuple[tuple, int]] = {}  # correlation -> (thread, time)
    kernels: list[tuple[int, int, int]] = []  # (start, end, correlation)
    copy_s, first, last = 0.0, None, None
    for event in doc.get("traceEvents", []):
        if event.get("ph") != "X" or "ts" not in event:
            continue
        start, end = ns(event["ts"]), ns(event["ts"] + event.get("dur", 0))
        first = start if first is None else min(first, start)
        last = end if last is None else max(last, end)
        cat, args = event.get("cat"), event.get("args", {})
        thread = (event.get("pid"), event.get("tid"))
        if cat == "user_annotation" and is_timing_range(event.get("name", "")):
            ranges[thread].append((start, end, event["name"]))
        elif cat in LAUNCH_CATEGORIES and "correlation" in args:
            launches[args["correlation"]] = (thread, start)
        elif cat == KERNEL_CATEGORY:
            kernels.append((start, end, args.get("correlation", -1)))
        elif cat in COPY_CATEGORIES:
            copy_s += (end - start) / 1e9
    keys: dict[str, KeyTimes] = defaultdict(KeyTimes)
    for spans in ranges.values():
        for start, end, name in spans:
            keys[name].calls += 1
            keys[name].cpu_s += (end - start) / 1e9
    innermost = _innermost_ranges(ranges, launches)
    unattributed = 0.0
    for start, end, correlation in kernels:
        key = innermost.get(correlation)
        if key is None:
            unattributed += (end - start) / 1e9
            continue
        keys[key].kernel_self_s += (end - start) / 1e9
        keys[key].kernels += 1
    for name, times in keys.items():
        times.kernel_s = sum(t.kernel_self_s for n, t in keys.items() if n == name or n.startswith(name + "/"))
    return TraceSummary(
        path=path,
        start_ns=first or 0,
        end_ns=last or 0,
        keys=dict(sorted(keys.items())),
        kernels=len(kernels),
        kernel_s=sum(end - start for start, end, _ in kernels) / 1e9,
        unattributed_kernel_s=unattributed,
        copy_s=copy_s,
        pids=sorted({pid for pid, _ in ranges}),
        busy=merge_intervals([(start, end) for start, end, _ in kernels]),
    )


def _innermost_ranges(ranges: dict[tuple, list], launches: dict[int, tuple[tuple, int]]) -> dict[int, str]:
    """Correlation id -> the innermost Timing range open on the launching thread at the launch."""
    by_thread: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for correlation, (thread, at) in launches.items():
        by_thread[thread].append((at, correlation))
    found: dict[int, str] = {}
    for thread, calls in by_thread.items():
        # at one instant: a range that ends closes before a launch, a launch comes before a range that starts
        points = [(end, 0, "", 0) for _, end, _ in ranges.get(thread, [])]
        points += [(at, 1, "", correlation) for at, correlation in calls]
        points += [(start, 2, name, -(end - start)) for start, end, name in ranges.get(thread, [])]
        stack: list[tuple[str, int]] = []  # (name, end)
        for at, kind, name, extra in sorted(points):
            if kind == 0:
                while stack and stack[-1][1] <= at:
                    stack.pop()
            elif kind == 1:
                while stack and stack[-1][1] < at:
                    stack.pop()
                if stack:
                    found[extra] = stack[-1][0]
            else:
                stack.append((name, at - extra))
    return found


def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def busy_s(merged: list[tuple[int, int]], lo: int, hi: int) -> float:
    """Seconds of [lo, hi] (ns) covered by the merged intervals."""
    return sum(max(0, min(end, hi) - max(start, lo)) for start, end in merged) / 1e9


def nvml_busy_s(samples: list[tuple[int, float]], lo: int, hi: int) -> float | None:
    """NVML's utilization integrated over [lo, hi] (ns): each sample (time ns, utilization 0..1) stands for the
    period since the sample before it (the first for a period as long as the second's). None without two samples
    reaching into the window."""
    if len(samples) < 2:
        return None
    times = [t for t, _ in samples]
    total, covered = 0.0, 0
    start_at = max(0, bisect.bisect_right(times, lo) - 1)
    for k in range(start_at, len(samples)):
        t, utilization = samples[k]
        previous = times[k - 1] if k else t - (times[1] - times[0])
        overlap = min(t, hi) - max(previous, lo)
        if overlap > 0:
            total += overlap * utilization
            covered += overlap
        if previous >= hi:
            break
    return total / 1e9 if covered else None
