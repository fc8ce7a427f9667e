"""The env mode and auto-tune of `python -m sf.benchmark`: check the training flags, then run and report.

A bad flag or an env that cannot be created stops here with one line and exit status 2, before any process starts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

from sf.bench.env_mode import run_env_benchmark
from sf.bench.table import format_table, write_chart, write_json
from sf.bench.tune import Tuner, format_trials
from sf.cfg.arguments import resolve_device
from sf.envs.families import EnvFamily, env_in_argv, family_of
from sf.utils.errors import ConfigError

log = partial(print, flush=True)


def _error(message: str) -> int:
    print(f"sf.benchmark: error: {message}", file=sys.stderr)
    return 2


def resolve(flags: list[str]) -> tuple[EnvFamily, argparse.Namespace]:
    """The family that trains the env and the config the flags resolve to; raises ValueError with the message."""
    env = env_in_argv(flags)
    if not env:
        raise ValueError("--env is required (a registered env such as CartPole-v1), or --suite with --auto_tune")
    family = family_of(env)
    try:
        cfg = family.parse_cfg(flags)
    except (ConfigError, LookupError, ValueError) as exc:
        raise ValueError(str(exc).strip().splitlines()[-1]) from None
    from sf.runner.build import probe_env

    try:
        probe_env(cfg)
    except Exception as exc:  # any failure to build the env is the user's --env or env flags
        raise ValueError(f"--env: cannot create {env!r}: {' '.join(str(exc).split())}") from None
    return family, cfg


def run_env_mode(flags: list[str], args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        family, cfg = resolve(flags)
    except ValueError as exc:
        return _error(str(exc))
    kind = "tune" if args.auto_tune else "benchmark"
    experiment = cfg.experiment if "experiment" in cfg.cli_args else f"{kind}_{cfg.env}"
    bench_dir = Path(cfg.train_dir) / experiment
    bench_dir.mkdir(parents=True, exist_ok=True)
    cfg.device = resolve_device(cfg)
    if args.auto_tune:
        return _tune(family, flags, cfg, bench_dir, args, started)
    bench = run_env_benchmark(cfg, family, flags, bench_dir, args.phase_s, log=log)
    log("")
    log(format_table(bench))
    log(f"training command: {bench.phases[-1].command}")
    log(f"wrote {write_json(bench, bench_dir / 'benchmark.json')}")
    chart = write_chart(bench, bench_dir / "benchmark.png")
    log(f"wrote {chart}" if chart else "no chart: matplotlib is not installed (pip install 'sf[profiling]')")
    return 0 if all(phase.status == "ok" for phase in bench.phases) else 1


def _tune(family: EnvFamily, flags: list[str], cfg, bench_dir: Path, args: argparse.Namespace, started: float) -> int:
    tuner = Tuner(family, flags, cfg, bench_dir, args.tune_budget_s, args.tune_trial_s, log=log, started=started)
    log(
        f"auto-tune {cfg.env}: budget {args.tune_budget_s:.0f} s, trials of {tuner.trial_s:.0f} s, "
        f"{tuner.limits.cpus} CPUs"
    )
    result = tuner.run()
    log("")
    log(format_trials(result))
    (bench_dir / "tune.json").write_text(json.dumps(result.to_json(), indent=2))
    if result.best is None:
        log(f"no layout measured: {result.note}")
        return 1
    defaults = result.trials[0]
    gain = result.best.fps / defaults.fps - 1 if defaults.fps > 0 else float("inf")
    log(
        f"best layout: {result.best.layout.describe()}: {result.best.fps:,.0f} FPS "
        f"({gain:+.0%} over the given layout's {defaults.fps:,.0f}) after {result.elapsed_s:.0f} s"
    )
    if result.best is defaults:
        log("the given layout stays: no trial beat it by more than the run-to-run noise")
    log(f"stopped: {result.note}")
    log(f"train with it: {result.command}")
    log(f"wrote {bench_dir / 'tune.json'}")
    return 0
