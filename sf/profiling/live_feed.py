"""`profile_live.jsonl`: what a running experiment tells a watcher, written by the runner and only read by others.

The profile series (`profile_series.jsonl`) keeps one snapshot per component every `--experiment_summaries_interval`
seconds for the whole run, which is what a report and a diff need. A watcher needs the last few seconds instead, so
components send their snapshots every `snapshot_interval(cfg)` seconds (at most `LIVE_INTERVAL_S`), and the runner
appends each one here, in the series' record format, together with a progress record (frames, FPS, policy lag,
trajectory age, the verdict of the last window) at every progress line. The file is a rolling one: past
`ROTATE_BYTES` it becomes `profile_live.jsonl.1` (the previous `.1` is dropped) and a new one starts, so a run of
days keeps at most twice that on disk. `Follower` reads both incrementally, so a watcher costs the run nothing but
the page cache.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from sf.profiling.series import Snapshot, snapshot_from_record

LIVE_FILE = "profile_live.jsonl"
LIVE_INTERVAL_S = 2.0
ROTATE_BYTES = 8 * 2**20


def snapshot_interval(cfg) -> float:
    """Seconds between the timing snapshots a component sends: often enough for a live view, never less often than
    `--experiment_summaries_interval` asks."""
    return min(float(cfg.experiment_summaries_interval), LIVE_INTERVAL_S)


class LiveFeed:
    """The runner's side: append records, rotate past `ROTATE_BYTES`. A new session starts a new feed."""

    def __init__(self, experiment_dir: Path, rotate_bytes: int = ROTATE_BYTES):
        self.path = Path(experiment_dir) / LIVE_FILE
        self.rotate_bytes = rotate_bytes
        for old in (self.path, self.path.with_name(LIVE_FILE + ".1")):
            old.unlink(missing_ok=True)
        self.written = 0

    def append(self, record: dict) -> None:
        line = json.dumps(record) + "\n"
        if self.written and self.written + len(line) > self.rotate_bytes:
            os.replace(self.path, self.path.with_name(LIVE_FILE + ".1"))
            self.written = 0
        with open(self.path, "a") as f:
            f.write(line)
        self.written += len(line)


@dataclass
class Progress:
    """One progress record: what the runner printed on its progress line, as numbers."""

    t: float
    frames: int
    fps_10s: float | None = None
    fps_60s: float | None = None
    policy_lag: float | None = None
    policy_lag_max: float | None = None
    trajectory_age_p50_s: float | None = None
    trajectory_age_p95_s: float | None = None
    verdict: str | None = None
    objective: str | None = None  # the statistic `policies` reports: the true objective, or the population's
    policies: dict | None = None  # policy id -> {frames, objective, lag} (the runner's per-policy view)

    @classmethod
    def from_record(cls, record: dict) -> Progress:
        known = {k: v for k, v in record.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Feed:
    """Everything read so far: snapshots per component (in arrival order) and progress records."""

    snapshots: dict[str, list[Snapshot]] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)  # component -> node host, with --backend=ray
    progress: list[Progress] = field(default_factory=list)

    def add(self, record: dict) -> None:
        if "progress" in record:
            self.progress.append(Progress.from_record(record["progress"]))
        elif "component" in record:
            self.snapshots.setdefault(record["component"], []).append(snapshot_from_record(record))
            if record.get("node"):
                self.nodes[record["component"]] = node_label(record["node"])

    def trim(self, keep_s: float) -> None:
        """Forget what is older than `keep_s` before the newest record."""
        newest = self.newest_t()
        if newest is None:
            return
        for name, snaps in self.snapshots.items():
            self.snapshots[name] = [s for s in snaps if s.t >= newest - keep_s] or snaps[-1:]
        self.progress = [p for p in self.progress if p.t >= newest - keep_s] or self.progress[-1:]

    def newest_t(self) -> float | None:
        times = [s[-1].t for s in self.snapshots.values() if s] + [p.t for p in self.progress[-1:]]
        return max(times) if times else None


def node_label(node: dict) -> str:
    """`host 1a2b3c4d`: the host, and the start of Ray's node id (several nodes can share a host)."""
    return " ".join(part for part in (node.get("host", "?"), (node.get("ray_node_id") or "")[:8]) if part)


class Follower:
    """Reads a live feed as it grows: only the new bytes each time, across rotations; a new session starts over."""

    def __init__(self, experiment_dir: Path, keep_s: float = 120.0, name: str = LIVE_FILE):
        self.path = Path(experiment_dir) / name
        self.keep_s = keep_s
        self.feed = Feed()
        self.inode: int | None = None
        self.offset = 0
        self.partial = b""

    def poll(self) -> Feed:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return self.feed
        if self.inode is None:
            self._read_rest(self.path.with_name(self.path.name + ".1"), 0)
        elif stat.st_ino != self.inode:
            rotated = self.path.with_name(self.path.name + ".1")
            if rotated.exists() and rotated.stat().st_ino == self.inode:
                self._read_rest(rotated, self.offset)
            else:  # a new session
                self.feed = Feed()
            self.offset = 0
        elif stat.st_size < self.offset:  # truncated: a new session
            self.feed, self.offset = Feed(), 0
        self.inode = stat.st_ino
        self.offset = self._read_rest(self.path, self.offset)
        self.feed.trim(self.keep_s)
        return self.feed

    def _read_rest(self, path: Path, offset: int) -> int:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return offset
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()  # a line the runner is still writing
        for line in lines:
            if line.strip():
                self.feed.add(json.loads(line))
        return offset + len(data)


def read_records(experiment_dir: Path) -> list[dict]:
    """Every record of a finished run's feed (the rotated part first), for a replay."""
    out = []
    for path in (Path(experiment_dir) / (LIVE_FILE + ".1"), Path(experiment_dir) / LIVE_FILE):
        if path.exists():
            out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out
