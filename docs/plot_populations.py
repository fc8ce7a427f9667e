"""Curves of population runs: each policy's episode return against its own env frames.

    python docs/plot_populations.py acrobot --runs TRAIN_DIR   # read the runs' TensorBoard files into CSVs, then plot
    python docs/plot_populations.py doom                        # plot from the CSVs already in the docs

`--runs` reads the experiments of a set (named as its commands in docs/populations.md name them) from TRAIN_DIR with
`sf.analysis.tb_scalars`, which reads sf's and Sample Factory's event files alike, and writes one CSV per policy,
`<experiment>_p<policy>.csv` (`frames,value`), into `docs/learning_curves/populations/<set>/`. The plot is
`docs/img/population_<set>.png`; the table printed gives the values at fixed frame counts of a policy.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "docs")]  # sf, and the curve rules of plot_learning_curves.py
import plot_learning_curves as learning_curves  # noqa: E402

from sf.analysis.tb_scalars import read_scalars  # noqa: E402

CURVES = ROOT / "docs" / "learning_curves" / "populations"


@dataclass(frozen=True)
class PopulationSet:
    experiments: tuple[str, ...]  # glob patterns of experiment folders
    tag: str  # the TensorBoard scalar plotted, per policy
    title: str
    frames: tuple[int, ...]  # the table's columns, frames of a policy


SETS = {
    "acrobot": PopulationSet(
        ("sf_pbt_s*", "samplefactory_pbt_s*", "sf_nopbt_s*"),
        "policy_stats/avg_true_objective",
        "Acrobot-v1, 4 policies, policies 2 and 3 starting at learning rate 1e-7",
        (50_000, 75_000, 100_000, 150_000, 200_000),
    ),
    "doom": PopulationSet(
        ("single_s*", "population_s*"),
        "reward/avg_episode_reward",
        "doom_basic: one policy, and a PBT population of 4 (frames of each policy)",
        (100_000, 150_000, 200_000, 250_000, 300_000),
    ),
}
NAMES = {
    "sf_pbt": "sf, PBT",
    "samplefactory_pbt": "Sample Factory 2.1.1, PBT",
    "sf_nopbt": "sf, no PBT step",
    "single": "one policy",
    "population": "population of 4",
}


def import_runs(pop: PopulationSet, train_dir: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for pattern in pop.experiments:
        for exp in sorted(train_dir.glob(pattern)):
            for summary in sorted((exp / ".summary").iterdir()):
                series = read_scalars(exp, int(summary.name)).get(pop.tag, [])
                if not series:
                    print(f"{exp.name}, policy {summary.name}: no {pop.tag} yet", file=sys.stderr)
                    continue
                rows = "".join(f"{frames},{value:.4f}\n" for frames, value in series)
                (out / f"{exp.name}_p{summary.name}.csv").write_text("frames,value\n" + rows)


def load(folder: Path) -> dict[str, dict[int, dict[int, tuple[np.ndarray, np.ndarray]]]]:
    """run name -> seed -> policy -> (frames, values)."""
    runs: dict = {}
    for path in sorted(folder.glob("*_s*_p*.csv")):
        stem, policy = path.stem.rsplit("_p", 1)
        name, seed = stem.rsplit("_s", 1)
        data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
        runs.setdefault(name, {}).setdefault(int(seed), {})[int(policy)] = (data[:, 0], data[:, 1])
    return runs


def value_at(curve: tuple[np.ndarray, np.ndarray], at: int) -> float:
    return learning_curves.value_at(*curve, at)


def cell(value: float) -> str:
    return "" if np.isnan(value) else f"{value:.1f}"


def plot_per_policy(pop: PopulationSet, runs: dict, png: Path) -> None:
    """A panel per run (seed 1), a line per policy: replacements show as jumps of the replaced policies."""
    fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 3.4), sharey=True, squeeze=False)
    for ax, (name, seeds) in zip(axes[0], runs.items()):
        for policy, (frames, values) in sorted(seeds[min(seeds)].items()):
            ax.plot(frames / 1e3, values, label=f"policy {policy}")
        ax.set_title(NAMES.get(name, name), fontsize=10)
        ax.set_xlim(0, max(pop.frames) * 1.25 / 1e3)  # the policies that lag behind run on; the table's range matters
        ax.set_xlabel("frames of the policy (thousands)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("average episode return")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(pop.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print("| run | policy | " + " | ".join(f"{f // 1000}k" for f in pop.frames) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in pop.frames) + " |")
    for name, seeds in runs.items():
        for policy, curve in sorted(seeds[min(seeds)].items()):
            row = " | ".join(cell(value_at(curve, at)) for at in pop.frames)
            print(f"| {NAMES.get(name, name)} | {policy} | {row} |")


def plot_against_one_policy(pop: PopulationSet, runs: dict, png: Path) -> None:
    """Each seed's one-policy curve beside the mean of the population's policies and its best policy."""
    fig, ax = plt.subplots(figsize=(7, 4))
    grid = np.linspace(0, max(pop.frames), 61)
    table = {}
    for name, color in (("single", "tab:blue"), ("population", "tab:orange")):
        for i, (seed, policies) in enumerate(sorted(runs.get(name, {}).items())):
            curves = np.array([[value_at(c, at) for at in grid] for c in policies.values()])
            label = NAMES[name] if len(policies) == 1 else f"{NAMES[name]}, mean of its policies"
            style = ("-", "--", ":")[i % 3]
            ax.plot(grid / 1e3, curves.mean(axis=0), color=color, linestyle=style, label=f"{label}, seed {seed}")
            for at in pop.frames:
                values = [value_at(c, at) for c in policies.values()]
                table.setdefault((name, "mean"), {}).setdefault(at, []).append(np.mean(values))
                if len(policies) > 1:
                    table.setdefault((name, "best"), {}).setdefault(at, []).append(np.max(values))
                    table.setdefault((name, "worst"), {}).setdefault(at, []).append(np.min(values))
    ax.set_xlabel("frames of a policy (thousands)")
    ax.set_ylabel("average episode return (last 100)")
    ax.set_title(pop.title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print("| run | over seeds | " + " | ".join(f"{f // 1000}k" for f in pop.frames) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in pop.frames) + " |")
    for (name, kind), by_frames in table.items():
        what = {"mean": "mean", "best": "best policy", "worst": "worst policy"}[kind]
        row = " | ".join(
            f"{np.mean(v):.1f} ± {np.std(v):.1f}" if len(v) > 1 else cell(v[0]) for v in by_frames.values()
        )
        print(f"| {NAMES[name]} | {what} | {row} |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("set", choices=sorted(SETS))
    parser.add_argument("--runs", type=Path, default=None, help="a train_dir holding the set's experiments")
    args = parser.parse_args(argv)
    pop, folder = SETS[args.set], CURVES / args.set
    if args.runs is not None:
        import_runs(pop, args.runs, folder)
    runs = load(folder)
    if not runs:
        print(f"no curves in {folder}: read a set's runs with --runs TRAIN_DIR", file=sys.stderr)
        return 2
    png = ROOT / "docs" / "img" / f"population_{args.set}.png"
    if args.set == "doom":
        plot_against_one_policy(pop, runs, png)
    else:
        plot_per_policy(pop, {n: runs[n] for n in NAMES if n in runs}, png)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
