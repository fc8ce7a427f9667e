"""The device check's two profiles of sf: torch.profiler windows on the learner and inference processes of a parallel
run, read per Timing key and set against NVML over the same interval; and the cross-stack breakdown of a serial run
(`python -m sf.profile breakdown`), read from its `breakdown.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sf.analysis.torch_trace import TraceSummary, busy_s, merge_intervals, nvml_busy_s, read_trace
from sf.bench.runs import stop_process_group
from sf.breakdown.nvml import open_sampler
from sf.profiling.activity import LOOP_OVERHEAD, WAIT_PREFIX
from sf.profiling.ranges import range_name

TRACE_SUFFIX = ".pt.trace.json"


def profile_run(run: Callable[[], dict], on_gpu: bool) -> dict:
    """`run()` trains with the torch backend on and returns its status, command and experiment folder; NVML is
    sampled around it. Each process's trace is read back per Timing key."""
    sampler = open_sampler() if on_gpu else None
    if sampler is not None:
        sampler.start()
    try:
        result = run()
    finally:
        if sampler is not None:
            sampler.stop()
    samples = sampler.samples if sampler is not None else []
    experiment = Path(result["experiment_dir"])
    trees = _trees(experiment / "profile.json")
    summaries: dict[str, TraceSummary] = {}
    processes = {}
    for path in sorted((experiment / "profiling").glob(f"*{TRACE_SUFFIX}")):
        name = path.name.split(".", 1)[0]  # Learner_0.steps60-99.pt.trace.json -> Learner_0
        summary = summaries[name] = read_trace(path)
        expected = {  # every component of the traced process: the learner's batcher too, all of them in serial mode
            range_name(component, key)
            for component, (pid, keys) in trees.items()
            if pid in summary.pids
            for key in keys
        }
        missing = sorted(key for key in expected if key not in summary.keys)
        processes[name] = {
            **summary.to_dict(),
            "trace": str(path),
            "nvml_busy_s": nvml_busy_s(samples, summary.start_ns, summary.end_ns),
            "keys_in_tree": len(expected),
            "keys_in_trace": len(expected) - len(missing),
            "keys_missing": missing,
        }
    result["processes"] = processes
    result["nvml_samples"] = len(samples)
    if summaries:
        result["together"] = together(list(summaries.values()), samples)
    return result


def _trees(profile_json: Path) -> dict[str, tuple[int, list[str]]]:
    """Every component's pid and Timing scopes' key paths, from the run's profile.json ({} when it wrote none).
    Waits and `loop_overhead` are the event loop's accounting, written into the tree rather than timed by a scope,
    so they have no range and are left out."""
    if not profile_json.exists():
        return {}
    paths: dict[str, tuple[int, list[str]]] = {}

    def walk(tree: dict, prefix: str, into: list[str]) -> None:
        for key, node in tree.items():
            if key.startswith(WAIT_PREFIX) or key == LOOP_OVERHEAD:
                continue
            path = f"{prefix}{key}"
            into.append(path)
            walk(node.get("children", {}), f"{path}/", into)

    for component, entry in json.loads(profile_json.read_text()).items():
        paths[component] = (entry.get("pid"), [])
        walk(entry.get("tree", {}), "", paths[component][1])
    return paths


def together(summaries: list[TraceSummary], samples: list[tuple[int, float]]) -> dict:
    """GPU busy time of all the traces' kernels and NVML's figure over the interval every trace covers (the profiled
    processes are the GPU's only users, so there the traces hold every kernel), and what tells the two apart."""
    lo = max(s.start_ns for s in summaries)
    hi = min(s.end_ns for s in summaries)
    if hi <= lo:
        return {"window_s": 0.0, "gpu_busy_s": 0.0, "nvml_busy_s": None, "note": "the traces do not overlap"}
    merged = merge_intervals([interval for s in summaries for interval in s.busy])
    inside = [(max(a, lo), min(b, hi)) for a, b in merged if b > lo and a < hi]
    window = (hi - lo) / 1e9
    gpu = busy_s(merged, lo, hi)
    nvml = nvml_busy_s(samples, lo, hi)
    return {"window_s": window, "gpu_busy_s": gpu, "nvml_busy_s": nvml, "note": explain(window, gpu, nvml, inside)}


def explain(window_s: float, gpu_s: float, nvml_s: float | None, busy: list[tuple[int, int]]) -> str:
    """Why NVML's utilization and the traces' kernel time differ, in a few sentences, from what the traces show."""
    if nvml_s is None:
        return "No NVML samples (no GPU, or no nvidia-ml-py): only the traces' figure."
    if not busy:
        return "The traces hold no kernels in this interval."
    stretches = (
        f"The GPU ran kernels in {len(busy):,} stretches ({len(busy) / window_s:,.0f} a second, "
        f"{gpu_s / len(busy) * 1e6:,.1f} us on average): {gpu_s / window_s:.0%} of the {window_s:.2f} s by the traces, "
        f"{nvml_s / window_s:.0%} by NVML."
    )
    how = (
        " NVML gives the share of each of its sample periods (1/6 s to 1 s, the driver's) in which a kernel of any "
        "process ran, read here every 50 ms, so it averages over periods that reach past the interval and lag it; the "
        "traces time every kernel of the profiled processes to the microsecond. Neither says how much of the GPU a "
        "kernel occupies: one small kernel at a time reads as fully busy in both."
    )
    if nvml_s > gpu_s:
        side = " NVML reads higher: its periods take in busy time around the interval, and kernels of any process."
    else:
        side = " NVML reads lower: its periods take in idle time around the interval (start-up, the run's end)."
    return stretches + how + side


def breakdown_run(
    module: str, flags: list[str], train_dir: Path, calibration_pairs: int, deadline: float, logs: Path
) -> dict:
    """`python -m sf.profile breakdown` of `module` with `flags`, stopped at `deadline`; its figures from
    `<train_dir>/breakdown/profiling/breakdown.json`."""
    cmd = [
        sys.executable,
        "-m",
        "sf.profile",
        "breakdown",
        "--calibration_pairs",
        str(calibration_pairs),
        "--",
        module,
        *flags,
        f"--train_dir={train_dir}",
        "--experiment=breakdown",
        "--restart_behavior=overwrite",
    ]
    logs.mkdir(parents=True, exist_ok=True)
    result: dict = {"command": " ".join(cmd[1:])}
    with open(logs / "breakdown.log", "w") as log:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop_process_group(proc, 10.0)
            result["status"] = "stopped at the step's deadline"
            return result
        except BaseException:
            stop_process_group(proc, 10.0)
            raise
    path = train_dir / "breakdown" / "profiling" / "breakdown.json"
    if proc.returncode != 0 or not path.exists():
        result["status"] = f"failed (exit {proc.returncode}; log {logs / 'breakdown.log'})"
        return result
    return {**result, "status": "ok", **breakdown_figures(json.loads(path.read_text())), "json": str(path)}


def breakdown_figures(doc: dict) -> dict:
    """The figures of a `breakdown.json` the check reports: the overhead check, the layers' columns (CUDA API and
    GPU kernels among them) summed over the rows, and kernel-busy time beside NVML."""
    layers = {layer: sum(row[layer] for row in doc["rows"].values()) for layer in doc["layers"]}
    keys = (
        "device",
        "window_s",
        "corrected_s",
        "uninstrumented_s",
        "corrected_vs_uninstrumented",
        "corrected_vs_uninstrumented_less_core_wait",
        "corrected_cpu_vs_uninstrumented",
        "kernel_busy_s",
        "nvml_busy_s",
        "env_frames",
    )
    return {**{key: doc.get(key) for key in keys}, "layers_s": layers}
