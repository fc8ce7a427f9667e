"""Learning per env frame against Sample Factory: `python -m sf.bench.learning --suite atari --seeds 3 --frames 300000
--sample_factory /path/to/sf-venv/bin/python [--games qbert ...] [-- training flags]`.

Each (seed, env) pair runs under every side before the next pair starts, so the frameworks alternate on the machine.
Both sides' metric comes from their own TensorBoard event files, against env frames. The outputs, in `--out`:
`learning_curves.csv` (mean and spread over seeds on a grid of frames), `learning_curves.png` (a panel per env) and
`results.md` (scores at a third, two thirds and all of the frames). Finished runs are kept and reused, so a
comparison cut short resumes where it stopped; `--sf_tree LABEL=PATH` (repeatable) runs sf from other source trees
(say, a checkout before a change) as sides of their own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sf.analysis.tb_scalars import read_scalars
from sf.bench import learning_curves
from sf.bench.learning_runs import RunSpec, Side, run, training_command
from sf.bench.learning_suites import LEARNING_SUITES, SAMPLE_FACTORY, SF, LearningSuite

SIDE_FILE = "side.json"  # in each side's folder: its label and whether it is sf (which tag holds the metric)
SF_ROOT = Path(__file__).resolve().parents[2]  # the source tree this sf is imported from


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sf.bench.learning",
        description=__doc__,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--suite", choices=sorted(LEARNING_SUITES), default="atari")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..N of every env on every side")
    parser.add_argument("--frames", type=int, default=300_000, help="env frames of every run (frameskip included)")
    parser.add_argument("--games", nargs="+", default=None, help="envs of the suite to run (default: the suite's)")
    parser.add_argument(
        "--sample_factory", default=None, help="python of a venv with sample-factory (2.1.1): adds its side"
    )
    parser.add_argument(
        "--sf_tree",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="an sf side running sf from the source tree PATH (repeatable); without any, this tree, labelled sf",
    )
    parser.add_argument("--out", default=None, help="output folder (default: train_dir/learning_<suite>)")
    parser.add_argument("--timeout_s", type=float, default=None, help="stop a run that takes longer than this")
    parser.add_argument(
        "--report_only", action="store_true", help="run nothing: rebuild the outputs from the finished runs"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = _parser().parse_args(argv[: len(argv) - len(extra) - 1] if "--" in argv else argv)
    suite = LEARNING_SUITES[args.suite]
    if args.seeds < 1 or args.frames < 1:
        return _usage_error("--seeds and --frames must be positive")
    trees = [tree.split("=", 1) for tree in args.sf_tree]
    for tree in trees:
        if len(tree) != 2 or not tree[0] or not (Path(tree[1]) / "sf" / "__init__.py").is_file():
            return _usage_error(f"--sf_tree: {'='.join(tree)!r} is not LABEL=PATH of a tree holding sf/__init__.py")
    if args.sample_factory is not None and not Path(args.sample_factory).is_file():
        return _usage_error(f"--sample_factory: {args.sample_factory} is not a file (give a venv's bin/python)")
    envs = [suite.env_name(g) for g in args.games] if args.games else list(suite.envs)
    out = Path(args.out or f"train_dir/learning_{args.suite}").resolve()
    sides = _sides(trees or [(SF, str(SF_ROOT))], args.sample_factory)
    specs = [
        _spec(suite, side, env, seed, args.frames, extra, out)
        for seed in range(1, args.seeds + 1)
        for env in envs
        for side in sides
    ]
    failed = 0 if args.report_only else _run_all(specs, args.timeout_s)
    results = collect(suite, out, envs, args.seeds)
    if not results:
        print(f"sf.bench.learning: no finished runs of {', '.join(envs)} in {out}", file=sys.stderr)
        return 1
    write_outputs(results, suite, args.frames, out)
    return 1 if failed else 0


def _sides(trees: list[tuple[str, str]], sample_factory: str | None) -> list[Side]:
    """The sf trees in the order given, then Sample Factory; no side sees another sf tree on its path."""
    paths = [str(SF_ROOT), *(str(Path(path).resolve()) for _, path in trees)]
    sides = [
        Side(label, sys.executable, pythonpath=(str(Path(path).resolve()),), hidden=tuple(paths))
        for label, path in trees
    ]
    if sample_factory:
        sides.append(Side(SAMPLE_FACTORY, sample_factory, hidden=tuple(paths), is_sf=False))
    return sides


def _spec(suite: LearningSuite, side: Side, env: str, seed: int, frames: int, extra: list[str], out: Path) -> RunSpec:
    folder = out / "runs" / env / side.slug
    flags = [
        f"--env={env}",
        *suite.flags,
        *(suite.sf_flags if side.is_sf else ()),
        f"--seed={seed}",
        f"--train_for_env_steps={frames}",
        *extra,
    ]
    return RunSpec(side, env, seed, training_command(side, suite.module, flags, folder, f"seed{seed}"), folder)


def _run_all(specs: list[RunSpec], timeout_s: float | None) -> int:
    failed = 0
    for i, spec in enumerate(specs, 1):
        head = f"[{i}/{len(specs)}] {spec.env} seed {spec.seed} {spec.side.label}"
        spec.folder.mkdir(parents=True, exist_ok=True)
        (spec.folder / SIDE_FILE).write_text(json.dumps({"label": spec.side.label, "is_sf": spec.side.is_sf}) + "\n")
        if (record := spec.done()) is not None:
            print(f"{head}: finished before ({record['wall_s']:.0f} s), kept", flush=True)
            continue
        print(f"{head}: running, log {spec.log_path}", flush=True)
        record = run(spec, timeout_s)
        if record.returncode != 0:
            failed += 1
            print(f"{head}: FAILED (exit {record.returncode}), see {spec.log_path}", flush=True)
        else:
            print(f"{head}: done in {record.wall_s:.0f} s", flush=True)
    return failed


def collect(suite: LearningSuite, out: Path, envs: list[str], seeds: int) -> learning_curves.Results:
    """Every finished run of seeds 1..N of these envs in `out`, of every side that ran there."""
    results: learning_curves.Results = {}
    for env in envs:
        folders = [p for p in (out / "runs" / env).glob("*") if (p / SIDE_FILE).is_file()]
        sides = [(p, json.loads((p / SIDE_FILE).read_text())) for p in folders]
        for side_dir, side in sorted(sides, key=lambda s: (not s[1]["is_sf"], s[1]["label"])):  # sf sides first
            tag = suite.sf_tag if side["is_sf"] else suite.sample_factory_tag
            curves = []
            for seed in range(1, seeds + 1):
                done = side_dir / f"seed{seed}.done.json"
                if done.is_file() and json.loads(done.read_text()).get("returncode") == 0:
                    points = read_scalars(side_dir / f"seed{seed}").get(tag, [])
                    curves.append(learning_curves.Curve(tuple(points)))
            if curves:
                results.setdefault(env, {})[side["label"]] = curves
    return results


def write_outputs(results: learning_curves.Results, suite: LearningSuite, frames: int, out: Path) -> None:
    from sf.bench.suites import describe_machine

    out.mkdir(parents=True, exist_ok=True)
    machine = describe_machine()
    table = learning_curves.markdown_table(results, frames, suite.metric)
    header = f"Machine: {machine['cpu']}, {machine['cores']} cores. Command: `python -m {suite.module}` with " + (
        f"`{' '.join(suite.flags)}`, seeds 1..N, {frames:,} env frames.\n\n"
    )
    (out / "results.md").write_text(header + table)
    learning_curves.write_csv(results, frames, out / "learning_curves.csv")
    learning_curves.plot(results, frames, suite.metric, out / "learning_curves.png")
    print(table)
    print(f"written: {out / 'results.md'}, {out / 'learning_curves.csv'}, {out / 'learning_curves.png'}")


def _usage_error(message: str) -> int:
    print(f"sf.bench.learning: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
