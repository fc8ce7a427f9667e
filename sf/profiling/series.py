"""The per-interval profile series: every Timing snapshot a component sends, as one JSON line.

The runner appends a line whenever a component's tree arrives (periodically, and once at exit), stamped with the
runner's clock, the frames counted so far and the process's CPU and run-queue seconds. `sf.profile report` takes a
steady-state window from it (leaving out start-up); `--compare` reads the interval-to-interval spread as the noise.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

SERIES_FILE = "profile_series.jsonl"


def process_clock(pid: int) -> tuple[float, float] | None:
    """(CPU seconds, seconds runnable but waiting for a core) summed over the threads alive now; None off Linux.

    The CPU seconds are used only when the snapshot carries no `resources` (which count exited threads too)."""
    cpu = delay = 0.0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                fields = f.read().split()
            cpu += int(fields[0]) / 1e9
            delay += int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None
    return cpu, delay


def machine_busy_s() -> float | None:
    """CPU seconds the whole machine has been busy since boot, every program's (`/proc/stat`); None off Linux. Over a
    window it says how much of the cores other programs took, which a layout move cannot count on."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def snapshot_record(t: float, frames: int, entry: dict, final: bool) -> dict:
    """One line of the series. entry: a profile.json entry ({name, pid, tree} and, where sent, resources, activity
    and node)."""
    clock = process_clock(entry["pid"])
    res = entry.get("resources") or {}
    cpu = res["cpu_user_s"] + res["cpu_system_s"] if "cpu_user_s" in res else (clock[0] if clock else None)
    record = {
        "t": t,
        "frames": frames,
        "component": entry["name"],
        "pid": entry["pid"],
        "final": final,
        "cpu_s": cpu,
        "run_delay_s": clock[1] if clock else None,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "machine_busy_s": machine_busy_s(),
        "lifetime_s": (entry.get("activity") or {}).get("lifetime_s"),
        "peak_rss_bytes": res.get("peak_rss_bytes"),
        "tree": entry["tree"],
    }
    if "node" in entry:
        record["node"] = entry["node"]
    return record


def append_snapshot(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


@dataclass
class Snapshot:
    t: float
    frames: int
    pid: int
    final: bool
    cpu_s: float | None
    run_delay_s: float | None
    cores: int
    tree: dict
    lifetime_s: float | None = None  # the component's own clock, where the snapshot carries its activity
    peak_rss_bytes: int | None = None  # the process's peak resident memory so far
    machine_busy_s: float | None = None  # the whole machine's busy CPU seconds since boot (`machine_busy_s()`)


def snapshot_from_record(r: dict) -> Snapshot:
    return Snapshot(
        r["t"],
        r["frames"],
        r["pid"],
        r["final"],
        r.get("cpu_s"),
        r.get("run_delay_s"),
        r.get("cores") or os.cpu_count() or 1,
        r["tree"],
        r.get("lifetime_s"),
        r.get("peak_rss_bytes"),
        r.get("machine_busy_s"),
    )


def read_series(experiment_dir: Path) -> dict[str, list[Snapshot]]:
    """Snapshots per component in arrival order; of a resumed experiment only the last session."""
    path = Path(experiment_dir) / SERIES_FILE
    if not path.exists():
        return {}
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    start = 0
    for i in range(1, len(records)):
        if records[i]["t"] < records[i - 1]["t"] - 1e-6 and records[i]["frames"] < records[i - 1]["frames"]:
            start = i
    series: dict[str, list[Snapshot]] = {}
    for r in records[start:]:
        series.setdefault(r["component"], []).append(snapshot_from_record(r))
    return series
