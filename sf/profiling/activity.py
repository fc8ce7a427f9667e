"""Work versus waiting: where each component's lifetime went.

A component's Timing tree is read by one rule: top-level keys named `wait_<what>` are waits, the top-level key
`loop_overhead` is the event loop's own cost, every other top-level key is work. Components time their work
themselves; their waits and the loop's overhead are measured by the event loop (`LoopMeter`) and written into the
trees, because only the loop sees them: the time it blocks on its inbox, the time it spends in another
component's handlers (for components sharing a process, that is the idle one's wait), and its own dispatch and
message (de)serialization.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Protocol

WAIT_PREFIX = "wait_"
LOOP_OVERHEAD = "loop_overhead"


@dataclass
class Activity:
    """One component's lifetime split into work, waits and loop overhead (seconds): what `profile.json` records per
    component, and what the report reads back over a steady window."""

    lifetime_s: float
    work_s: float
    wait_s: float
    overhead_s: float
    waits: dict[str, float] = field(default_factory=dict)

    @property
    def coverage(self) -> float:
        """Share of the lifetime the three parts explain (1.0 when every moment is accounted for)."""
        return (self.work_s + self.wait_s + self.overhead_s) / self.lifetime_s if self.lifetime_s > 0 else 0.0

    def share(self, seconds: float) -> float:
        """`seconds` as a share of the lifetime."""
        return seconds / self.lifetime_s if self.lifetime_s > 0 else 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def activity_level(tree: dict, base: str = "") -> dict:
    """The level of a `Timing.to_dict()` tree the rule applies to: the top level, or the children at `base`."""
    level = tree
    for key in filter(None, base.split("/")):
        level = level.get(key, {}).get("children", {})
    return level


def activity_of(tree: dict, lifetime_s: float, base: str = "") -> Activity:
    """Split a component's tree (`Timing.to_dict()` output) by the rule above."""
    level = activity_level(tree, base)
    waits = {key: entry["time"] for key, entry in level.items() if key.startswith(WAIT_PREFIX)}
    overhead = level[LOOP_OVERHEAD]["time"] if LOOP_OVERHEAD in level else 0.0
    work = sum(
        entry["time"] for key, entry in level.items() if key != LOOP_OVERHEAD and not key.startswith(WAIT_PREFIX)
    )
    return Activity(lifetime_s, work, sum(waits.values()), overhead, waits)


class Metered(Protocol):
    """What the meter needs of a component (sf.runtime.event_loop.Component has these)."""

    name: str
    timing: object
    busy_s: float  # seconds the loop spent in this component's handlers, start/stop hooks and timers
    wait_key: str  # what it waits for while the loop is elsewhere; it may change after each of its handlers
    wait_open: str  # the key its current wait is filed under (kept by the meter)
    timing_base: str  # where its top level is: "" or, for the runner, "main_loop"


class LoopMeter:
    """The clocks of one event loop. Every moment of the loop's life falls in exactly one bucket: blocked on the
    inbox, inside one component's code (its `busy_s`), deserializing, serializing and sending, running a timer
    that belongs to no component, or the loop's own dispatch (what remains). A component's wait is the time
    the loop was blocked or busy with another component, filed under the wait key the component had then."""

    def __init__(self, now: float):
        self.start = now
        self.blocked_s = 0.0
        self.deserialize_s = 0.0
        self.serialize_s = 0.0
        self.timers_s = 0.0
        self._open: dict[str, tuple[str, float]] = {}  # component -> (wait key, its idle total when opened)
        self._waits: dict[str, dict[str, float]] = {}

    def _idle(self, component: Metered, busy_total: float) -> float:
        return self.blocked_s + busy_total - component.busy_s

    def switch_wait(self, component: Metered, components: Iterable[Metered]) -> None:
        """The component's wait key changed: close the time waited under the old key."""
        self._close(component, sum(c.busy_s for c in components))

    def _close(self, component: Metered, busy_total: float) -> None:
        idle = self._idle(component, busy_total)
        key, since = self._open.get(component.name, (component.wait_key, 0.0))
        waits = self._waits.setdefault(component.name, {})
        waits[key] = waits.get(key, 0.0) + idle - since
        self._open[component.name] = (component.wait_key, idle)
        component.wait_open = component.wait_key

    def write(self, components: list[Metered], now: float) -> float:
        """Write every component's waits and the loop overhead into its tree; return the loop's lifetime."""
        busy_total = sum(c.busy_s for c in components)
        lifetime = now - self.start
        dispatch = lifetime - self.blocked_s - self.deserialize_s - self.serialize_s - self.timers_s - busy_total
        overhead = {
            "dispatch": max(0.0, dispatch),
            "deserialize": self.deserialize_s,
            "serialize": self.serialize_s,
            "timers": self.timers_s,
        }
        for component in components:
            self._close(component, busy_total)
            prefix = f"{component.timing_base}/" if component.timing_base else ""
            for key, seconds in self._waits[component.name].items():
                component.timing.set(prefix + key, seconds)
            component.timing.set(prefix + LOOP_OVERHEAD, sum(overhead.values()))
            for key, seconds in overhead.items():
                component.timing.set(f"{prefix}{LOOP_OVERHEAD}/{key}", seconds)
        return lifetime
