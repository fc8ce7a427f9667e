"""Throughput benchmarks, run as a user would.

`python -m sf.benchmark --suite cartpole`: each suite is one training command in benchmark mode. The overall FPS
is the run's own last line, `Collected {...}, FPS: X`. With `--sample_factory=/path/to/python` the same command
also runs under Sample Factory (an interpreter with `sample-factory` installed), alternating with ours, so both
figures come from the same session of the same machine; the report gives their ratio.

`python -m sf.benchmark --env=CartPole-v1 [training flags]`: the simulator ceiling of the layout, sampling only
and training side by side, as a table, `benchmark.json` and `benchmark.png` in `<train_dir>/<experiment>/`.

`--auto_tune=True --tune_budget_s=N` (with `--env=...` or `--suite ...`): short runs of candidate layouts chosen
by the profile report's verdicts; prints the best layout, its FPS and the command that trains with it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

COLLECTED = re.compile(r"Collected \{.*\}, FPS: ([\d.]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Suite:
    module: str  # the same module path exists in sf_examples of both frameworks
    flags: tuple[str, ...]
    env_probe: str  # python expression creating one env, for the bare-simulator figure


# one gymnasium Atari env (ale-py): the emulator's own rate, in steps of 4 frames
ATARI_PROBE = (
    "__import__('sf_examples.atari.atari_envs', fromlist=['x'])"
    ".make_atari_env('atari_breakout', __import__('types').SimpleNamespace(env_frameskip=4), None)"
)

SUITES: dict[str, Suite] = {
    "cartpole": Suite(
        "sf_examples.train_gym_env",
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
        "gymnasium.make('CartPole-v1')",
    ),
    "doom": Suite(
        "sf_examples.vizdoom.train_vizdoom",
        (
            "--env=doom_defend_the_center",
            "--env_frameskip=4",
            "--use_rnn=True",
            "--num_workers=4",
            "--num_envs_per_worker=8",
            "--num_policies=1",
            "--num_epochs=1",
            "--rollout=32",
            "--recurrence=32",
            "--batch_size=1024",
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
            "--train_for_env_steps=250000",
        ),
        "__import__('sf_examples.vizdoom.doom_envs', fromlist=['x'])"
        ".make_doom_env('doom_defend_the_center', None, None)",
    ),
    # Breakout with the Atari examples' own defaults (4 epochs of 4 x 256 samples per 1024, synchronous), two
    # workers of 4 envs in two splits: Sample Factory's synchronous mode needs one round of every env's rollout
    # (2 x 4 x 128) to be a whole number of 1024-sample iterations
    "atari": Suite(
        "sf_examples.atari.train_atari",
        (
            "--env=atari_breakout",
            "--num_workers=2",
            "--num_envs_per_worker=4",
            "--worker_num_splits=2",
            "--benchmark=True",
            "--device=cpu",
            "--train_for_env_steps=100000",
        ),
        ATARI_PROBE,
    ),
    # the same game through EnvPool with the EnvPool examples' defaults: two workers, each stepping one pool of 16
    "envpool": Suite(
        "sf_examples.envpool.atari.train_envpool_atari",
        (
            "--env=atari_breakout",
            "--num_workers=2",
            "--num_envs_per_worker=1",
            "--env_agents=16",
            "--benchmark=True",
            "--device=cpu",
            "--train_for_env_steps=100000",
        ),
        ATARI_PROBE,
    ),
    "ant": Suite(
        "sf_examples.mujoco.train_mujoco",
        ("--env=mujoco_ant", "--serial_mode=True", "--async_rl=False", "--device=cpu", "--train_for_env_steps=100000"),
        "gymnasium.make('Ant-v5')",
    ),
}


@dataclass
class Result:
    suite: str
    command: str
    sf_fps: list[float] = field(default_factory=list)
    sample_factory_fps: list[float] = field(default_factory=list)
    bare_env_rates: list[float] = field(default_factory=list)  # one before each repeat: the machine's speed drifts

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
    def ratio(self) -> float | None:
        if not self.sf_fps or not self.sample_factory_fps:
            return None
        return (sum(self.sf_fps) / len(self.sf_fps)) / (sum(self.sample_factory_fps) / len(self.sample_factory_fps))


def run_training(python: str, suite: Suite, extra: list[str], cwd: Path) -> float:
    """One training run in a fresh folder; returns the overall FPS it printed last."""
    with tempfile.TemporaryDirectory(prefix="sf_benchmark_") as train_dir:
        cmd = [python, "-m", suite.module, *suite.flags, *extra, f"--train_dir={train_dir}", "--experiment=bench"]
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    found = COLLECTED.findall(ANSI.sub("", proc.stdout + proc.stderr))
    if proc.returncode != 0 or not found:
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{tail}")
    return float(found[-1])


def bare_env_rate(suite: Suite, seconds: float = 5.0) -> float:
    """Steps per second of one env with random actions in this process: the simulator's own ceiling per core."""
    import gymnasium  # noqa: F401  (used by the probe expressions)

    env = eval(suite.env_probe)  # the expressions are the constants above, not user input
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


def _parser() -> argparse.ArgumentParser:
    from sf.cfg.arguments import str2bool

    parser = argparse.ArgumentParser(
        prog="python -m sf.benchmark",
        description=__doc__,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--suite",
        choices=sorted(SUITES),
        default=None,
        help="compare with Sample Factory on this suite (or, with --auto_tune, tune its layout)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="suite mode: runs of each framework, alternating")
    parser.add_argument(
        "--sample_factory",
        default=None,
        help="python interpreter of a venv with sample-factory installed, to run the same command",
    )
    parser.add_argument("--sample_factory_cwd", default=None, help="scratch folder for Sample Factory's runs")
    parser.add_argument("--out", default=None, help="suite mode: write the result as JSON to this file")
    parser.add_argument(
        "--phase_s",
        type=float,
        default=30.0,
        help="env mode: seconds each phase runs (sampling and training stop earlier if the "
        "command line gives --train_for_env_steps or --train_for_seconds)",
    )
    parser.add_argument(
        "--auto_tune",
        type=str2bool,
        nargs="?",
        const=True,
        default=False,
        help="try layouts guided by the profile report's verdicts and print the fastest",
    )
    parser.add_argument("--tune_budget_s", type=float, default=300.0, help="auto-tune: total seconds for all trials")
    parser.add_argument(
        "--tune_trial_s",
        type=float,
        default=None,
        help="auto-tune: seconds of each trial run (default: budget / 8, within 8..60)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Flags this tool does not know are training flags; in suite mode they come after `--`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: len(argv) - len(extra) - 1] if "--" in argv else argv
    args, training_flags = _parser().parse_known_args(argv)
    args.extra = extra
    if args.suite and not args.auto_tune:
        if training_flags:
            return _usage_error(f"{training_flags[0]}: suite mode takes training flags only after `--`")
        return run_suite(args)
    if args.suite:
        training_flags = [*SUITES[args.suite].flags, *args.extra, *training_flags]
    elif args.extra:
        training_flags = [*args.extra, *training_flags]
    from sf.bench.cli import run_env_mode

    return run_env_mode(training_flags, args)


def _usage_error(message: str) -> int:
    print(f"sf.benchmark: error: {message}", file=sys.stderr)
    return 2


def run_suite(args: argparse.Namespace) -> int:
    suite = SUITES[args.suite]
    result = Result(args.suite, f"python -m {suite.module} {' '.join(suite.flags + tuple(args.extra))}")
    repo = Path(__file__).resolve().parents[1]
    sf_cwd = Path(args.sample_factory_cwd or tempfile.gettempdir())
    for i in range(args.repeats):
        result.bare_env_rates.append(bare_env_rate(suite))
        print(f"run {i}: bare env {result.bare_env_rates[-1]:.0f} steps/s on one core", flush=True)
        result.sf_fps.append(run_training(sys.executable, suite, args.extra, repo))
        print(f"run {i}: sf {result.sf_fps[-1]:.1f} FPS", flush=True)
        if args.sample_factory:
            result.sample_factory_fps.append(run_training(args.sample_factory, suite, args.extra, sf_cwd))
            print(f"run {i}: Sample Factory {result.sample_factory_fps[-1]:.1f} FPS", flush=True)
    if result.ratio is not None:
        print(f"ratio sf / Sample Factory: {result.ratio:.2f}x")
    print(f"sf FPS / bare env steps per second: {result.share_of_bare_env:.1%}")
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    **asdict(result),
                    "ratio": result.ratio,
                    "bare_env_steps_per_s": result.bare_env_steps_per_s,
                    "share_of_bare_env": result.share_of_bare_env,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
