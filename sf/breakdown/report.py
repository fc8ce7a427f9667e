"""The breakdown as a table (stdout), a JSON document and a stacked bar chart (PNG)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from sf.analysis.population import PolicyLine
from sf.breakdown.attribution import LAYERS, RowTimes
from sf.breakdown.calibration import EventCosts
from sf.breakdown.capture import LoopClock
from sf.breakdown.in_situ import InSituCalibration

LAYER_TITLES = {
    "simulator": "simulator",
    "python": "Python",
    "backend": "backend",
    "cuda_api": "CUDA API",
    "gpu": "GPU kernels",
}
LAYER_COLORS = {
    "simulator": "#4daf4a",
    "python": "#377eb8",
    "backend": "#ff7f00",
    "cuda_api": "#984ea3",
    "gpu": "#e41a1c",
}


@dataclass
class Breakdown:
    command: list[str]
    mode: str
    device: str
    costs: EventCosts  # what the correction subtracted: the micro-benchmarks' costs scaled by the calibration slices
    rows: dict[str, RowTimes]  # corrected, small rows folded
    components: dict[str, RowTimes]  # corrected
    window_s: float  # the profiled run's main loop, instrumented
    overhead_s: float  # instrumentation cost subtracted
    excess_s: float  # estimated overhead that did not fit in its column
    baseline_runs_s: list[float]  # the plain runs' main loops, one before and one after the profiled run (or none)
    env_frames: int
    baseline_env_frames: int | None
    kernel_busy_s: float
    nvml_busy_s: float | None
    window_clock: LoopClock | None = None  # the profiled run's event loop: main-thread CPU and core-wait seconds
    baseline_clock: LoopClock | None = None  # the same for the plain runs, their mean
    events: dict[str, int] = field(default_factory=dict)
    micro_costs: EventCosts | None = None  # the micro-benchmarks' costs, before the calibration slices
    calibration: InSituCalibration | None = None
    policies: list[PolicyLine] = field(default_factory=list)  # with several policies: each one's learner, objective

    @property
    def corrected_cpu_deviation(self) -> float | None:
        """The overhead check in CPU time, blind to off-CPU time (sleeps, I/O) and to a busy machine's core waits."""
        if self.baseline_clock is None or self.window_clock is None or not self.baseline_clock.cpu_s:
            return None
        return (self.window_clock.cpu_s - self.overhead_s) / self.baseline_clock.cpu_s - 1.0

    @property
    def unloaded_s(self) -> tuple[float, float] | None:
        """(corrected, uninstrumented) wall seconds less the time the main thread waited for a core: the overhead
        check as on a machine nobody else was using (the same as wall time when nobody was)."""
        clocks = (self.window_clock, self.baseline_clock)
        if self.baseline_s is None or any(c is None or c.core_wait_s is None for c in clocks):
            return None
        return (self.corrected_s - self.window_clock.core_wait_s, self.baseline_s - self.baseline_clock.core_wait_s)

    @property
    def corrected_unloaded_deviation(self) -> float | None:
        pair = self.unloaded_s
        return None if pair is None or pair[1] <= 0 else pair[0] / pair[1] - 1.0

    @property
    def baseline_s(self) -> float | None:
        """The uninstrumented main loop: the mean of the plain runs that bracket the profiled one."""
        return sum(self.baseline_runs_s) / len(self.baseline_runs_s) if self.baseline_runs_s else None

    @property
    def corrected_s(self) -> float:
        return self.window_s - self.overhead_s

    @property
    def columns_s(self) -> float:
        return sum(times.total for times in self.rows.values())

    def deviation(self, value: float) -> float | None:
        """Relative difference of `value` from the uninstrumented run's wall time."""
        return None if not self.baseline_s else value / self.baseline_s - 1.0

    def to_dict(self) -> dict:
        def row_dict(times: RowTimes) -> dict:
            out = {layer: getattr(times, layer) for layer in LAYERS}
            out.update(
                total_s=times.total,
                kernel_busy_s=times.kernel_busy_s,
                nvml_busy_s=times.nvml_busy_s,
                events={"scopes": times.scopes, "sims": times.sims, "ops": times.ops, "nested_ops": times.nested_ops},
            )
            return out

        return {
            "command": self.command,
            "mode": self.mode,
            "device": self.device,
            "event_costs_s": self.costs.to_dict(),
            "events": self.events,
            "micro_event_costs_s": self.micro_costs and self.micro_costs.to_dict(),
            "in_situ_calibration": self.calibration and self.calibration.to_dict(),
            "window_s": self.window_s,
            "overhead_s": self.overhead_s,
            "overhead_excess_s": self.excess_s,
            "corrected_s": self.corrected_s,
            "columns_sum_s": self.columns_s,
            "uninstrumented_s": self.baseline_s,
            "uninstrumented_runs_s": self.baseline_runs_s,
            "corrected_vs_uninstrumented": self.deviation(self.corrected_s),
            "columns_vs_uninstrumented": self.deviation(self.columns_s),
            "window_clock": self.window_clock and asdict(self.window_clock),
            "uninstrumented_clock": self.baseline_clock and asdict(self.baseline_clock),
            "corrected_cpu_vs_uninstrumented": self.corrected_cpu_deviation,
            "corrected_vs_uninstrumented_less_core_wait": self.corrected_unloaded_deviation,
            "env_frames": self.env_frames,
            "uninstrumented_env_frames": self.baseline_env_frames,
            "kernel_busy_s": self.kernel_busy_s,
            "nvml_busy_s": self.nvml_busy_s,
            "layers": list(LAYERS),
            "rows": {name: row_dict(times) for name, times in self.rows.items()},
            "components": {name: row_dict(times) for name, times in self.components.items()},
            "policies": [asdict(line) for line in self.policies],
        }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f} %"


def table(result: Breakdown) -> str:
    gpu = result.device != "cpu"
    width = max([len(name) for name in result.rows] + [20])
    head = f"{'operation':<{width}} {'wall s':>8} {'share':>6} " + " ".join(
        f"{LAYER_TITLES[layer]:>11}" for layer in LAYERS
    )
    if gpu:
        head += f" {'kernel busy':>11}"
    lines = [
        f"cross-stack breakdown ({result.mode} mode, {result.device}), seconds of the main loop",
        head,
        "-" * len(head),
    ]
    total = result.columns_s or 1.0
    for name, times in result.rows.items():
        line = f"{name:<{width}} {times.total:8.3f} {times.total / total:6.1%} " + " ".join(
            f"{getattr(times, layer):11.3f}" for layer in LAYERS
        )
        if gpu:
            line += f" {times.kernel_busy_s:11.3f}"
        lines.append(line)
    lines.append("-" * len(head))
    sums = {layer: sum(getattr(t, layer) for t in result.rows.values()) for layer in LAYERS}
    lines.append(
        f"{'total':<{width}} {result.columns_s:8.3f} {1:6.1%} " + " ".join(f"{sums[layer]:11.3f}" for layer in LAYERS)
    )
    lines.append(f"{'share':<{width}} {'':8} {'':6} " + " ".join(f"{sums[layer] / total:11.1%}" for layer in LAYERS))
    lines.append("")
    c = result.costs
    lines.append(
        f"instrumentation cost per event in tight loops: scope range {c.scope_s * 1e6:.2f} us, simulator "
        f"range {c.sim_s * 1e6:.2f} us, op {c.op_s * 1e6:.2f} us (of which {c.op_inside_s * 1e6:.2f} us "
        "inside it)"
    )
    if result.calibration is not None:
        cal = result.calibration
        added = ", ".join(
            f"{p.frames:,} frames +{p.added_s:.3f} s (priced {p.priced.total_s:.3f} s)" for p in cal.pairs
        )
        lines.append(
            f"in the training (plain and profiled calibration slices: {added}): the Python side of each "
            f"event x{c.python_scale:.2f}" + (f" ({cal.note})" if cal.note else "")
        )
    lines.append("events: " + ", ".join(f"{k} {v:,}" for k, v in result.events.items()))
    lines.append(
        f"instrumented main loop {result.window_s:.3f} s - instrumentation {result.overhead_s:.3f} s "
        f"= corrected {result.corrected_s:.3f} s"
    )
    if result.baseline_s is not None:
        runs = " and ".join(f"{t:.3f}" for t in result.baseline_runs_s)
        lines.append(
            f"uninstrumented main loop {result.baseline_s:.3f} s (mean of {runs} s, before and after; "
            f"{result.baseline_env_frames:,} frames; "
            f"profiled run {result.env_frames:,}): corrected total {_pct(result.deviation(result.corrected_s))}, "
            f"columns sum {_pct(result.deviation(result.columns_s))}"
        )
        if result.unloaded_s is not None:
            corrected, baseline = result.unloaded_s
            lines.append(
                f"less the time the main thread waited for a core (a busy machine's share): uninstrumented "
                f"{baseline:.3f} s, corrected {corrected:.3f} s: "
                f"{_pct(result.corrected_unloaded_deviation)}"
            )
        if result.corrected_cpu_deviation is not None:
            lines.append(
                f"main-thread CPU: uninstrumented {result.baseline_clock.cpu_s:.3f} s, instrumented "
                f"{result.window_clock.cpu_s:.3f} s - instrumentation = {_pct(result.corrected_cpu_deviation)}"
            )
    if result.policies:
        lines.append(f"policies, best first by {result.policies[0].objective}:")
        for line in result.policies:
            times = result.components.get(line.learner)
            spent = f" ({times.total:.3f} s of the loop)" if times is not None else ""
            lines.append(f"  {line.text().replace(line.learner, line.learner + spent, 1)}")
    if result.excess_s > 0.01 * result.window_s:
        lines.append(
            f"note: {result.excess_s:.3f} s of the estimated cost did not fit in its column "
            "(the calibration overestimates this workload's per-event cost)"
        )
    if gpu:
        lines.append("")
        lines.append("GPU: kernel-busy time against what NVML (nvidia-smi) reports for the same intervals")
        for name, times in result.components.items():
            nvml = "n/a" if times.nvml_busy_s is None else f"{times.nvml_busy_s:.3f} s"
            lines.append(
                f"  {name:<{width}} CPU time {times.total:8.3f} s  kernel busy {times.kernel_busy_s:8.3f} s"
                f"  NVML busy {nvml}"
            )
        nvml = "n/a" if result.nvml_busy_s is None else f"{result.nvml_busy_s / result.window_s:.1%}"
        lines.append(
            f"  whole window: kernels busy {result.kernel_busy_s / result.window_s:.1%} of the time, "
            f"NVML utilization {nvml}"
        )
    return "\n".join(lines)


def write_chart(result: Breakdown, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result.rows)[::-1]
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(names) + 1.6))
    left = [0.0] * len(names)
    for layer in LAYERS:
        values = [getattr(result.rows[name], layer) for name in names]
        if not any(values):
            continue
        ax.barh(names, values, left=left, color=LAYER_COLORS[layer], label=LAYER_TITLES[layer])
        left = [a + b for a, b in zip(left, values)]
    ax.set_xlabel("seconds (instrumentation subtracted)")
    ax.set_title(f"Cross-stack breakdown, {result.mode} mode on {result.device}: {result.corrected_s:.2f} s")
    ax.legend(loc="lower right", fontsize="small")
    ax.tick_params(axis="y", labelsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
