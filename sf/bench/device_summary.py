"""The device check's results as they come in: `summary.json` (everything measured) and `summary.md` (the machine,
each target against its bar, and the tables), both rewritten whole after every result, through a temporary file
and a rename, so a reader or a killed run never sees half a file.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

RATIO_BAR = 1.5  # sf over Sample Factory at every scaling point
SCALING_BAR = 0.8  # of linear scaling from the smallest point
CEILING_BOUND = 0.8  # a run at this share of the simulator ceiling is bounded by it
BREAKDOWN_BAR = 0.05  # corrected total against the uninstrumented run


@dataclass(frozen=True)
class Target:
    name: str
    bar: str
    measured: str
    verdict: str  # "met", "short", "bounded: ...", "not measured", "see note"
    why: str = ""


class SummaryFile:
    def __init__(self, out: Path, machine: dict, settings: dict):
        self.json_path = out / "summary.json"
        self.md_path = out / "summary.md"
        self.data: dict = {
            "status": "running",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "elapsed_s": 0.0,
            "machine": machine,
            "settings": settings,
            "notes": [],
        }
        self.write()

    def put(self, section: str, key: str | None, value) -> None:
        if key is None:
            self.data[section] = value
        else:
            self.data.setdefault(section, {})[key] = value
        self.write()

    def note(self, text: str) -> None:
        self.data["notes"].append(text)
        self.write()

    def finish(self, status: str, elapsed_s: float) -> None:
        self.data["status"] = status
        self.data["elapsed_s"] = elapsed_s
        self.write()

    def write(self) -> None:
        self.data["targets"] = [target.__dict__ for target in targets(self.data)]
        _replace(self.json_path, json.dumps(self.data, indent=2, default=str))
        _replace(self.md_path, markdown(self.data))


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _fps(run: dict | None) -> float | None:
    """The run's FPS over its steady window, or over the whole run where it ended before it had one."""
    if not run:
        return None
    return run["fps"] if run.get("fps") is not None else run.get("fps_whole_run")


def _fps_cell(run: dict | None) -> str:
    fps = _fps(run)
    if fps is None:
        return "-" if not run else run["status"]
    return f"{fps:,.0f}" + (" (whole run)" if run.get("fps") is None else "")


def _ceiling(data: dict, suite: str) -> float | None:
    return (data.get("ceiling", {}).get(suite) or {}).get("fps")


def scaling_points(data: dict) -> list[dict]:
    return sorted(data.get("scaling", {}).values(), key=lambda point: point["workers"])


def targets(data: dict) -> list[Target]:
    """Every target of the check with what was measured for it so far."""
    found: list[Target] = []
    points = scaling_points(data)
    for point in points:
        sf_fps, other = _fps(point.get("sf")), _fps(point.get("sample_factory"))
        name = f"sf / Sample Factory, {point['workers']} workers"
        if sf_fps is None or other is None:
            missing = "sf" if sf_fps is None else "Sample Factory"
            found.append(Target(name, f">= {RATIO_BAR}x", "-", "not measured", f"no {missing} figure"))
        else:
            ratio = sf_fps / other
            whole = [side for side in ("sf", "sample_factory") if point[side].get("fps") is None]
            why = "whole-run figures (no steady window)" if whole else ""
            verdict = "met" if ratio >= RATIO_BAR else "short"
            found.append(Target(name, f">= {RATIO_BAR}x", f"{ratio:.2f}x", verdict, why))
    found += _scaling_targets(data, points)
    found += _benchmark_targets(data)
    found += _breakdown_targets(data)
    found += _gpu_busy_targets(data)
    return found


def _scaling_targets(data: dict, points: list[dict]) -> list[Target]:
    measured = [p for p in points if _fps(p.get("sf")) is not None]
    if len(measured) < 2:
        return []
    base = measured[0]
    k0, fps0 = base["workers"], _fps(base["sf"])
    ceiling = _ceiling(data, data["settings"]["scaling_suite"])
    found = []
    for point in measured[1:]:
        k, fps = point["workers"], _fps(point["sf"])
        bar = SCALING_BAR * k / k0 * fps0
        share = f", {fps / ceiling:.0%} of the ceiling" if ceiling else ""
        verdict = point.get("sf_verdict")
        text = f"{fps:,.0f} FPS = {fps / bar:.2f} of the bar{share}"
        name = f"sf scaling, {k} workers"
        bar_text = f">= {SCALING_BAR} x {k}/{k0} x {fps0:,.0f} = {bar:,.0f} FPS"
        if fps >= bar:
            found.append(Target(name, bar_text, text, "met"))
        elif ceiling and fps >= CEILING_BOUND * ceiling:
            found.append(Target(name, bar_text, text, "bounded: simulator ceiling"))
        elif verdict == "learner":
            found.append(Target(name, bar_text, text, "bounded: learner", "the profile report names the learner"))
        else:
            why = f"the profile report: {verdict}-bound" if verdict else "no verdict from the profile report"
            found.append(Target(name, bar_text, text, "short", why))
    return found


def _benchmark_targets(data: dict) -> list[Target]:
    found = []
    for suite, result in data.get("benchmark", {}).items():
        sf_fps, other = _fps(result.get("sf")), _fps(result.get("sample_factory"))
        name = f"{suite} at {result['workers']} workers: both measured over the same window"
        if sf_fps is not None and other is not None:
            found.append(Target(name, "a figure for each", f"sf / Sample Factory {sf_fps / other:.2f}x", "met"))
        else:
            missing = [side for side, fps in (("sf", sf_fps), ("Sample Factory", other)) if fps is None]
            found.append(Target(name, "a figure for each", "-", "not measured", f"no figure: {', '.join(missing)}"))
    return found


def _breakdown_targets(data: dict) -> list[Target]:
    result = data.get("breakdown")
    if not result:
        return []
    name = "breakdown: corrected total against the uninstrumented run"
    deviation = result.get("corrected_vs_uninstrumented")
    if deviation is None:
        return [Target(name, f"within {BREAKDOWN_BAR:.0%}", "-", "not measured", result.get("status", ""))]
    verdict = "met" if abs(deviation) <= BREAKDOWN_BAR else "short"
    return [Target(name, f"within {BREAKDOWN_BAR:.0%}", f"{deviation:+.1%}", verdict)]


def _gpu_busy_targets(data: dict) -> list[Target]:
    profile = data.get("gpu_profile") or {}
    both = profile.get("together")
    if not both or both.get("window_s", 0) <= 0:
        return []
    window = both["window_s"]
    nvml = both.get("nvml_busy_s")
    measured = f"trace {both['gpu_busy_s'] / window:.1%}, NVML " + ("n/a" if nvml is None else f"{nvml / window:.1%}")
    return [Target("GPU busy (trace) beside NVML utilization", "side by side", measured, "see note", both["note"])]


def _cell(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def markdown(data: dict) -> str:
    machine = data["machine"]
    settings = data["settings"]
    lines = [
        "# sf device check",
        "",
        f"{data['date']}, status **{data['status']}** after {data['elapsed_s']:.0f} s.",
        f"Machine: GPU {machine.get('gpu')} (driver {machine.get('driver')}), {machine.get('cpu')}, "
        f"{machine.get('cores')} cores; torch {machine.get('torch')}, CUDA {machine.get('cuda')}; "
        f"device `{settings['device']}`.",
        "",
        "## Targets",
        "",
        "| target | bar | measured | verdict | why |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {t['name']} | {t['bar']} | {t['measured']} | {t['verdict']} | {t['why']} |" for t in data["targets"]]
    lines += _scaling_table(data)
    lines += _benchmark_table(data)
    lines += _profile_section(data)
    lines += _breakdown_section(data)
    lines += _batched_section(data)
    if data["notes"]:
        lines += ["", "## Notes", "", *[f"- {note}" for note in data["notes"]]]
    return "\n".join(lines) + "\n"


def _scaling_table(data: dict) -> list[str]:
    points = scaling_points(data)
    if not points:
        return []
    suite = data["settings"]["scaling_suite"]
    ceiling = _ceiling(data, suite)
    window = data["settings"]["scaling_window"]
    lines = [
        "",
        f"## Scaling: the `{suite}` suite's command",
        "",
        f"`{data['settings']['commands']['scaling']}` at each point's `--num_workers`; FPS over the steady window "
        f"({window['warmup_s']:.0f} s after the first frames, {window['length_s']:.0f} s long). "
        f"Simulator ceiling: {_cell(ceiling)} frames/s.",
        "",
        "| workers | sf FPS | Sample Factory FPS | ratio | sf / ceiling | Sample Factory / ceiling | sf verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for point in points:
        sf_fps, other = _fps(point.get("sf")), _fps(point.get("sample_factory"))
        ratio = sf_fps / other if sf_fps and other else None
        shares = [fps / ceiling if fps and ceiling else None for fps in (sf_fps, other)]
        verdict = point.get("sf_verdict")
        lines.append(
            f"| {point['workers']} | {_fps_cell(point.get('sf'))} | {_fps_cell(point.get('sample_factory'))} | "
            f"{_cell(ratio, '{:.2f}x')} | {_cell(shares[0], '{:.0%}')} | {_cell(shares[1], '{:.0%}')} | "
            f"{f'{verdict}-bound' if verdict else '-'} |"
        )
    return lines


def _benchmark_table(data: dict) -> list[str]:
    lines = []
    for suite, result in data.get("benchmark", {}).items():
        ceiling = _ceiling(data, suite)
        lines += [
            "",
            f"## The `{suite}` suite at {result['workers']} workers",
            "",
            f"`{data['settings']['commands']['benchmark']}`. Simulator ceiling: {_cell(ceiling)} frames/s.",
            "",
            "| | FPS | measured between (s after start) | first frames at (s) | status |",
            "| --- | --- | --- | --- | --- |",
        ]
        for side, label in (("sf", "sf"), ("sample_factory", "Sample Factory")):
            run = result.get(side)
            if not run:
                continue
            span = run.get("measured_s")
            between = f"{span[0]:.0f}-{span[1]:.0f}" if span else "-"
            lines.append(
                f"| {label} | {_fps_cell(run)} | {between} | {_cell(run.get('first_frames_s'), '{:.0f}')} "
                f"| {run['status']} |"
            )
    return lines


def _profile_section(data: dict) -> list[str]:
    profile = data.get("gpu_profile")
    if not profile:
        return []
    lines = ["", "## Profile: torch.profiler on the learner and inference", "", f"Run: {profile['status']}."]
    for name, process in profile.get("processes", {}).items():
        nvml = process.get("nvml_busy_s")
        lines += [
            "",
            f"### {name}",
            "",
            f"Trace `{process['trace']}`: {process['window_s']:.2f} s, {process['kernels']:,} kernels "
            f"({process['kernel_s']:.3f} s), GPU busy {process['gpu_busy_s']:.3f} s, NVML "
            f"{'n/a' if nvml is None else f'{nvml:.3f} s'}; Timing keys as ranges: {process['keys_in_trace']} of "
            f"{process['keys_in_tree']} in the tree"
            + (f" (not in the window: {', '.join(process['keys_missing'])})" if process["keys_missing"] else "")
            + ".",
            "",
            "| Timing key | calls | CPU s | kernel s (own) | kernel s (with children) |",
            "| --- | --- | --- | --- | --- |",
        ]
        keys = sorted(process["keys"].items(), key=lambda item: (-item[1]["kernel_s"], -item[1]["cpu_s"]))
        for key, times in keys[:15]:
            lines.append(
                f"| `{key}` | {times['calls']} | {times['cpu_s']:.3f} | {times['kernel_self_s']:.3f} | "
                f"{times['kernel_s']:.3f} |"
            )
    both = profile.get("together")
    if both:
        nvml = both.get("nvml_busy_s")
        lines += [
            "",
            f"Where the traces overlap ({both['window_s']:.2f} s): GPU busy from the traces "
            f"{both['gpu_busy_s']:.3f} s, NVML {'n/a' if nvml is None else f'{nvml:.3f} s'}. {both['note']}",
        ]
    return lines


def _breakdown_section(data: dict) -> list[str]:
    result = data.get("breakdown")
    if not result:
        return []
    lines = ["", "## Breakdown (serial mode)", "", f"Run: {result['status']}; `{result.get('json')}`."]
    if result.get("corrected_s") is None:
        return lines
    deviation = result.get("corrected_vs_uninstrumented")
    lines += [
        "",
        f"Main loop instrumented {result['window_s']:.3f} s, corrected {result['corrected_s']:.3f} s, uninstrumented "
        f"{_cell(result.get('uninstrumented_s'), '{:.3f}')} s: {_cell(deviation, '{:+.1%}')}. "
        f"Columns: " + ", ".join(f"{layer} {seconds:.3f} s" for layer, seconds in result["layers_s"].items()) + ". "
        f"Kernels busy {result['kernel_busy_s']:.3f} s, NVML {_cell(result.get('nvml_busy_s'), '{:.3f}')} s.",
    ]
    return lines


def _batched_section(data: dict) -> list[str]:
    result = (data.get("batched") or {}).get("tensor_pendulum")
    if not result:
        return []
    return [
        "",
        "## Batched sampling (torch Pendulum, serial mode)",
        "",
        f"{result['copies']} copies on `{result['env_device']}`: the bare env {result['bare_copies_per_s']:,.0f} "
        f"copies/s; training {_cell(result.get('fps_steady'))} FPS (run status {result['status']}); per env step "
        f"{result['obs_copies_per_step']:.2f} observation copies ({', '.join(result['obs_copy_kinds']) or 'none'}), "
        f"{result['obs_host_copies_per_step']:.2f} of them into host memory.",
    ]
