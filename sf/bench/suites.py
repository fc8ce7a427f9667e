"""The suites of `python -m sf.benchmark --suite <name>`: one training command each, run in benchmark mode as a user
would run it, under sf and, given the interpreter of a venv with `sample-factory`, under Sample Factory too,
alternating, so both figures come from the same session of the same machine. The overall FPS is the run's own last
line, `Collected {...}, FPS: X`; the bare env's steps per second on one core set it in proportion.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from sf.envs.families import family_of
from sf.envs.registry import create_env

COLLECTED = re.compile(r"Collected \{.*\}, FPS: ([\d.]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CEILING_S = 10.0  # seconds the all-core ceiling steps before each repeat


@dataclass(frozen=True)
class Suite:
    flags: tuple[str, ...]
    train_module: str | None = None  # when not the family's own (e.g. the EnvPool variant of a family)
    sample_factory_script: str | None = None  # run by Sample Factory's python instead of the module (repo-relative)

    @property
    def env(self) -> str:
        return next(flag.split("=", 1)[1] for flag in self.flags if flag.startswith("--env="))

    @property
    def module(self) -> str:
        """The training module (the env family's unless named): the same module path exists in sf_examples of both
        frameworks."""
        return self.train_module or family_of(self.env).train_module


# the Doom suites' APPO settings: Sample Factory's VizDoom benchmark command, less its layout and length
DOOM_APPO = (
    "--env_frameskip=4",
    "--use_rnn=True",
    "--num_policies=1",
    "--num_epochs=1",
    "--rollout=32",
    "--recurrence=32",
    "--benchmark=True",
    "--decorrelate_envs_on_one_worker=False",
    "--res_w=128",
    "--res_h=72",
    "--wide_aspect_ratio=True",
    "--policy_workers_per_policy=1",
    "--worker_num_splits=2",
    "--batched_sampling=False",
    "--serial_mode=False",
    "--async_rl=True",
    "--device=cpu",
)

SUITES: dict[str, Suite] = {
    "cartpole": Suite(
        (
            "--env=CartPole-v1",
            "--num_workers=2",
            "--num_envs_per_worker=16",
            "--benchmark=True",
            "--device=cpu",
            "--use_rnn=False",
            "--encoder_mlp_layers",
            "64",
            "64",
            "--rollout=32",
            "--batch_size=1024",
            "--num_batches_per_epoch=1",
            "--num_epochs=1",
            "--train_for_env_steps=1000000",
        ),
    ),
    "doom": Suite(
        (
            "--env=doom_defend_the_center",
            "--num_workers=4",
            "--num_envs_per_worker=8",
            "--batch_size=1024",
            *DOOM_APPO,
            "--train_for_env_steps=250000",
        ),
    ),
    # the profiling guide's VizDoom command (deathmatch in sf, Sample Factory's own battle scenario in Sample Factory,
    # so the two FPS figures are each framework's own, not a like-for-like pair) at 16 workers; on a GPU machine
    # add `-- --device=gpu`, as the device of every suite is pinned to the CPU
    "doom_benchmark": Suite(
        (
            "--env=doom_benchmark",
            "--num_workers=16",
            "--num_envs_per_worker=16",
            "--batch_size=2048",
            *DOOM_APPO,
            "--train_for_env_steps=1000000",
        ),
    ),
    # Breakout with the Atari examples' own defaults (4 epochs of 4 x 256 samples per 1024, synchronous), two
    # workers of 4 envs in two splits: Sample Factory's synchronous mode needs one round of every env's rollout
    # (2 x 4 x 128) to be a whole number of 1024-sample iterations
    "atari": Suite(
        (
            "--env=atari_breakout",
            "--num_workers=2",
            "--num_envs_per_worker=4",
            "--worker_num_splits=2",
            "--benchmark=True",
            "--device=cpu",
            "--train_for_env_steps=100000",
        ),
    ),
    # the same game through EnvPool with the EnvPool examples' defaults: two workers, each stepping one pool of 16
    "envpool": Suite(
        (
            "--env=atari_breakout",
            "--num_workers=2",
            "--num_envs_per_worker=1",
            "--env_agents=16",
            "--benchmark=True",
            "--device=cpu",
            "--train_for_env_steps=100000",
        ),
        train_module="sf_examples.envpool.atari.train_envpool_atari",
    ),
    "ant": Suite(
        ("--env=mujoco_ant", "--serial_mode=True", "--async_rl=False", "--device=cpu", "--train_for_env_steps=100000"),
    ),
    # a torch env of 1,024 copies stepped in one call (--batched_sampling), the same class under both frameworks:
    # Sample Factory's side registers it through a launcher (sf/bench/tensor_env_sample_factory.py)
    "tensor_pendulum": Suite(
        (
            "--env=tensor_pendulum",
            "--env_agents=1024",
            "--batched_sampling=True",
            "--serial_mode=True",
            "--async_rl=False",
            "--num_workers=1",
            "--num_envs_per_worker=1",
            "--worker_num_splits=1",
            "--device=cpu",
            "--use_rnn=False",
            "--encoder_mlp_layers",
            "64",
            "64",
            "--nonlinearity=tanh",
            "--rollout=32",
            "--batch_size=8192",
            "--num_batches_per_epoch=4",
            "--num_epochs=4",
            "--decorrelate_experience_max_seconds=0",
            "--benchmark=True",
            "--train_for_env_steps=1000000",
        ),
        sample_factory_script="sf/bench/tensor_env_sample_factory.py",
    ),
}


@dataclass
class Result:
    suite: str
    command: str
    sf_fps: list[float] = field(default_factory=list)
    sample_factory_fps: list[float] = field(default_factory=list)
    bare_env_rates: list[float] = field(default_factory=list)  # one before each repeat: the machine's speed drifts
    ceiling_fps: list[float] = field(default_factory=list)  # every core stepping the suite's envs, frames/s
    precision: dict | None = None  # what sf's image encoder computed in, and why (its run's summary.json)
    machine: dict = field(default_factory=dict)  # the CPU model, its cores and the GPU the figures belong to

    @property
    def bare_env_steps_per_s(self) -> float | None:
        return sum(self.bare_env_rates) / len(self.bare_env_rates) if self.bare_env_rates else None

    @property
    def share_of_bare_env(self) -> float | None:
        """sf's mean FPS over one bare env's steps per second on one core (frames and steps coincide without
        frameskip, as in the MuJoCo suite): how close a serial run comes to the simulator alone."""
        if not self.sf_fps or not self.bare_env_steps_per_s:
            return None
        return (sum(self.sf_fps) / len(self.sf_fps)) / self.bare_env_steps_per_s

    @property
    def share_of_ceiling(self) -> float | None:
        """sf's mean FPS over the mean all-core ceiling: how close the run comes to the machine's simulator rate."""
        if not self.sf_fps or not self.ceiling_fps:
            return None
        return (sum(self.sf_fps) / len(self.sf_fps)) / (sum(self.ceiling_fps) / len(self.ceiling_fps))

    @property
    def ratio(self) -> float | None:
        if not self.sf_fps or not self.sample_factory_fps:
            return None
        return (sum(self.sf_fps) / len(self.sf_fps)) / (sum(self.sample_factory_fps) / len(self.sample_factory_fps))


def run_training(
    python: str, suite: Suite, extra: list[str], cwd: Path, script: str | None = None
) -> tuple[float, dict]:
    """One training run in a fresh folder; returns the overall FPS it printed last and its summary.json (empty
    when it wrote none, as Sample Factory's runs). `script`: a file to run instead of the suite's module."""
    with tempfile.TemporaryDirectory(prefix="sf_benchmark_") as train_dir:
        entry = [script] if script is not None else ["-m", suite.module]
        cmd = [python, *entry, *suite.flags, *extra, f"--train_dir={train_dir}", "--experiment=bench"]
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        summary_path = Path(train_dir) / "bench" / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    found = COLLECTED.findall(ANSI.sub("", proc.stdout + proc.stderr))
    if proc.returncode != 0 or not found:
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{tail}")
    return float(found[-1]), summary


def all_cores_ceiling(suite: Suite, extra: list[str], seconds: float = CEILING_S) -> tuple[float, int]:
    """Frames per second of the suite's envs stepped by every core (`sf.bench.ceiling`), and how many processes."""
    from sf.bench.ceiling import measure_ceiling
    from sf.bench.env_command import resolve

    family, cfg = resolve([*suite.flags, *extra])
    result = measure_ceiling(cfg, family, seconds)
    return result.fps, result.processes


def bare_env_rate(suite: Suite, seconds: float = 5.0) -> float:
    """Steps per second of one env with random actions in this process: the simulator's own ceiling per core (the
    env as its family's factory builds it without a config: its own defaults)."""
    family_of(suite.env).register_envs(suite.env)
    if "--batched_sampling=True" in suite.flags:
        return _bare_batched_rate(suite, seconds)
    env = create_env(suite.env, None)
    env.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            env.reset()
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def _bare_batched_rate(suite: Suite, seconds: float) -> float:
    """The same for a batched env: copies stepped per second by its own `step` with one fixed batch of random
    actions, nothing of sf between the calls."""
    from sf.bench.env_command import resolve

    _, cfg = resolve(list(suite.flags))
    env = create_env(suite.env, cfg)
    env.reset()
    actions = np.stack([env.action_space.sample() for _ in range(env.num_agents)])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions)
        steps += env.num_agents
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def describe_machine() -> dict:
    """The CPU model, the core count, the GPU torch sees and its driver (None without one), torch's version and its
    CUDA's: which figures belong together."""
    import torch

    from sf.breakdown.nvml import driver_version

    lines = Path("/proc/cpuinfo").read_text().splitlines()
    models = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu": models[0] if models else platform.processor(),
        "cores": os.cpu_count(),
        "gpu": gpu,
        "driver": driver_version() if gpu else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


@contextmanager
def private_cwd(given: str | None) -> Iterator[Path]:
    """The working folder of Sample Factory's runs: the one given, else a new one only this user can write.
    `python -m` puts its working folder first on `sys.path`; a shared one such as /tmp would let anyone there
    plant a module the run imports."""
    if given is not None:
        yield Path(given)
        return
    with tempfile.TemporaryDirectory(prefix="sf_benchmark_cwd_") as folder:
        yield Path(folder)


def run_suite(args: argparse.Namespace) -> int:
    suite = SUITES[args.suite]
    result = Result(args.suite, f"python -m {suite.module} {' '.join(suite.flags + tuple(args.extra))}")
    result.machine = describe_machine()
    print(f"machine: {result.machine['cpu']}, {result.machine['cores']} cores, GPU {result.machine['gpu']}", flush=True)
    repo = Path(__file__).resolve().parents[2]
    with private_cwd(args.sample_factory_cwd) as sf_cwd:
        for i in range(args.repeats):
            result.bare_env_rates.append(bare_env_rate(suite))
            print(f"run {i}: bare env {result.bare_env_rates[-1]:.0f} steps/s in one loop on one core", flush=True)
            ceiling, processes = all_cores_ceiling(suite, args.extra)
            result.ceiling_fps.append(ceiling)
            print(f"run {i}: ceiling {ceiling:.0f} frames/s, envs stepped by {processes} processes", flush=True)
            fps, summary = run_training(sys.executable, suite, args.extra, repo)
            result.sf_fps.append(fps)
            result.precision = summary.get("precision") or result.precision
            print(f"run {i}: sf {result.sf_fps[-1]:.1f} FPS", flush=True)
            if args.sample_factory:
                script = str(repo / suite.sample_factory_script) if suite.sample_factory_script else None
                result.sample_factory_fps.append(
                    run_training(args.sample_factory, suite, args.extra, sf_cwd, script)[0]
                )
                print(f"run {i}: Sample Factory {result.sample_factory_fps[-1]:.1f} FPS", flush=True)
    if result.ratio is not None:
        print(f"ratio sf / Sample Factory: {result.ratio:.2f}x")
    from sf.bench.table import describe_precision

    print(f"sf precision: {describe_precision(result.precision)}")
    print(f"sf FPS / bare env steps per second in one loop: {result.share_of_bare_env:.1%}")
    print(f"sf FPS / ceiling (every core stepping the envs): {result.share_of_ceiling:.1%}")
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    **asdict(result),
                    "ratio": result.ratio,
                    "bare_env_steps_per_s": result.bare_env_steps_per_s,
                    "share_of_bare_env": result.share_of_bare_env,
                    "share_of_ceiling": result.share_of_ceiling,
                },
                indent=2,
            )
        )
    return 0
