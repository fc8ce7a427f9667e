"""One timeline of the whole run (`--profiling_timeline=True`): every Timing scope of every process as a trace
event, messages between components as flow arrows, merged at exit into `profiling/timeline.json` (Chrome trace
format: Perfetto and chrome://tracing open it).

Each process records into a bounded ring buffer (the last `EVENTS_PER_PROCESS` events) through a Timing scope
hook, so nothing is recorded and nothing costs while the flag is off. Its event loop, switched to its traced
variant, adds a slice per delivered message and carries a flow id inside every message it sends. At exit every
process writes its buffer to a part file; the runner merges the parts into one track per component.

Clocks: events are stamped with `time.perf_counter()`, which on Linux reads CLOCK_MONOTONIC, one clock for all
processes of the machine, so the tracks align without correction. Where perf_counter is another clock, each part
also carries its offset to the wall clock (`time.time()`), and the merge aligns the parts by it instead.
"""
from __future__ import annotations

import itertools
import json
import os
import pickle
import time
from collections import deque
from pathlib import Path

from sf.runtime.names import profile_order
from sf.utils.timing import ScopeHook, add_scope_hook, remove_scope_hook

EVENTS_PER_PROCESS = 200_000
FLOW = "~flow"  # message kind of a message wrapped with its flow id: (dest, FLOW, flow_id, kind, *payload)
PARTS_DIR = "timeline_parts"
SHARED_CLOCK = "clock_gettime(CLOCK_MONOTONIC)"

_clock = time.perf_counter


class Recorder:
    """This process's ring buffer of events: ("X", component, path, start, end) for a scope, ("H", component, kind, start,
    end, flow_id) for a delivered message, ("C", component, function, start, end, None) for a start/flush/stop
    hook or timer the loop ran for a component, ("s", component, flow_id, time, kind) for a sent message."""

    def __init__(self, capacity: int = EVENTS_PER_PROCESS):
        self.events: deque = deque(maxlen=capacity)
        self.pid = os.getpid()
        # one counter per process, started at the pid in the high bits: ids unique over the machine's processes
        # (pids < 2^22, 2^31 messages each) and below 2^53, exact in the trace viewer's JSON numbers
        self.next_flow_id = itertools.count(self.pid << 31).__next__
        # a row of strings and floats only: the garbage collector stops tracking such tuples, so a full buffer adds
        # nothing to its passes
        self.hook = ScopeHook(None, None, self.events.append)
        add_scope_hook(self.hook)

    def stop(self) -> None:
        remove_scope_hook(self.hook)

    def rows(self) -> list[tuple]:
        return list(self.events)

    def dump(self, path: Path) -> None:
        """Write this process's part for the runner to merge (atomically: a reader never sees half a part)."""
        self.stop()
        path.parent.mkdir(parents=True, exist_ok=True)
        part = {"pid": self.pid, "clock": time.get_clock_info("perf_counter").implementation,
                "wall_offset_s": _wall_offset(), "rows": self.rows()}
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))
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


def unwrap(msg: tuple) -> tuple:
    """A message without its flow id, for readers outside the event loop."""
    return (msg[0], *msg[3:]) if len(msg) > 1 and msg[1] == FLOW else msg


def part_path(profiling_dir: Path, label: str) -> Path:
    return Path(profiling_dir) / PARTS_DIR / f"{label.replace(' ', '_')}.{os.getpid()}.pkl"


def merge(profiling_dir: Path, local: Recorder | None = None) -> Path:
    """Merge every part (and this process's recorder) into `timeline.json`; remove the parts."""
    profiling_dir = Path(profiling_dir)
    parts = []
    for path in sorted((profiling_dir / PARTS_DIR).glob("*.pkl")):
        parts.append(pickle.loads(path.read_bytes()))
    if local is not None:
        local.stop()
        parts.append({"pid": local.pid, "clock": time.get_clock_info("perf_counter").implementation,
                      "wall_offset_s": _wall_offset(), "rows": local.rows()})
    out = profiling_dir / "timeline.json"
    profiling_dir.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(chrome_trace(parts)))
    for path in (profiling_dir / PARTS_DIR).glob("*"):
        path.unlink()
    if (profiling_dir / PARTS_DIR).exists():
        (profiling_dir / PARTS_DIR).rmdir()
    return out


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
                events.append({**base, "ph": "X", "name": path.rsplit("/", 1)[-1], "cat": "timing",
                               "ts": us(start, pid), "dur": round((end - start) * 1e6, 3), "args": {"path": path}})
            elif kind in ("H", "C"):
                label, start, end, flow_id = row[2], row[3], row[4], row[5]
                name, category = (f"on {label}", "message") if kind == "H" else (label, "call")
                events.append({**base, "ph": "X", "name": name, "cat": category, "ts": us(start, pid),
                               "dur": round((end - start) * 1e6, 3)})
                if flow_id is not None:
                    events.append({**base, "ph": "f", "bp": "e", "name": label, "cat": "message", "id": flow_id,
                                   "ts": us(start, pid)})
            elif kind == "s":
                flow_id, at, label = row[2], row[3], row[4]
                events.append({**base, "ph": "s", "name": label, "cat": "message", "id": flow_id, "ts": us(at, pid)})
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
    return {"traceEvents": meta + sorted(events, key=lambda e: e["ts"]), "displayTimeUnit": "ms",
            "otherData": {"clock": clock, "events_per_process": EVENTS_PER_PROCESS}}
