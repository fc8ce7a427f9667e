"""Plot reward per env frame for sf and Sample Factory 2.1.1 from the CSVs in docs/learning_curves/.

    python docs/plot_learning_curves.py            # GoalGate: docs/img/goal_gate_learning.png and the table
    python docs/plot_learning_curves.py breakout   # Breakout: docs/img/breakout_learning.png and the table

Each CSV holds `frames,reward` (the average return of the last 100 episodes, as each framework logs it to
TensorBoard); files are named `<run>_s<seed>.csv`, GoalGate's in the folder itself, another task's in its own
subfolder. The table gives each run's value at fixed frame counts (the last value logged at or before each count;
blank where the run stopped earlier).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CURVES = ROOT / "docs" / "learning_curves"
LABELS = {"sf": "sf", "samplefactory": "Sample Factory 2.1.1", "sf_before": "sf before the changes"}
TABLE_NAMES = {"samplefactory": "Sample Factory 2.1.1", "sf_before": "sf before the changes"}
COLORS = {"sf": "tab:blue", "samplefactory": "tab:orange", "sf_before": "tab:gray"}


@dataclass(frozen=True)
class CurveSet:
    folder: Path
    png: Path
    title: str
    frames: tuple[int, ...]


CURVE_SETS = {
    "goal_gate": CurveSet(
        CURVES,
        ROOT / "docs" / "img" / "goal_gate_learning.png",
        "GoalGate (Dict obs, Tuple(Discrete, Box) actions), base defaults",
        (50_000, 100_000, 150_000, 200_000, 250_000, 300_000),
    ),
    "breakout": CurveSet(
        CURVES / "breakout",
        ROOT / "docs" / "img" / "breakout_learning.png",
        "atari_breakout, Atari defaults, whole-game score (sf 2 workers x 8 envs, Sample Factory 2 x 4)",
        (100_000, 200_000, 400_000, 600_000, 800_000, 1_000_000),
    ),
}


def load(folder: Path) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    runs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for path in sorted(folder.glob("*.csv")):
        data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
        runs[path.stem.rsplit("_s", 1)[0]].append((data[:, 0], data[:, 1]))
    return runs


def value_at(frames: np.ndarray, rewards: np.ndarray, at: int) -> float:
    seen = frames <= at
    if not seen.any() or frames[-1] < at - 10_000:
        return float("nan")
    return float(rewards[seen][-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("curves", nargs="?", choices=sorted(CURVE_SETS), default="goal_gate")
    curve_set = CURVE_SETS[parser.parse_args(argv).curves]
    runs = load(curve_set.folder)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, seeds in sorted(runs.items()):
        for i, (frames, rewards) in enumerate(seeds):
            ax.plot(
                frames / 1e3,
                rewards,
                color=COLORS.get(name),
                alpha=0.8,
                linestyle="-" if i == 0 else "--",
                label=f"{LABELS.get(name, name)}, seed {i + 1}",
            )
    ax.set_xlabel("env frames (thousands)")
    ax.set_ylabel("average episode return (last 100)")
    ax.set_title(curve_set.title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    curve_set.png.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(curve_set.png, dpi=100)
    print("| run | seed | " + " | ".join(f"{f // 1000}k" for f in curve_set.frames) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in curve_set.frames) + " |")
    for name, seeds in sorted(runs.items()):
        for i, (frames, rewards) in enumerate(seeds):
            cells = [value_at(frames, rewards, at) for at in curve_set.frames]
            row = " | ".join("" if np.isnan(c) else f"{c:.1f}" for c in cells)
            print(f"| {TABLE_NAMES.get(name, name)} | {i + 1} | {row} |")
        if len(seeds) > 1:
            means = [np.mean([value_at(f, r, at) for f, r in seeds]) for at in curve_set.frames]
            print(f"| {TABLE_NAMES.get(name, name)} | mean | " + " | ".join(f"{m:.1f}" for m in means) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
