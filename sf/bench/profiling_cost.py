"""What each profiling setting costs in throughput: a suite of `sf.benchmark` (CartPole by default, or Doom) with each
backend on every group and on the learner alone, and with `--profiling_timeline=True`, each run between two runs
with profiling off in the same invocation; a setting's figure is its FPS over the mean of its two neighbours, which
cancels a machine whose load drifts during the invocation. Beside FPS it records the CPU seconds of each run's whole
process tree per million frames, which a busy machine disturbs less than wall time.

    python -m sf.bench.profiling_cost [--suite doom] [--settings timeline ...] [--rounds 1] [--frames 40000]
        [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
from pathlib import Path

from sf.bench.suites import SUITES, run_training

# torch.profiler keeps every op it records in memory, so it is measured the way it is meant to run: a window
SETTINGS: dict[str, list[str]] = {"off": [], "timeline": ["--profiling_timeline=True"]}
for backend in ("cprofile", "yappi", "pyinstrument", "py_spy", "torch"):
    window = ["--profiling_steps", "5", "6", "7"] if backend == "torch" else []
    SETTINGS[f"{backend} all"] = [f"--profiling_backend={backend}", "--profiling_worker_groups", "all", *window]
    SETTINGS[f"{backend} Learner"] = [f"--profiling_backend={backend}", "--profiling_worker_groups", "Learner", *window]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="cartpole")
    parser.add_argument(
        "--settings",
        nargs="+",
        default=None,
        choices=[s for s in SETTINGS if s != "off"],
        metavar="SETTING",
        help=f"the settings to measure (default: all of {list(SETTINGS)[1:]})",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--frames", type=int, default=40_000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    names = args.settings or [s for s in SETTINGS if s != "off"]
    suite = SUITES[args.suite]
    repo = Path(__file__).resolve().parents[2]
    cpu: dict[str, list[float]] = {name: [] for name in ["off", *names]}

    def fps_of(name: str) -> float:
        before = _children_cpu_s()
        fps = run_training(sys.executable, suite, [*SETTINGS[name], f"--train_for_env_steps={args.frames}"], repo)
        cpu[name].append((_children_cpu_s() - before) * 1e6 / args.frames)
        return fps

    fps: dict[str, list[float]] = {name: [] for name in ["off", *names]}
    ratio: dict[str, list[float]] = {name: [] for name in names}
    around: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        before = fps_of("off")
        fps["off"].append(before)
        for name in names:
            fps[name].append(fps_of(name))
            after = fps_of("off")
            fps["off"].append(after)
            around[name].append((before + after) / 2)
            ratio[name].append(fps[name][-1] / around[name][-1])
            print(
                f"round {round_}: {name}: {fps[name][-1]:.0f} FPS, off around it {before:.0f} / {after:.0f}", flush=True
            )
            before = after
    print(
        "| setting | FPS | FPS off (the runs around it) | ratio | CPU s per 1M frames (off: "
        f"{statistics.mean(cpu['off']):.1f}) |\n| --- | --- | --- | --- | --- |"
    )
    for name, values in ratio.items():
        print(
            f"| {name} | {statistics.mean(fps[name]):.0f} | {statistics.mean(around[name]):.0f} | "
            f"{statistics.mean(values):.3f} | {statistics.mean(cpu[name]):.1f} |"
        )
    if args.out:
        Path(args.out).write_text(
            json.dumps({"fps": fps, "ratio_to_neighbouring_off": ratio, "cpu_s_per_million_frames": cpu}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
