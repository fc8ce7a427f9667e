"""The capture side of the breakdown: torch.profiler over the Runner's main loop, a range on every Timing scope,
and a range around the env's own calls.

Scopes become `_RecordFunctionFast` ranges named `<component>/<key path>` (about 0.5 us each under the profiler,
against about 13 us for the Python `record_function` context manager), opened only while the capture window is
open. The window is the Runner's `main_loop` scope: the profiler starts just before its clock starts and stops
just after it stops, so the window measures what an uninstrumented run's `main_loop` measures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from sf.envs.registry import add_create_hook, remove_create_hook
from sf.runtime.event_loop import add_run_hook, remove_run_hook
from sf.utils.roles import RUNNER
from sf.utils.timing import ScopeHook, add_scope_hook, remove_scope_hook

try:
    _Range = torch._C._profiler._RecordFunctionFast
except AttributeError:  # older torch: the documented context manager, slower but the same ranges
    _Range = torch.profiler.record_function

SIM_RANGE = "simulator"
WINDOW_KEY = "main_loop"
WINDOW_RANGE = f"{RUNNER}/{WINDOW_KEY}"


def profiler_activities() -> list:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return activities


class ScopeRanges:
    """A Timing scope hook: while `active`, each scope is a profiler range named after its component and path."""

    def __init__(
        self, on_window_start: Callable[[], None] | None = None, on_window_end: Callable[[], None] | None = None
    ):
        self.names: dict[Any, str] = {}
        self.stack: list[tuple[Any, Any]] = []
        self.active = False
        self.on_window_start = on_window_start
        self.on_window_end = on_window_end
        self.window_node = None
        self.hook = ScopeHook(self.enter, self.exit)

    def enter(self, node) -> None:
        if not self.active:
            if self.on_window_start is None or node.path != WINDOW_KEY or node.timing.name != RUNNER:
                return
            self.on_window_start()
            self.active, self.window_node = True, node
        name = self.names.get(node)
        if name is None:
            name = self.names[node] = f"{node.timing.name}/{node.path}"
        rng = _Range(name)
        rng.__enter__()
        self.stack.append((node, rng))

    def exit(self, node) -> None:
        if not self.active or not self.stack or self.stack[-1][0] is not node:
            return
        self.stack.pop()[1].__exit__(None, None, None)
        if node is self.window_node:
            self.active, self.window_node = False, None
            self.on_window_end()

    @contextmanager
    def installed(self) -> Iterator[ScopeRanges]:
        add_scope_hook(self.hook)
        try:
            yield self
        finally:
            remove_scope_hook(self.hook)


def in_sim_range(fn: Callable) -> Callable:
    """`fn` inside a simulator range: the env's own code, whatever language it is written in."""

    def call(*args, **kwargs):
        with _Range(SIM_RANGE):
            return fn(*args, **kwargs)

    return call


def wrap_env(env) -> Any:
    """Put the env's step and reset (the outermost gymnasium wrapper's, so all wrappers count) in sim ranges."""
    env.step = in_sim_range(env.step)
    env.reset = in_sim_range(env.reset)
    return env


def _env_in_sim_ranges(create: Callable[[], Any]) -> Any:
    """An env creation hook (`sf.envs.registry.add_create_hook`): construction, step and reset in sim ranges."""
    with _Range(SIM_RANGE):
        env = create()
    return wrap_env(env)


@contextmanager
def envs_in_sim_ranges() -> Iterator[None]:
    """Envs created inside this block (the rollout workers', vector envs such as EnvPool's included) have their
    construction, step and reset in sim ranges."""
    add_create_hook(_env_in_sim_ranges)
    try:
        yield
    finally:
        remove_create_hook(_env_in_sim_ranges)


@dataclass
class LoopClock:
    """The main thread's clocks over one event-loop run: CPU seconds, and seconds it was runnable but waiting for a
    core (the kernel's run delay; None off Linux). Wall time less the core wait is what the loop would have taken
    on a machine nobody else was using; on a quiet machine the two are the same."""

    cpu_s: float
    core_wait_s: float | None


def _core_wait_s() -> float | None:
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


@contextmanager
def _thread_clock(record: list[LoopClock]) -> Iterator[None]:
    cpu, wait = time.thread_time(), _core_wait_s()
    try:
        yield
    finally:
        end_wait = _core_wait_s()
        record.append(
            LoopClock(time.thread_time() - cpu, None if wait is None or end_wait is None else end_wait - wait)
        )


@contextmanager
def event_loop_clocks(record: list[LoopClock]) -> Iterator[list[LoopClock]]:
    """Appends the main thread's `LoopClock` of each event-loop run inside this block: the same interval as the main
    loop's wall time. Costs nothing per event (a run hook, `sf.runtime.event_loop.add_run_hook`, entered once per
    loop), so it also measures the uninstrumented run."""
    hook = partial(_thread_clock, record)
    add_run_hook(hook)
    try:
        yield record
    finally:
        remove_run_hook(hook)


def total_clock(clocks: list[LoopClock]) -> LoopClock:
    """The clocks of several event-loop runs added up (a core wait unknown in one is unknown in the sum)."""
    waits = [c.core_wait_s for c in clocks]
    return LoopClock(sum(c.cpu_s for c in clocks), None if None in waits else sum(waits))


def mean_clock(clocks: list[LoopClock]) -> LoopClock | None:
    """The average of several runs' clocks (None for none)."""
    if not clocks:
        return None
    total = total_clock(clocks)
    return LoopClock(total.cpu_s / len(clocks), None if total.core_wait_s is None else total.core_wait_s / len(clocks))


@dataclass
class Capture:
    """The profiler session of one training run; `profiler` holds the events once the window has closed."""

    profiler: Any = None
    range_names: set[str] | None = None
    nvml: Any = None
    loop_clocks: list[LoopClock] = field(default_factory=list)

    @contextmanager
    def around_training(self) -> Iterator[None]:
        self.profiler = torch.profiler.profile(activities=profiler_activities())
        ranges = ScopeRanges(self._start, self._stop)
        with ranges.installed(), envs_in_sim_ranges(), event_loop_clocks(self.loop_clocks):
            yield
        self.range_names = set(ranges.names.values())

    def _start(self) -> None:
        if self.nvml is not None:
            self.nvml.start()
        self.profiler.start()

    def _stop(self) -> None:
        self.profiler.stop()
        if self.nvml is not None:
            self.nvml.stop()
