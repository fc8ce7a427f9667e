"""What each profiling backend costs in throughput: the CartPole suite of `sf.benchmark` with profiling off, then with
each backend on every group and on the learner alone, alternating within one invocation so that every setting sees
the same machine. Runs are short; read the figures as relative.

    python benchmarks/bench_profiling_cost.py [--rounds 2] [--frames 200000] [--out results.json]
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
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    suite = SUITES["cartpole"]
    repo = Path(__file__).resolve().parents[1]
    fps: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for round_ in range(args.rounds):
        for name, flags in SETTINGS.items():
            fps[name].append(run_training(sys.executable, suite, [*flags, f"--train_for_env_steps={args.frames}"], repo))
            print(f"round {round_}: {name}: {fps[name][-1]:.0f} FPS", flush=True)
    off = statistics.mean(fps["off"])
    print("| setting | FPS (mean) | vs off |\n| --- | --- | --- |")
    for name, values in fps.items():
        print(f"| {name} | {statistics.mean(values):.0f} | {statistics.mean(values) / off:.2f}x |")
    if args.out:
        Path(args.out).write_text(json.dumps(fps, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
