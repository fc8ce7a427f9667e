"""The profile side of the runner's outputs: every component's tree as it arrives (kept for profile.json, appended to
profile_series.jsonl), its top-level keys and CPU share as TensorBoard scalars, and the trees printed at exit.

Plain objects: the runner hands them what its messages carry and writes what they return.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sf.profiling import resources
from sf.profiling.series import append_snapshot, snapshot_record
from sf.utils.roles import profile_order
from sf.utils.timing import Timing

log = logging.getLogger("sf")


class ProfileRecords:
    """profile.json in the making: `{component: {name, pid, tree, resources, activity, node, transfer}}`."""

    def __init__(self, series_path: Path):
        self.series_path = series_path
        self.series_failed = False  # an append failed (a full disk): the series stops there, the run goes on
        self.profiles: dict[str, dict] = {}
        self.nodes: dict[str, dict] = {}  # component -> {host, ray_node_id}, with --backend=ray
        self.node_stats: dict[str, dict] = {}  # node agent -> what it sent and received

    def record(
        self,
        name: str,
        pid: int,
        tree: dict,
        res: dict | None,
        activity: dict | None,
        final: bool,
        t: float,
        frames: int,
        series: bool = True,
    ) -> dict:
        """Keep a component's tree (final, or a periodic snapshot) and, with `series`, append it to the series with
        the runner's clock `t` and the session's `frames` at arrival, so a report can take a steady-state window and
        `--compare` can tell a change from interval-to-interval noise. Returns the series record."""
        entry = {"name": name, "pid": pid, "tree": tree}
        if name in self.nodes:
            entry["node"] = self.nodes[name]
        if name in self.node_stats:
            entry["transfer"] = self.node_stats[name]
        if res is not None:
            entry["resources"] = res
        if activity is not None:
            entry["activity"] = activity
        self.profiles[name] = entry
        record = snapshot_record(t, frames, entry, final)
        if series and not self.series_failed:
            try:
                append_snapshot(self.series_path, record)
            except OSError as exc:
                self.series_failed = True
                log.error("cannot append to %s (%s): the profile series stops here", self.series_path, exc)
        return record

    def set_transfer(self, name: str, stats: dict) -> None:
        self.node_stats[name] = stats
        if name in self.profiles:
            self.profiles[name]["transfer"] = stats

    def trees_text(self) -> list[str]:
        """Every tree in contract order, each under its resources header where it has one."""
        blocks = []
        for name in sorted(self.profiles, key=profile_order):
            entry = self.profiles[name]
            if "resources" in entry:
                blocks.append(resources.header(name, entry["resources"], entry.get("activity")))
            blocks.append(Timing.from_dict(f"{name} profile", entry["tree"]).tree_str())
        return blocks


class TimingScalars:
    """`timing/<component>/<key>`: cumulative seconds of each top-level key, and `cpu_percent` since the component's
    last snapshot. TensorBoard allows no spaces in tags: "Learner 0" is written "Learner_0"."""

    def __init__(self):
        self.cpu_marks: dict[str, tuple[float, float]] = {}  # component -> (wall_s, cpu_s) at its last snapshot

    def scalars(self, name: str, level: dict, res: dict | None) -> dict[str, float]:
        tag = name.replace(" ", "_")
        scalars = {f"timing/{tag}/{key}": entry["time"] for key, entry in level.items()}
        if res is not None:
            wall, cpu = res["wall_s"], res["cpu_user_s"] + res["cpu_system_s"]
            last_wall, last_cpu = self.cpu_marks.get(name, (0.0, 0.0))
            if wall > last_wall:
                scalars[f"timing/{tag}/cpu_percent"] = 100.0 * (cpu - last_cpu) / (wall - last_wall)
            self.cpu_marks[name] = (wall, cpu)
        return scalars
