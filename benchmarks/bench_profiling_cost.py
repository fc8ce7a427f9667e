"""What each profiling backend costs in throughput: the CartPole suite of `sf.benchmark` with each backend on every
group and on the learner alone, each run between two runs with profiling off in the same invocation; a setting's
figure is its FPS over the mean of its two neighbours, which cancels a machine whose load drifts during the
invocation. Runs are short; read the figures as relative.

    python benchmarks/bench_profiling_cost.py [--rounds 1] [--frames 40000] [--out results.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from sf.benchmark import SUITES, run_training

# torch.profiler keeps every op it records in memory, so it is measured the way it is meant to run: a window
SETTINGS: dict[str, list[str]] = {"off": []}
for backend in ("cprofile", "yappi", "pyinstrument", "py_spy", "torch"):
    window = ["--profiling_steps", "5", "6", "7"] if backend == "torch" else []
    SETTINGS[f"{backend} all"] = [f"--profiling_backend={backend}", "--profiling_worker_groups", "all", *window]
    SETTINGS[f"{backend} Learner"] = [f"--profiling_backend={backend}", "--profiling_worker_groups", "Learner", *window]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--frames", type=int, default=40_000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    suite = SUITES["cartpole"]
    repo = Path(__file__).resolve().parents[1]
    def fps_of(flags: list[str]) -> float:
        return run_training(sys.executable, suite, [*flags, f"--train_for_env_steps={args.frames}"], repo)

    fps: dict[str, list[float]] = {name: [] for name in SETTINGS}
    ratio: dict[str, list[float]] = {name: [] for name in SETTINGS if name != "off"}
    around: dict[str, list[float]] = {name: [] for name in ratio}
    for round_ in range(args.rounds):
        before = fps_of([])
        fps["off"].append(before)
        for name, flags in SETTINGS.items():
            if name == "off":
                continue
            fps[name].append(fps_of(flags))
            after = fps_of([])
            fps["off"].append(after)
            around[name].append((before + after) / 2)
            ratio[name].append(fps[name][-1] / around[name][-1])
            print(f"round {round_}: {name}: {fps[name][-1]:.0f} FPS, off around it {before:.0f} / {after:.0f}", flush=True)
            before = after
    print("| setting | FPS | FPS off (the runs around it) | ratio |\n| --- | --- | --- | --- |")
    for name, values in ratio.items():
        print(f"| {name} | {statistics.mean(fps[name]):.0f} | {statistics.mean(around[name]):.0f} | "
              f"{statistics.mean(values):.2f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"fps": fps, "ratio_to_neighbouring_off": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
