"""`python -m sf.bench.device_check --out DIR`: sf on one machine with a GPU and N cores, beside Sample Factory, in one
command of at most `--budget_s` seconds (8 minutes by default).

Steps, in this order, each writing its results into `DIR/summary.json` and `DIR/summary.md` as soon as it has them
(a run killed half-way keeps everything measured before):

1. machine: GPU, driver, CPU model, cores, torch and CUDA versions;
2. ceiling: the all-core simulator ceiling of the scaling suite's env and of the benchmark suite's env
   (`sf.bench.ceiling`);
3. scaling: the VizDoom suite's command at 2, 4, 8 and N rollout workers, learner and inference on the device, sf
   and Sample Factory alternating; each run gets the same steady window (`sf.bench.timed`), and sf's run the verdict
   of `python -m sf.profile report`;
4. benchmark: the `doom_benchmark` suite at N workers, both frameworks, the same window;
5. profile: sf at N workers with torch.profiler on the learner and the inference worker (`--profiling_backend=torch`)
   for a window of learner iterations: kernel time per Timing key, the Chrome traces, GPU busy time from the traces
   beside NVML's utilization over the same interval;
6. breakdown: `python -m sf.profile breakdown` of the suite's command with the envs of 2 workers, on the device, with
   its CUDA columns and its corrected total against the uninstrumented runs;
7. batched: the torch Pendulum of `sf_examples.tensor_envs` with `--batched_copies` copies on the device,
   stepped bare and trained with `--batched_sampling=True` in serial mode (`sf_examples.tensor_envs.batched_check`,
   in a process of its own): copies stepped per second, the run's steady FPS, and per env step the observation copies
   and how many of them landed in host memory.

`--device=cpu` runs the same steps on a machine without a GPU (the CUDA figures are then absent); with small
windows and training flags after `--` (`--train_for_env_steps=...`, smaller layouts) it takes tens of seconds. Without
`--sample_factory` the Sample Factory side is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from sf.bench.ceiling import usable_cores
from sf.bench.device_summary import SummaryFile
from sf.bench.runs import merge_flags, profile_report, run_training, training_command, verdict_of
from sf.bench.suites import SUITES, all_cores_ceiling, describe_machine
from sf.bench.timed import TimedRun, Window, run_for
from sf.envs.families import family_of
from sf.utils.errors import ConfigError

STEPS = ("ceiling", "scaling", "benchmark", "profile", "breakdown", "batched")
# the budget's share of each step; time a step leaves over goes to the ones after it
SHARES = {"ceiling": 0.07, "scaling": 0.4, "benchmark": 0.22, "profile": 0.1, "breakdown": 0.13, "batched": 0.08}
BATCHED_MODULE = "sf_examples.tensor_envs.batched_check"  # named as a string: sf never imports the examples
BREAKDOWN_WORKERS = 2  # the breakdown steps every env on one thread: the smallest scaling point's envs
STOP_RESERVE_S = 30.0  # of the budget, kept for stopping the run in progress at a step's deadline and writing
RUN_MARGIN_S = 10.0  # a run starts only with its window and this much more left before its step's deadline
LONG_RUN = 10**10  # frames: timed runs are stopped by the window, not by a frame count
SF = "sf"
SAMPLE_FACTORY = "Sample Factory"
REPO = Path(__file__).resolve().parents[2]

log = partial(print, flush=True)


@dataclass
class Check:
    """What the command line asks for, resolved."""

    out: Path
    device: str
    workers: list[int]
    cores: int
    scaling_suite: str
    benchmark_suite: str
    sample_factory: str | None
    extra: list[str]
    scaling_window: Window
    benchmark_window: Window
    ceiling_s: float
    profile_steps: tuple[int, int]
    breakdown_frames: int
    calibration_pairs: int
    budget_s: float
    steps: list[str]
    batched_copies: int = 4096
    batched_frames: int = 2_000_000
    started: float = field(default_factory=time.monotonic)

    def flags(self, suite: str, workers: int | None = None, frames: int | None = LONG_RUN) -> list[str]:
        """The suite's flags on this device (its layout at `workers` rollout workers), then the user's."""
        own = [f"--device={self.device}"]
        if workers is not None:
            own.append(f"--num_workers={workers}")
        if frames is not None:
            own.append(f"--train_for_env_steps={frames}")
        return merge_flags(list(SUITES[suite].flags), [*own, *self.extra])

    def step_deadline(self, step: str) -> float:
        """The step's share of the budget, added to what earlier steps left over (of those asked for)."""
        asked = [s for s in STEPS if s in self.steps]
        total = sum(SHARES[s] for s in asked)
        upto = sum(SHARES[s] for s in asked[: asked.index(step) + 1])
        return self.started + (self.budget_s - STOP_RESERVE_S) * upto / total

    def suites(self) -> list[str]:
        """The suites the asked steps run (both when the ceiling is the only step)."""
        uses = {"scaling": self.scaling_suite, "profile": self.scaling_suite, "breakdown": self.scaling_suite}
        uses["benchmark"] = self.benchmark_suite
        used = [uses[step] for step in self.steps if step in uses]
        return list(dict.fromkeys(used or [self.scaling_suite, self.benchmark_suite]))

    def left_s(self) -> float:
        return self.started + self.budget_s - time.monotonic()


def _sf_run(check: Check, suite: str, flags: list[str], name: str, window: Window, deadline: float) -> TimedRun:
    train_dir = check.out / "runs"
    cmd = training_command(SUITES[suite].module, flags, train_dir, name)
    return run_for(SF, cmd, REPO, check.out / "logs" / f"{name}.log", window, deadline)


def _sample_factory_run(
    check: Check, suite: str, flags: list[str], name: str, window: Window, deadline: float
) -> TimedRun:
    """Sample Factory's run from a folder of its own (so `sf_examples` is its package, not ours) and without this
    process's PYTHONPATH (which may name sf's packages)."""
    train_dir = check.out / "runs_sample_factory"
    train_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        check.sample_factory,
        "-m",
        SUITES[suite].module,
        *flags,
        f"--train_dir={train_dir}",
        f"--experiment={name}",
        "--restart_behavior=overwrite",
    ]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    log_path = check.out / "logs" / f"{name}_sample_factory.log"
    return run_for(SAMPLE_FACTORY, cmd, train_dir, log_path, window, deadline, env)


def _describe(run: TimedRun) -> str:
    if run.fps is None:
        whole = "" if run.fps_whole_run is None else f", {run.fps_whole_run:,.0f} FPS over the whole run"
        return f"{run.framework}: {run.status}{whole} (log {run.log})"
    a, b = run.measured_s
    return f"{run.framework}: {run.fps:,.0f} FPS over {a:.0f}-{b:.0f} s ({run.status})"


def _measure(
    check: Check, side: str, suite: str, flags: list[str], name: str, window: Window, deadline: float
) -> tuple[TimedRun, dict]:
    """One side's run of the suite, and what it adds to its result: the run, and for sf's the profile report's
    verdict."""
    if side == SF:
        run = _sf_run(check, suite, flags, name, window, deadline)
        return run, {"sf": asdict(run), "sf_verdict": _verdict(check.out / "runs" / name)}
    run = _sample_factory_run(check, suite, flags, name, window, deadline)
    return run, {"sample_factory": asdict(run)}


def step_ceiling(check: Check, summary: SummaryFile) -> None:
    deadline = check.step_deadline("ceiling")
    for suite in check.suites():
        if time.monotonic() + check.ceiling_s > deadline:
            summary.note(f"ceiling of {suite}: skipped, out of time")
            continue
        log(f"ceiling: {SUITES[suite].env}, every core, {check.ceiling_s:g} s ...")
        flags = merge_flags([f"--num_workers={check.cores}", f"--device={check.device}"], check.extra)
        fps, processes = all_cores_ceiling(SUITES[suite], flags, check.ceiling_s)
        summary.put(
            "ceiling",
            suite,
            {"env": SUITES[suite].env, "fps": fps, "processes": processes, "seconds": check.ceiling_s},
        )
        log(f"ceiling: {fps:,.0f} frames/s on {processes} processes")


def step_scaling(check: Check, summary: SummaryFile) -> None:
    deadline = check.step_deadline("scaling")
    suite = check.scaling_suite
    for i, workers in enumerate(check.workers):
        point: dict = {"workers": workers}
        flags = check.flags(suite, workers)
        sides = [SF, SAMPLE_FACTORY] if check.sample_factory else [SF]
        for side in sides if i % 2 == 0 else sides[::-1]:  # alternate who goes first: drift cancels out
            if not _time_for(check.scaling_window, deadline):
                summary.note(f"scaling at {workers} workers, {side}: skipped, out of time")
                continue
            run, fields = _measure(check, side, suite, flags, f"scaling_w{workers}", check.scaling_window, deadline)
            point.update(fields)
            log(f"scaling, {workers} workers: {_describe(run)}")
            summary.put("scaling", str(workers), point)


def _time_for(window: Window, deadline: float) -> bool:
    return time.monotonic() + window.warmup_s + window.length_s + RUN_MARGIN_S <= deadline


def _verdict(experiment_dir: Path) -> str | None:
    return verdict_of(profile_report(experiment_dir)) if (experiment_dir / "profile.json").exists() else None


def step_benchmark(check: Check, summary: SummaryFile) -> None:
    deadline = check.step_deadline("benchmark")
    suite = check.benchmark_suite
    flags = check.flags(suite, check.cores)
    sides = [SF, SAMPLE_FACTORY] if check.sample_factory else [SF]
    result: dict = {"suite": suite, "workers": check.cores}
    for side in sides:
        if not _time_for(check.benchmark_window, deadline):
            summary.note(f"benchmark, {side}: skipped, out of time")
            continue
        name = f"benchmark_w{check.cores}"
        run, fields = _measure(check, side, suite, flags, name, check.benchmark_window, deadline)
        result.update(fields)
        log(f"benchmark {suite}, {check.cores} workers: {_describe(run)}")
        summary.put("benchmark", suite, result)


def step_profile(check: Check, summary: SummaryFile) -> None:
    from sf.bench.device_profile import profile_run

    deadline = check.step_deadline("profile")
    suite = check.scaling_suite
    first, last = check.profile_steps
    frames = _frames_per_iteration(suite, check.flags(suite))
    flags = merge_flags(
        check.flags(suite, check.cores, frames=None),
        [
            "--profiling_backend=torch",
            "--profiling_worker_groups",
            "Learner",
            "InferenceWorker",
            "--profiling_steps",
            *(str(step) for step in range(first, last + 1)),
            f"--train_for_env_steps={(last + 4) * frames}",  # a few iterations past the window, then the run ends
        ],
    )
    log(f"profile: torch.profiler on the learner and inference, learner iterations {first}-{last} ...")

    def run() -> dict:
        result = run_training(
            SUITES[suite].module, flags, check.out / "runs", "profile", deadline=deadline, grace_s=20.0
        )
        return {"status": result.status, "command": result.command, "experiment_dir": result.experiment_dir}

    result = profile_run(run, on_gpu=check.device == "gpu")
    summary.put("gpu_profile", None, result)
    for name, process in result.get("processes", {}).items():
        log(
            f"profile: {name}: {process['keys_in_trace']} of {process['keys_in_tree']} Timing keys as ranges, "
            f"kernels {process['kernel_s']:.3f} s, GPU busy {process['gpu_busy_s']:.3f} s "
            f"of {process['window_s']:.2f} s"
            + ("" if process["nvml_busy_s"] is None else f", NVML {process['nvml_busy_s']:.3f} s")
        )


def step_breakdown(check: Check, summary: SummaryFile) -> None:
    from sf.bench.device_profile import breakdown_run

    deadline = check.step_deadline("breakdown")
    suite = check.scaling_suite
    flags = check.flags(suite, min(BREAKDOWN_WORKERS, *check.workers), frames=check.breakdown_frames)
    log(f"breakdown: {check.breakdown_frames:,} frames in serial mode, plain, profiled, plain ...")
    result = breakdown_run(
        SUITES[suite].module, flags, check.out / "breakdown", check.calibration_pairs, deadline, check.out / "logs"
    )
    summary.put("breakdown", None, result)
    deviation = result.get("corrected_vs_uninstrumented")
    log(f"breakdown: {result['status']}, corrected total {'n/a' if deviation is None else f'{deviation:+.1%}'}")


def step_batched(check: Check, summary: SummaryFile) -> None:
    """The batched step: the tensor env's check in a process of its own, stopped at the step's deadline."""
    deadline = check.step_deadline("batched")
    out = check.out / "batched"
    cmd = [sys.executable, "-m", BATCHED_MODULE, f"--device={check.device}", f"--out={out}"]
    cmd += [f"--copies={check.batched_copies}", f"--frames={check.batched_frames}"]
    log(f"batched: {check.batched_copies} copies of a torch Pendulum on {check.device} ...")
    (check.out / "logs").mkdir(parents=True, exist_ok=True)
    with open(check.out / "logs" / "batched.log", "w") as log_file:
        try:
            subprocess.run(
                cmd, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, timeout=max(1.0, deadline - time.monotonic())
            )
        except subprocess.TimeoutExpired:
            summary.note("batched: stopped at its deadline")
    result_path = out / "batched.json"
    if not result_path.is_file():
        summary.note(f"batched: no result (log {check.out / 'logs' / 'batched.log'})")
        return
    result = json.loads(result_path.read_text())
    summary.put("batched", "tensor_pendulum", result)
    log(
        f"batched: bare {result['bare_copies_per_s']:,.0f} copies/s, training {result['fps_steady'] or 0:,.0f} FPS, "
        f"{result['obs_host_copies_per_step']:.2f} host copies of the observations per step"
    )


STEP_FUNCTIONS: dict[str, Callable[[Check, SummaryFile], None]] = {
    "ceiling": step_ceiling,
    "scaling": step_scaling,
    "benchmark": step_benchmark,
    "profile": step_profile,
    "breakdown": step_breakdown,
    "batched": step_batched,
}


def _frames_per_iteration(suite: str, flags: list[str]) -> int:
    """Env frames a learner iteration trains on: a batch of samples, each `--env_frameskip` frames."""
    cfg = family_of(SUITES[suite].env).parse_cfg(flags)
    return cfg.batch_size * cfg.env_frameskip


def parse_args(argv: list[str]) -> argparse.Namespace:
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        prog="python -m sf.bench.device_check",
        usage="%(prog)s --out DIR [options] [-- <training flags for every run>]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--out", required=True, help="folder for summary.json, summary.md, logs, runs and traces")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="where learner and inference run")
    parser.add_argument(
        "--sample_factory",
        default=None,
        help="python of an install of Sample Factory 2.1.1, to run each command under it too (left out if not given)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=None,
        help="scaling points (default: 2, 4 and 8 where below the core count, and the core count)",
    )
    parser.add_argument("--scaling_suite", choices=sorted(SUITES), default="doom")
    parser.add_argument("--benchmark_suite", choices=sorted(SUITES), default="doom_benchmark")
    parser.add_argument("--warmup_s", type=float, default=5.0, help="scaling runs: seconds after the first frames")
    parser.add_argument("--window_s", type=float, default=10.0, help="scaling runs: seconds measured")
    parser.add_argument("--benchmark_warmup_s", type=float, default=10.0)
    parser.add_argument("--benchmark_window_s", type=float, default=15.0)
    parser.add_argument("--startup_limit_s", type=float, default=120.0, help="a run with no frames by then stops")
    parser.add_argument("--ceiling_s", type=float, default=8.0, help="seconds each ceiling steps the envs")
    parser.add_argument(
        "--profile_steps",
        type=int,
        nargs=2,
        default=(40, 59),
        metavar=("FIRST", "LAST"),
        help="learner iterations the torch.profiler window covers",
    )
    parser.add_argument("--breakdown_frames", type=int, default=12_288, help="frames of each breakdown run")
    parser.add_argument("--calibration_pairs", type=int, default=1, help="the breakdown's in-situ calibration")
    parser.add_argument("--batched_copies", type=int, default=4096, help="batched step: copies of the torch env")
    parser.add_argument("--batched_frames", type=int, default=2_000_000, help="batched step: frames of its training")
    parser.add_argument("--budget_s", type=float, default=480.0, help="the whole command's wall time at most")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS), help="the steps to run")
    args = parser.parse_args(own)
    args.extra = extra
    return args


def resolve(args: argparse.Namespace) -> Check:
    """The check the arguments ask for; raises ValueError naming a bad argument or training flag."""
    cores = usable_cores()
    workers = args.workers or sorted({w for w in (2, 4, 8) if w < cores} | {cores})
    if any(w < 1 for w in workers):
        raise ValueError("--workers: every point needs at least 1 worker")
    if args.device == "gpu":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device=gpu: torch sees no CUDA device (run with --device=cpu on a machine without one)")
    if args.sample_factory and not Path(args.sample_factory).exists():
        raise ValueError(f"--sample_factory: {args.sample_factory} does not exist")
    if (Path(args.out) / "summary.json").exists():
        raise ValueError(f"--out: {args.out} already holds a device check (summary.json); give another folder")
    if args.budget_s < 2 * STOP_RESERVE_S:
        raise ValueError(f"--budget_s: at least {2 * STOP_RESERVE_S:.0f} s")
    first, last = args.profile_steps
    if not 1 <= first <= last:
        raise ValueError("--profile_steps: FIRST and LAST are learner iterations, 1 <= FIRST <= LAST")
    check = Check(
        out=Path(args.out),
        device=args.device,
        workers=workers,
        cores=cores,
        scaling_suite=args.scaling_suite,
        benchmark_suite=args.benchmark_suite,
        sample_factory=args.sample_factory,
        extra=args.extra,
        scaling_window=Window(args.warmup_s, args.window_s, args.startup_limit_s),
        benchmark_window=Window(args.benchmark_warmup_s, args.benchmark_window_s, args.startup_limit_s),
        ceiling_s=args.ceiling_s,
        profile_steps=(first, last),
        breakdown_frames=args.breakdown_frames,
        calibration_pairs=args.calibration_pairs,
        budget_s=args.budget_s,
        steps=[s for s in STEPS if s in args.steps],
        batched_copies=args.batched_copies,
        batched_frames=args.batched_frames,
    )
    for suite in check.suites():
        flags = check.flags(suite, max(workers))
        try:
            family_of(SUITES[suite].env).parse_cfg(flags)
        except (ConfigError, LookupError, ValueError) as exc:
            raise ValueError(f"training flags of {suite}: {str(exc).strip().splitlines()[-1]}") from None
    return check


def settings_of(check: Check) -> dict:
    out = asdict(check)
    out.pop("started")
    out["out"] = str(check.out)
    out["commands"] = {
        "scaling": f"python -m {SUITES[check.scaling_suite].module} {' '.join(check.flags(check.scaling_suite))}",
        "benchmark": f"python -m {SUITES[check.benchmark_suite].module} "
        f"{' '.join(check.flags(check.benchmark_suite, check.cores))}",
    }
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        check = resolve(args)
    except ValueError as exc:
        print(f"sf.bench.device_check: error: {exc}", file=sys.stderr)
        return 2
    check.out.mkdir(parents=True, exist_ok=True)
    summary = SummaryFile(check.out, describe_machine(), settings_of(check))
    machine = summary.data["machine"]
    log(f"machine: {machine['cpu']}, {machine['cores']} cores, GPU {machine['gpu']} (driver {machine['driver']})")
    log(f"writing {summary.json_path} and {summary.md_path} as results come in")
    signal.signal(signal.SIGTERM, _stop_on_sigterm)  # `timeout` or a scheduler ending the check: stop the runs too
    status = "done"
    try:
        for step in check.steps:
            if check.left_s() <= 0:
                summary.note(f"{step}: skipped, the budget of {check.budget_s:.0f} s is spent")
                continue
            began = time.monotonic()
            STEP_FUNCTIONS[step](check, summary)
            summary.put("step_s", step, round(time.monotonic() - began, 1))
    except KeyboardInterrupt:  # the run in progress has been stopped on the way out
        status = "interrupted"
    finally:
        summary.finish(status, time.monotonic() - check.started)
        log(f"{status} after {time.monotonic() - check.started:.0f} s: {summary.md_path}")
    return 0 if status == "done" else 130


def _stop_on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
