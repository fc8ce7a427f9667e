"""One "profile" dashboard in TensorBoard's Custom Scalars tab, written by the run, so nobody arranges charts.

The run writes the layout once into policy 0's event file (`SummaryWriter.add_custom_scalars`); its charts pick
their lines by regular expression, so every component of any run fits without knowing the names in advance. The
shares it plots come from `share_scalars`: each component's busy, waiting and loop-overhead share of its loop's
time over the last `--experiment_summaries_interval`, and each wait's share, as `profile/<component>/<what>`.
"""

from __future__ import annotations

CATEGORY = "profile"


def layout() -> dict:
    """{category: {chart title: ["Multiline", [tag regexes]]}}, the shape tensorboardX's add_custom_scalars takes."""
    return {
        CATEGORY: {
            "FPS (last 10 s and last 60 s)": ["Multiline", [r"perf/fps$", r"perf/fps_60s$"]],
            "busy share of each component": ["Multiline", [r"profile/.*/busy$"]],
            "waiting share of each component": ["Multiline", [r"profile/.*/wait$"]],
            "loop overhead share of each component": ["Multiline", [r"profile/.*/loop$"]],
            "each wait's share (whom a component waits for)": ["Multiline", [r"profile/.*/wait_.*"]],
            "CPU of each process (100 = one core)": ["Multiline", [r"timing/.*/cpu_percent$"]],
            "policy lag (versions)": ["Multiline", [r"train/policy_lag$", r"train/policy_lag_max$"]],
            "trajectory age (s)": ["Multiline", [r"perf/trajectory_age_p50_s$", r"perf/trajectory_age_p95_s$"]],
        }
    }


class ShareScalars:
    """Shares of each component's time since its previous snapshot, from the cumulative seconds of its tree."""

    def __init__(self):
        self.previous: dict[str, tuple[float, dict[str, float]]] = {}

    def scalars(self, name: str, level: dict, lifetime_s: float | None) -> dict[str, float]:
        """level: the component's top level ({key: {time, children}}); lifetime_s: its loop's life so far."""
        if lifetime_s is None:
            return {}
        seconds = {key: node["time"] for key, node in level.items()}
        before = self.previous.get(name)
        self.previous[name] = (lifetime_s, seconds)
        if before is None or lifetime_s <= before[0]:
            return {}
        span = lifetime_s - before[0]
        delta = {key: max(0.0, s - before[1].get(key, 0.0)) / span for key, s in seconds.items()}
        tag = f"profile/{name.replace(' ', '_')}"
        waits = {key: share for key, share in delta.items() if key.startswith("wait_")}
        loop = delta.get("loop_overhead", 0.0)
        busy = sum(share for key, share in delta.items() if key not in waits and key != "loop_overhead")
        out = {
            f"{tag}/busy": min(1.0, busy),
            f"{tag}/wait": min(1.0, sum(waits.values())),
            f"{tag}/loop": min(1.0, loop),
        }
        out.update({f"{tag}/{key}": min(1.0, share) for key, share in waits.items()})
        return out
