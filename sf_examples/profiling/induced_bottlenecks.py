"""Four short runs, each limited by a different kind of work, and a check of the report's what-if estimate.

`python -m sf_examples.profiling.induced_bottlenecks --train_dir=/tmp/whatif` runs every case twice: as listed,
and with the limiting component made faster (the env's sleep halved, the encoder narrowed, half the epochs, more
envs per message). It prints what the report's model predicts from the first run for the speed-ups actually
measured on every kind of work in every group of processes, next to the FPS change measured in the second run.

`python -m sf_examples.profiling.induced_bottlenecks --watch --train_dir=/tmp/watch` runs one experiment whose
simulator can be made slow while it runs (`touch <experiment dir>/induce_simulation`, `rm` it to switch back), to
watch `python -m sf.profile top <experiment dir>` follow the change.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sf.analysis.bottleneck import KINDS, group_kind_per_frame, kind_seconds, predict_fps
from sf.analysis.run_data import load_experiment
from sf.utils.roles import Role

COMMON = ["--num_workers=2", "--benchmark=True", "--experiment_summaries_interval=1", "--seed=1", "--device=cpu"]


@dataclass(frozen=True)
class Case:
    kind: str
    module: str
    flags: tuple[str, ...]
    faster: tuple[str, ...]  # flags appended to make the limiting kind about 2x faster
    frames: int  # env frames for a run of a few seconds on two free cores

    def argv(self, train_dir: str, experiment: str, faster: bool = False, frames: int | None = None) -> list[str]:
        return [
            sys.executable,
            "-m",
            self.module,
            *COMMON,
            *self.flags,
            *(self.faster if faster else ()),
            f"--train_for_env_steps={frames or self.frames}",
            "--train_for_seconds=240",
            f"--train_dir={train_dir}",
            f"--experiment={experiment}",
        ]


CASES = {
    "simulation": Case(
        "simulation",
        "sf_examples.profiling.sleepy_env",
        ("--env=sleepy_cartpole_1000us", "--num_envs_per_worker=8", "--encoder_mlp_layers", "16", "16"),
        ("--env=sleepy_cartpole_500us",),
        16_000,
    ),
    "inference": Case(
        "inference",
        "sf_examples.train_gym_env",
        (
            "--env=CartPole-v1",
            "--num_envs_per_worker=2",
            "--encoder_mlp_layers",
            "2048",
            "2048",
            "2048",
            "--batch_size=512",
            "--num_batches_per_epoch=1",
            "--num_epochs=1",
            "--rollout=16",
        ),
        ("--encoder_mlp_layers", "1448", "1448", "1448"),
        6_000,
    ),
    "learner": Case(
        "learner",
        "sf_examples.train_gym_env",
        ("--env=CartPole-v1", "--num_envs_per_worker=8", "--encoder_mlp_layers", "256", "256", "--num_epochs=16"),
        ("--num_epochs=8",),
        12_000,
    ),
    # inference in a process of its own: a request and its actions cross processes (in the rollout workers, the
    # default for so small a model, there would be no per-step messages to be bound by)
    "communication": Case(
        "communication",
        "sf_examples.train_gym_env",
        (
            "--env=CartPole-v1",
            "--num_envs_per_worker=32",
            "--encoder_mlp_layers",
            "8",
            "8",
            "--worker_num_splits=4",
            "--batch_size=4096",
            "--num_batches_per_epoch=1",
            "--num_epochs=1",
            "--inference_placement=own_process",
        ),
        ("--worker_num_splits=2",),
        150_000,
    ),
}


# a simulator that sleeps 2 ms a step only while `<experiment dir>/induce_simulation` exists (sleepy_env.SWITCH_FILE)
SWITCHABLE = Case(
    "simulation",
    "sf_examples.profiling.sleepy_env",
    ("--env=switch_cartpole_2000us", "--num_envs_per_worker=8", "--encoder_mlp_layers", "16", "16"),
    (),
    10**12,
)


def watch(train_dir: str, seconds: float) -> int:
    """Run the switchable case in the foreground for `seconds`, after saying how to watch it and flip the switch."""
    from sf_examples.profiling.sleepy_env import SWITCH_FILE

    folder = Path(train_dir) / "switchable"
    print(
        f"watch it:   python -m sf.profile top {folder}\n"
        f"slow sim:   touch {folder / SWITCH_FILE}   (the verdict turns simulation-bound)\n"
        f"fast again: rm {folder / SWITCH_FILE}\n",
        flush=True,
    )
    argv = SWITCHABLE.argv(train_dir, "switchable") + [
        f"--train_for_seconds={seconds:g}",
        "--restart_behavior=overwrite",
    ]
    return subprocess.run(argv, env=dict(os.environ, PYTHONUNBUFFERED="1")).returncode


def run_case(
    case: Case, train_dir: str, experiment: str, faster: bool = False, frames: int | None = None, timeout: float = 600
) -> Path:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    done = subprocess.run(
        case.argv(train_dir, experiment, faster, frames), env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise RuntimeError(f"{case.kind} run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return Path(train_dir) / experiment


def kind_per_frame(experiment_dir: Path) -> dict[str, float]:
    """Seconds of each kind of work per env frame over the steady window, summed over components."""
    exp = load_experiment(experiment_dir)
    frames = exp.fps * max(c.activity.lifetime_s for c in exp.components if c.role != Role.RUNNER)
    totals = {kind: 0.0 for kind in KINDS}
    for c in exp.components:
        for kind, seconds in kind_seconds(c).items():
            totals[kind] += seconds / frames
    return totals


def check(case: Case, train_dir: str) -> dict:
    """Both runs, the speed-up measured on every kind, and the model's FPS for those speed-ups next to the real one.

    The prediction takes the speed-up measured on each kind in each group of processes, for every kind: a narrower
    encoder also makes the learner faster, and fewer messages per frame make the inference worker's batches larger,
    its messages fewer, and the rollout workers' per-message code rarer, each by a different factor. So the check
    tests the model, not the choice of knob. `predicted_kind_only` feeds it the limiting kind's speed-ups alone."""
    base = run_case(case, train_dir, f"{case.kind}_base")
    fast = run_case(case, train_dir, f"{case.kind}_fast", faster=True)
    before, after = kind_per_frame(base), kind_per_frame(fast)
    speedups = {k: before[k] / after[k] for k in KINDS if before[k] > 0 and after[k] > 0}
    base_exp, fast_exp = load_experiment(base), load_experiment(fast)
    group_before, group_after = group_kind_per_frame(base_exp), group_kind_per_frame(fast_exp)
    group_speedups = {
        key: group_before[key] / group_after[key]
        for key in group_before
        if group_before[key] > 0 and group_after.get(key, 0) > 0
    }
    fps_base, fps_fast = base_exp.fps, fast_exp.fps
    predicted = predict_fps(base_exp, group_speedups)
    kind_only = predict_fps(base_exp, {key: k for key, k in group_speedups.items() if key[1] == case.kind})
    return {
        "kind": case.kind,
        "speedup": speedups.get(case.kind, 1.0),
        "speedups": speedups,
        "fps_base": fps_base,
        "fps_fast": fps_fast,
        "predicted_change": predicted / fps_base - 1,
        "predicted_kind_only": kind_only / fps_base - 1,
        "measured_change": fps_fast / fps_base - 1,
        "fps_error": predicted / fps_fast - 1,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_dir", default="/tmp/sf_induced_bottlenecks")
    parser.add_argument("--kinds", nargs="*", default=list(CASES))
    parser.add_argument("--watch", action="store_true", help="run one experiment whose simulator is switched by a file")
    parser.add_argument("--seconds", type=float, default=600.0, help="--watch: how long the experiment runs")
    args = parser.parse_args(argv)
    if args.watch:
        return watch(args.train_dir, args.seconds)
    print(
        f"{'kind':<14} {'speed-up':>8} {'FPS before':>10} {'FPS after':>10} {'kind only':>9} {'predicted':>9} "
        f"{'measured':>9} {'FPS error':>9}   speed-up measured per kind"
    )
    for kind in args.kinds:
        r = check(CASES[kind], args.train_dir)
        print(
            f"{kind:<14} {r['speedup']:>7.2f}x {r['fps_base']:>10,.0f} {r['fps_fast']:>10,.0f} "
            f"{r['predicted_kind_only']:>+9.0%} {r['predicted_change']:>+9.0%} "
            f"{r['measured_change']:>+9.0%} {r['fps_error']:>+9.0%}   "
            + ", ".join(f"{k} {v:.2f}x" for k, v in r["speedups"].items()),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
