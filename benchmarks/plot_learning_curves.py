"""Plot GoalGate reward per env frame for sf and Sample Factory 2.1.1 from the CSVs in benchmarks/learning_curves/.

    python benchmarks/plot_learning_curves.py            # writes docs/img/goal_gate_learning.png, prints the table

Each CSV holds `frames,reward` (the average return of the last 100 episodes, as each framework logs it to
TensorBoard); files are named `<framework>_s<seed>.csv`. The table gives each framework's mean over seeds at
fixed frame counts (the last value logged at or before each count).
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CURVES = ROOT / "benchmarks" / "learning_curves"
PNG = ROOT / "docs" / "img" / "goal_gate_learning.png"
FRAMES = (50_000, 100_000, 150_000, 200_000, 250_000, 300_000)
LABELS = {"sf": "sf", "samplefactory": "Sample Factory 2.1.1"}


def load() -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    runs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for path in sorted(CURVES.glob("*.csv")):
        data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
        runs[path.stem.rsplit("_s", 1)[0]].append((data[:, 0], data[:, 1]))
    return runs


def value_at(frames: np.ndarray, rewards: np.ndarray, at: int) -> float:
    seen = frames <= at
    return float(rewards[seen][-1]) if seen.any() else float("nan")


def main() -> int:
    runs = load()
    fig, ax = plt.subplots(figsize=(7, 4))
    for (name, seeds), color in zip(sorted(runs.items()), ("tab:blue", "tab:orange")):
        for i, (frames, rewards) in enumerate(seeds):
            ax.plot(frames / 1e3, rewards, color=color, alpha=0.8, label=f"{LABELS.get(name, name)}" if i == 0 else None)
    ax.set_xlabel("env frames (thousands)")
    ax.set_ylabel("average episode return (last 100)")
    ax.set_title("GoalGate (Dict obs, Tuple(Discrete, Box) actions), base defaults")
    ax.grid(alpha=0.3)
    ax.legend()
    PNG.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(PNG, dpi=100)
    print("| framework | seeds | " + " | ".join(f"{f // 1000}k" for f in FRAMES) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in FRAMES) + " |")
    for name, seeds in sorted(runs.items()):
        means = [np.mean([value_at(f, r, at) for f, r in seeds]) for at in FRAMES]
        print(f"| {LABELS.get(name, name)} | {len(seeds)} | " + " | ".join(f"{m:.1f}" for m in means) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
