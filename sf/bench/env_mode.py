"""`python -m sf.benchmark --env=...`: the simulator ceiling, sampling only and training of one layout, side by side.

The three phases run one after another in one invocation, each in its own processes: the ceiling
(`sf.bench.ceiling`), then the training command with `--sampling_only=True`, then the training command itself,
both in benchmark mode. With `--envpool=True` the ceiling is EnvPool's, and the same layout's ceiling with
gymnasium envs follows it, so the two simulators' rates stand side by side. Each FPS is set against the ceiling,
and the profile report of the two runs names their bottleneck. Everything lands in `<train_dir>/<experiment>/`:
`benchmark.json`, `benchmark.png`, and the two runs' own experiment folders `sampling/` and `training/`.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sf.bench.ceiling import measure_ceiling
from sf.bench.runs import (
    LearnerCore,
    RunResult,
    profile_report,
    resolved_inference_placement,
    resolved_precision,
    run_training,
    verdict_of,
)
from sf.envs.families import EnvFamily

PHASES = ("ceiling", "gymnasium_ceiling", "sampling", "training")
CEILINGS = ("ceiling", "gymnasium_ceiling")
STARTUP_LIMIT_S = 600.0  # a run that has not started collecting by then is stopped
PHASE_TITLES = {
    "ceiling": "simulator ceiling",
    "gymnasium_ceiling": "  gymnasium envs",
    "sampling": "sampling only",
    "training": "training",
}


@dataclass
class Phase:
    name: str  # one of PHASES
    fps: float  # steady env frames per second (the ceiling's stepping rate; a run's rate after its first batch)
    fps_whole_run: float | None  # a run's own Collected figure, start-up included; None for the ceiling
    share_of_ceiling: float | None
    verdict: str | None  # the profile report's bottleneck kind; None when there is no report
    status: str
    command: str | None = None
    experiment_dir: str | None = None
    # training on a CPU with one learner thread: the cores its process used in the report's window, and the FPS the
    # run would reach with the learner on a core of its own (`sf.bench.runs.LearnerCore`)
    learner_cores: float | None = None
    learner_alone_fps: float | None = None


@dataclass
class EnvBenchmark:
    env: str
    layout: dict
    device: str
    phase_s: float
    cpus: int
    date: str
    load_avg_start: float
    load_avg_end: float = 0.0
    ceiling_processes: int = 0  # processes that stepped the envs for the ceiling: the layout's or the cores', the more
    precision: dict | None = None  # what the runs' image encoder used and why (sf.model.precision.PrecisionChoice)
    phases: list[Phase] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def layout_of(cfg) -> dict:
    keys = (
        "num_workers",
        "num_envs_per_worker",
        "worker_num_splits",
        "policy_workers_per_policy",
        "inference_placement",
        "batched_sampling",
        "serial_mode",
        "async_rl",
    )
    return {key: getattr(cfg, key) for key in keys}


def one_learner_thread(cfg) -> bool:
    """A parallel, asynchronous run on the CPU: its learner computes on one thread (`learner_threads`), so one core
    is the most it can use."""
    return cfg.device == "cpu" and not cfg.serial_mode and cfg.async_rl


def run_phase(
    name: str, family: EnvFamily, flags: list[str], bench_dir: Path, phase_s: float, stop_given: bool
) -> RunResult:
    """The sampling or training phase: the user's command, stopped `phase_s` after its first frames unless the
    command names its own stop."""
    extra = ["--sampling_only=True"] if name == "sampling" else []
    measure_s = None if stop_given else phase_s
    return run_training(
        family.train_module,
        [*flags, *extra],
        bench_dir,
        name,
        measure_s=measure_s,
        deadline=None if stop_given else time.monotonic() + phase_s + STARTUP_LIMIT_S,
    )


def run_env_benchmark(
    cfg, family: EnvFamily, flags: list[str], bench_dir: Path, phase_s: float, log=print
) -> EnvBenchmark:
    """The three phases of one layout; `flags` are the user's training flags, `cfg` what they resolve to."""
    stop_given = bool({"train_for_env_steps", "train_for_seconds"} & set(cfg.cli_args))
    result = EnvBenchmark(
        env=cfg.env,
        layout=layout_of(cfg),
        device=cfg.device,
        phase_s=phase_s,
        cpus=os.cpu_count() or 1,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        load_avg_start=os.getloadavg()[0],
    )
    log(
        f"simulator ceiling: {result.layout['num_workers'] * result.layout['num_envs_per_worker']} envs on every "
        f"core, random actions, {phase_s:.0f} s ..."
    )
    ceiling = measure_ceiling(cfg, family, phase_s)
    result.ceiling_processes = ceiling.processes
    result.phases.append(Phase("ceiling", ceiling.fps, None, 1.0, None, "ok"))
    if cfg.envpool:
        log(f"the same layout with gymnasium envs, {phase_s:.0f} s ...")
        plain = measure_ceiling(argparse.Namespace(**{**vars(cfg), "envpool": False}), family, phase_s)
        share = plain.fps / ceiling.fps if ceiling.fps > 0 else None
        result.phases.append(Phase("gymnasium_ceiling", plain.fps, None, share, None, "ok"))
    for name in ("sampling", "training"):
        log(f"{PHASE_TITLES[name]} ...")
        run = run_phase(name, family, flags, bench_dir, phase_s, stop_given)
        report = profile_report(run.experiment_dir) if run.ok else None
        learner = LearnerCore.of(report) if name == "training" and one_learner_thread(cfg) else None
        placement = resolved_inference_placement(run.experiment_dir) if run.ok else None
        if placement is not None:
            result.layout["inference_placement"] = placement
        result.precision = (resolved_precision(run.experiment_dir) if run.ok else None) or result.precision
        fps = run.best_fps if run.ok else 0.0
        result.phases.append(
            Phase(
                name,
                fps,
                run.fps if run.ok else None,
                fps / ceiling.fps if ceiling.fps > 0 else None,
                verdict_of(report),
                "ok" if run.ok else run.status,
                run.command,
                run.experiment_dir,
                learner.cores if learner else None,
                learner.fps_alone if learner else None,
            )
        )
    result.load_avg_end = os.getloadavg()[0]
    return result
