"""One timeline of the whole run (`--profiling_timeline=True`): every Timing scope of every process as a trace
event, messages between components as flow arrows, merged at exit into `profiling/timeline.json` (Chrome trace
format: Perfetto and chrome://tracing open it).

Each process records through a Timing scope hook into its own bounded buffer (about the last `EVENTS_PER_PROCESS`
events), so nothing is recorded and nothing costs while the flag is off. Its event loop, switched to its traced
variant, adds a slice per delivered message and carries a flow id with every message it sends (the envelope
`sf.runtime.messages.Flow`); a message's slice and flow are named after its kind's class. At exit every
process writes its buffer to a part file (JSON: reading one runs no code); the runner merges the parts this run
wrote (none older than its start, each checked for its shape) into one track per component.

The buffer is flat: per event one reference in a list (the Timing node of a scope, or a label shared by every event
of its kind) and two numbers in an array of doubles (start and end, or time and flow id). A tuple per event, kept
until the buffer drops it, cost 0.4-0.6 us per event inside a real inference step (each new row lands in memory no
cache holds any more) against about 0.1 us for these three appends.

Clocks: events are stamped with `time.perf_counter()`, which on Linux reads CLOCK_MONOTONIC, one clock for all
processes of the machine, so the tracks align without correction. Where perf_counter is another clock, each part
also carries its offset to the wall clock (`time.time()`), and the merge aligns the parts by it instead.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from array import array
from pathlib import Path

from sf.utils.roles import profile_order
from sf.utils.timing import ScopeHook, add_scope_hook, remove_scope_hook

EVENTS_PER_PROCESS = 200_000
TRIM_PERIOD_S = 1.0
PARTS_DIR = "timeline_parts"
SHARED_CLOCK = "clock_gettime(CLOCK_MONOTONIC)"

_clock = time.perf_counter
log = logging.getLogger("sf")


class Recorder:
    """This process's events. `rows()` gives them as tuples: ("X", component, path, start, end) for a scope, ("H",
    component, kind, start, end) for a delivered message, ("C", component, function, start, end) for a start/flush/stop
    hook or timer the loop ran for a component, ("s" or "f", component, flow_id, time, kind) for a message sent or
    received."""

    def __init__(self, capacity: int = EVENTS_PER_PROCESS):
        self.capacity = capacity
        self.refs: list = []  # a Timing node, or a label (kind, component, name)
        self.times = array("d")  # two per reference
        self.labels: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        self.pid = os.getpid()
        # one counter per process, started at the pid in the high bits: ids unique over the machine's processes
        # (pids < 2^22, 2^31 messages each) and below 2^53, exact as doubles and in the trace viewer's JSON numbers
        self.next_flow_id = itertools.count(self.pid << 31).__next__
        self.hook = ScopeHook(None, None, (self.refs.append, self.times.append))
        add_scope_hook(self.hook)

    def add(self, kind: str, component: str, name: str, a: float, b: float) -> None:
        """A message, call or flow event: a shared label per (kind, component, name), events keep a reference to it,
        and two numbers (start and end, or time and flow id)."""
        key = (kind, component, name)
        self.refs.append(self.labels.setdefault(key, key))
        self.times.append(a)
        self.times.append(b)

    def trim(self) -> None:
        """Drop the oldest events beyond the capacity (the event loop calls this every `TRIM_PERIOD_S`)."""
        excess = len(self.refs) - self.capacity
        if excess > 0:
            del self.refs[:excess]
            del self.times[: 2 * excess]

    def stop(self) -> None:
        remove_scope_hook(self.hook)

    def rows(self) -> list[tuple]:
        self.trim()
        times, rows = self.times, []
        for i, ref in enumerate(self.refs):
            a, b = times[2 * i], times[2 * i + 1]
            if type(ref) is tuple:
                kind, component, name = ref
                rows.append((kind, component, name, a, b) if kind in ("H", "C") else (kind, component, int(b), a, name))
            else:
                rows.append(("X", ref.component, ref.path, a, b))
        return rows

    def part(self) -> dict:
        self.stop()
        return {
            "pid": self.pid,
            "clock": time.get_clock_info("perf_counter").implementation,
            "wall_offset_s": _wall_offset(),
            "rows": self.rows(),
        }

    def dump(self, path: Path) -> None:
        """Write this process's part for the runner to merge (atomically: a reader never sees half a part)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.part()))
        os.replace(tmp, path)


def _wall_offset() -> float:
    """time.time() - time.perf_counter(), from the closest of a few paired readings."""
    best = None
    for _ in range(5):
        a = _clock()
        wall = time.time()
        b = _clock()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) / 2)
    return best[1]


def part_path(profiling_dir: Path, label: str) -> Path:
    return Path(profiling_dir) / PARTS_DIR / f"{label.replace(' ', '_')}.{os.getpid()}.json"


def merge(profiling_dir: Path, local: Recorder | None = None, since: float = 0.0) -> Path:
    """Merge the parts written since `since` (the run's start, seconds since the epoch) and this process's recorder
    into `timeline.json`; remove the parts folder. An older part is another run's; one that is not a part is named
    and left out."""
    profiling_dir = Path(profiling_dir)
    parts = []
    for path in sorted((profiling_dir / PARTS_DIR).glob("*.json")):
        if path.stat().st_mtime < since:
            continue
        try:
            part = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            log.warning("timeline: %s left out: %s", path, exc)
            continue
        if _is_part(part):
            parts.append(part)
        else:
            log.warning("timeline: %s left out: not a timeline part", path)
    if local is not None:
        parts.append(local.part())
    out = profiling_dir / "timeline.json"
    profiling_dir.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(chrome_trace(parts)))
    for path in (profiling_dir / PARTS_DIR).glob("*"):
        path.unlink()
    if (profiling_dir / PARTS_DIR).exists():
        (profiling_dir / PARTS_DIR).rmdir()
    return out


def _is_part(part) -> bool:
    return (
        isinstance(part, dict)
        and isinstance(part.get("pid"), int)
        and isinstance(part.get("clock"), str)
        and isinstance(part.get("wall_offset_s"), (int, float))
        and isinstance(part.get("rows"), list)
        and all(isinstance(row, list) and len(row) == 5 and row[0] in ("X", "H", "C", "s", "f") for row in part["rows"])
    )


def chrome_trace(parts: list[dict]) -> dict:
    """Chrome trace JSON: a process track per component (named after it), slices for scopes and delivered
    messages, 's'/'f' flow events from each send to its delivery."""
    shared = all(part["clock"] == SHARED_CLOCK for part in parts)
    offsets = {part["pid"]: 0.0 if shared else part["wall_offset_s"] for part in parts}
    components = sorted({row[1] for part in parts for row in part["rows"]}, key=profile_order)
    track = {name: index + 1 for index, name in enumerate(components)}
    starts = [row[3] + offsets[part["pid"]] for part in parts for row in part["rows"]]
    origin = min(starts) if starts else 0.0

    def us(seconds: float, pid: int) -> float:
        return round((seconds + offsets[pid] - origin) * 1e6, 3)

    events: list[dict] = []
    os_pid = {}
    for part in parts:
        pid = part["pid"]
        for row in part["rows"]:
            kind, component = row[0], row[1]
            os_pid[component] = pid
            base = {"pid": track[component], "tid": pid}
            if kind == "X":
                path, start, end = row[2], row[3], row[4]
                events.append(
                    {
                        **base,
                        "ph": "X",
                        "name": path.rsplit("/", 1)[-1],
                        "cat": "timing",
                        "ts": us(start, pid),
                        "dur": round((end - start) * 1e6, 3),
                        "args": {"path": path},
                    }
                )
            elif kind in ("H", "C"):
                label, start, end = row[2], row[3], row[4]
                name, category = (f"on {label}", "message") if kind == "H" else (label, "call")
                events.append(
                    {
                        **base,
                        "ph": "X",
                        "name": name,
                        "cat": category,
                        "ts": us(start, pid),
                        "dur": round((end - start) * 1e6, 3),
                    }
                )
            elif kind in ("s", "f"):
                flow_id, at, label = row[2], row[3], row[4]
                events.append(
                    {
                        **base,
                        "ph": kind,
                        "name": label,
                        "cat": "message",
                        "id": flow_id,
                        "ts": us(at, pid),
                        **({"bp": "e"} if kind == "f" else {}),
                    }
                )
    meta = []
    for name, index in track.items():
        meta.append({"ph": "M", "name": "process_name", "pid": index, "args": {"name": name}})
        meta.append({"ph": "M", "name": "process_sort_index", "pid": index, "args": {"sort_index": index}})
        meta.append({"ph": "M", "name": "process_labels", "pid": index, "args": {"labels": f"pid {os_pid[name]}"}})
        meta.append({"ph": "M", "name": "thread_name", "pid": index, "tid": os_pid[name], "args": {"name": name}})
    sent = {e["id"] for e in events if e["ph"] == "s"}
    paired = sent & {e["id"] for e in events if e["ph"] == "f"}
    events = [e for e in events if e["ph"] not in ("s", "f") or e["id"] in paired]  # both ends in the buffers
    clock = SHARED_CLOCK if shared else "time.time() offsets per process"
    return {
        "traceEvents": meta + sorted(events, key=lambda e: e["ts"]),
        "displayTimeUnit": "ms",
        "otherData": {"clock": clock, "events_per_process": EVENTS_PER_PROCESS},
    }
