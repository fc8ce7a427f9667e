"""`python -m sf.profile breakdown -- <training flags>`: where the time of each operation goes across the stack.

Runs the given training in this process, in serial mode (every component on the main thread, so one profiler
sees all of it and the main thread is the whole critical path): a one-step warm-up that pays for lazy imports and
first calls, the per-event cost measurement (micro-benchmarks, `sf.breakdown.calibration`, then short slices of the
same training plain and profiled, `sf.breakdown.in_situ`), the full length plain, then the full length under
torch.profiler with a range on every Timing scope and around the env's own calls, then the full length plain again
(the two plain runs bracket the profiled one, so the machine's drift in speed cancels out of the uninstrumented
figure they give). Each instant of the profiled main loop goes to one operation and one layer (simulator, Python,
framework backend, CUDA API, GPU kernels; `sf.breakdown.attribution`), and the measured per-event cost is
subtracted. Writes `profiling/breakdown.json` and `profiling/breakdown.png` in the experiment folder and prints the
table.

The training module is the first word after `--` when it is not a flag (`sf_examples.vizdoom.train_vizdoom`);
otherwise it is the training module of the env family `--env` belongs to (`sf.envs.families`); `--envpool=True`
steps an Atari or MuJoCo run's envs through EnvPool, whose calls are then the simulator rows.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from sf.analysis.population import policy_lines
from sf.breakdown import in_situ
from sf.breakdown.attribution import attribute
from sf.breakdown.calibration import measure_event_costs
from sf.breakdown.capture import SIM_RANGE, WINDOW_RANGE, Capture, LoopClock, event_loop_clocks, mean_clock, total_clock
from sf.breakdown.correction import Overhead, corrected, fold_small_rows, merge_rollout_workers, row_overhead
from sf.breakdown.nvml import open_sampler
from sf.breakdown.report import Breakdown, table, write_chart
from sf.breakdown.spans import SCOPE, Span, spans_from_kineto
from sf.envs.families import family_of

# one thread steps the envs: the attribution follows the main thread, and the simulator ranges must lie on it
SERIAL_FLAGS = ("--serial_mode=True", "--async_rl=False", "--env_threads=1")


def training_module(flags: list[str]) -> tuple[str, list[str]]:
    """(module, flags): an explicit module first, else the training module of the family `--env` belongs to."""
    if flags and not flags[0].startswith("-"):
        return flags[0], flags[1:]
    return family_of(_flag_value(flags, "env") or "").train_module, flags


def _flag_value(flags: list[str], name: str) -> str | None:
    value = None
    for i, flag in enumerate(flags):
        if flag.startswith(f"--{name}="):
            value = flag.split("=", 1)[1]
        elif flag == f"--{name}" and i + 1 < len(flags):
            value = flags[i + 1]
    return value


def run_training(module: str, flags: list[str]) -> int:
    """The example's own entry point, in this process; a bad flag exits 2 before anything starts."""
    try:
        return importlib.import_module(module).main(flags)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


def _main_loop_s(experiment_dir: Path) -> tuple[float, int]:
    profile = json.loads((experiment_dir / "profile.json").read_text())
    summary = json.loads((experiment_dir / "summary.json").read_text())
    main_loop = profile["Runner"]["tree"]["main_loop"]["time"]
    return float(main_loop), int(sum(summary["env_frames"].values()))


def _window(spans: list[Span]) -> Span:
    windows = [s for s in spans if s.kind == SCOPE and s.name == WINDOW_RANGE]
    if not windows:
        raise RuntimeError("the profiled run recorded no main loop: did the training start?")
    return windows[0]


def price(spans: list[Span], costs) -> Overhead:
    """What the events of a capture's window cost at `costs`, on the Python side and inside operators."""
    window = _window(spans)
    result = attribute(spans, window.thread, (window.start_ns, window.end_ns), merge_rollout_workers, WINDOW_RANGE)
    parts = [row_overhead(times, costs) for times in result.rows.values()]
    return Overhead(sum(p.python_s for p in parts), sum(p.backend_s for p in parts))


def analyse(spans: list[Span], costs, nvml_samples=None, min_share: float = 0.01, per_worker: bool = False) -> dict:
    """Attribution, correction and folding of one capture; returns the pieces a `Breakdown` is made of."""
    window = _window(spans)
    row_of = (lambda name: name) if per_worker else merge_rollout_workers
    result = attribute(spans, window.thread, (window.start_ns, window.end_ns), row_of, WINDOW_RANGE, nvml_samples)
    rows, excess, overhead = {}, 0.0, 0.0
    for name, times in result.rows.items():
        overhead += row_overhead(times, costs).total_s
        rows[name], row_excess = corrected(times, costs)
        excess += row_excess
    components = {}
    for name, times in result.components.items():
        components[name], _ = corrected(times, costs)
    rows = fold_small_rows(rows, min_share * result.window_s, keep=(WINDOW_RANGE,))
    events = {kind: sum(1 for s in spans if s.kind == kind) for kind in ("scope", "sim", "op", "cuda_api", "kernel")}
    return dict(
        rows=dict(sorted(rows.items())),
        components=components,
        window_s=result.window_s,
        overhead_s=overhead,
        excess_s=excess,
        kernel_busy_s=result.kernel_busy_s,
        nvml_busy_s=result.nvml_busy_s,
        events=events,
    )


def _calibrate_in_situ(module: str, flags: list[str], costs, tmp: str, pairs: int) -> in_situ.InSituCalibration:
    """Short slices of the training, plain and profiled in turn, priced at `costs` (`sf.breakdown.in_situ`)."""
    names = (f"slice{i}" for i in itertools.count())

    def run_slice(profiled: bool, frames: int) -> tuple[float, Overhead | None]:
        slice_flags = [*flags, f"--train_dir={tmp}", f"--experiment={next(names)}", f"--train_for_env_steps={frames}"]
        capture = Capture()
        with capture.around_training() if profiled else event_loop_clocks(capture.loop_clocks):
            if run_training(module, slice_flags) != 0:
                raise RuntimeError(f"a calibration slice of {frames} frames failed")
        cpu_s = total_clock(capture.loop_clocks).cpu_s
        if not profiled:
            return cpu_s, None
        spans = spans_from_kineto(capture.profiler.profiler.kineto_results.events(), capture.range_names, SIM_RANGE)
        return cpu_s, price(spans, costs)

    total = _flag_value(flags, "train_for_env_steps")
    return in_situ.calibrate(run_slice, int(float(total)) if total else None, pairs)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(this command's options, the training flags): the options come before `--`; without `--` every word is a
    training flag, except a request for this command's help."""
    if "--" in argv:
        split = argv.index("--")
        own, training = argv[:split], argv[split + 1 :]
    elif {"-h", "--help"} & set(argv):
        own, training = argv, []
    else:
        own, training = [], argv
    parser = argparse.ArgumentParser(
        prog="python -m sf.profile breakdown",
        usage="%(prog)s [--min_share F] [--per_worker] [--skip_uninstrumented] -- <training flags>",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--min_share",
        type=float,
        default=0.01,
        help="operations under this share of the main loop join their parent scope's row",
    )
    parser.add_argument(
        "--per_worker", action="store_true", help="one row per rollout worker instead of one for all of them"
    )
    parser.add_argument(
        "--skip_uninstrumented", action="store_true", help="do not run the plain comparison runs (no overhead check)"
    )
    parser.add_argument(
        "--calibration_pairs",
        type=int,
        default=3,
        help="pairs of short plain and profiled slices of the training that measure what an event "
        "costs in it (0: the micro-benchmarks' costs alone)",
    )
    args = parser.parse_args(own)
    if not training:
        parser.error("give the training flags after `--`, e.g. -- --env=CartPole-v1 --train_for_env_steps=20000")
    return args, training


def main(argv: list[str] | None = None) -> int:
    args, training = parse_args(list(sys.argv[1:] if argv is None else argv))
    module, flags = training_module(training)
    if _flag_value(flags, "serial_mode") not in (None, "True", "true", "1"):
        print("breakdown: running in serial mode (one process, so the profiler sees every component)", file=sys.stderr)
    flags = [*flags, *SERIAL_FLAGS]
    experiment = _flag_value(flags, "experiment") or "breakdown"
    train_dir = Path(_flag_value(flags, "train_dir") or "./train_dir")
    profiled_flags = [*flags, f"--experiment={experiment}", f"--train_dir={train_dir}"]
    if _flag_value(flags, "restart_behavior") is None:
        profiled_flags.append("--restart_behavior=restart")

    plain_runs: list[tuple[float, int, LoopClock]] = []
    on_gpu = torch.cuda.is_available() and _flag_value(flags, "device") != "cpu"
    with tempfile.TemporaryDirectory(prefix="sf_breakdown_") as tmp:
        # the first run in a process pays for lazy imports and first calls (seconds): a one-step run takes them
        status = run_training(module, [*flags, f"--train_dir={tmp}", "--experiment=warmup", "--train_for_env_steps=1"])
        if status != 0:
            return status

        def plain_run(name: str) -> int:
            with event_loop_clocks([]) as clocks:
                code = run_training(module, [*flags, f"--train_dir={tmp}", f"--experiment={name}"])
            if code == 0:
                plain_runs.append((*_main_loop_s(Path(tmp) / name), total_clock(clocks)))
            return code

        micro_costs = measure_event_costs()
        calibration = _calibrate_in_situ(module, flags, micro_costs, tmp, args.calibration_pairs)
        costs = replace(micro_costs, python_scale=calibration.python_scale)
        if not args.skip_uninstrumented and (status := plain_run("uninstrumented_before")) != 0:
            return status
        capture = Capture(nvml=open_sampler() if on_gpu else None)
        with capture.around_training():
            status = run_training(module, profiled_flags)
        if status != 0:
            return status
        # a second plain run after the profiled one: the machine's speed drifts, the mean of both brackets it
        if not args.skip_uninstrumented and (status := plain_run("uninstrumented_after")) != 0:
            return status
    experiment_dir = train_dir / experiment
    _, frames = _main_loop_s(experiment_dir)
    policies = policy_lines(json.loads((experiment_dir / "summary.json").read_text()))
    spans = spans_from_kineto(capture.profiler.profiler.kineto_results.events(), capture.range_names, SIM_RANGE)
    pieces = analyse(spans, costs, capture.nvml.samples if capture.nvml else None, args.min_share, args.per_worker)
    device = torch.cuda.get_device_name() if on_gpu else "cpu"
    result = Breakdown(
        command=[module, *training],
        mode="serial",
        device=device,
        costs=costs,
        micro_costs=micro_costs,
        calibration=calibration,
        baseline_runs_s=[run[0] for run in plain_runs],
        env_frames=frames,
        baseline_env_frames=plain_runs[0][1] if plain_runs else None,
        window_clock=total_clock(capture.loop_clocks),
        baseline_clock=mean_clock([run[2] for run in plain_runs]),
        policies=policies,
        **pieces,
    )
    out_dir = experiment_dir / "profiling"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "breakdown.json").write_text(json.dumps(result.to_dict(), indent=2))
    write_chart(result, out_dir / "breakdown.png")
    print(table(result))
    print(f"\nwrote {out_dir / 'breakdown.json'} and {out_dir / 'breakdown.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
