"""The profiler's events reduced to what the cross-stack attribution needs: a kind, a thread and an interval.

torch.profiler's raw (kineto) events are converted once into `Span`s, so the attribution is a pure function of
plain records and is unit-tested with hand-made spans, including the CUDA kinds a CPU machine never produces.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import torch

SCOPE, SIM, OP, CUDA_API, KERNEL = "scope", "sim", "op", "cuda_api", "kernel"

_GPU_ACTIVITIES = {"kernel", "concurrent_kernel", "gpu_memcpy", "gpu_memset"}
_CUDA_API_ACTIVITIES = {"cuda_runtime", "cuda_driver"}
_SKIPPED_ACTIVITIES = {"user_annotation", "gpu_user_annotation", "python_function", "overhead"}
_CPU_ACTIVITIES = {"cpu_op", "user_annotation", "python_function", "overhead", *_CUDA_API_ACTIVITIES}


class Span(NamedTuple):
    """A tuple, not a dataclass: a capture converts hundreds of thousands of events, and a tuple is built fastest."""

    kind: str  # SCOPE (a Timing scope range), SIM (inside the env), OP (a torch CPU op), CUDA_API, KERNEL
    name: str
    thread: int  # the CPU thread that recorded it; the stream for kernels
    start_ns: int
    end_ns: int
    correlation: int = 0  # a kernel's equals the correlation of the CPU event (API call or op) that launched it


def classify(name: str, activity: str, on_cpu: bool, range_names: set[str], sim_name: str) -> str | None:
    """The span kind of one profiler event, or None for events that are not a layer of the stack (other
    annotations such as torch's own `Optimizer.step#...` ranges, whose time is Python and ops already counted)."""
    if not on_cpu or activity in _GPU_ACTIVITIES:
        return None if activity == "gpu_user_annotation" else KERNEL
    if name == sim_name:
        return SIM
    if name in range_names:
        return SCOPE
    if activity in _CUDA_API_ACTIVITIES or name.startswith("cuda") or (name.startswith("cu") and name[2:3].isupper()):
        return CUDA_API
    if activity in _SKIPPED_ACTIVITIES:
        return None
    return OP


def spans_from_kineto(events: Iterable, range_names: set[str], sim_name: str) -> list[Span]:
    """Spans from `profiler.kineto_results.events()`; timestamps stay in the profiler's epoch nanoseconds."""
    spans = []
    cpu = torch.autograd.DeviceType.CPU
    for event in events:  # a capture holds up to millions of events: each call below costs 0.05-0.5 us
        activity = str(event.activity_type())
        on_cpu = activity in _CPU_ACTIVITIES or event.device_type() == cpu
        name = event.name()
        kind = classify(name, activity, on_cpu, range_names, sim_name)
        if kind is None:
            continue
        start = event.start_ns()
        thread = event.start_thread_id() if on_cpu else -1 - (event.device_resource_id() or 0)
        # a device event names the CPU event that launched it by that event's correlation id (as torch pairs them)
        correlation = event.linked_correlation_id() if kind == KERNEL else event.correlation_id()
        spans.append(Span(kind, name, thread, start, start + event.duration_ns(), correlation))
    return spans
