"""`python -m sf.profile report <experiment_dir> [--compare <dir>] [--json]`: the report of one run, or the diff of
two, printed; the charts and report.html written into the run's profiling/ folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sf.analysis.compare import run_compare
from sf.analysis.report import run_report


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sf.profile report", description="Name a run's bottleneck, or diff two runs key by key."
    )
    parser.add_argument("experiment_dir", help="an experiment folder with profile.json")
    parser.add_argument(
        "--compare", metavar="OTHER_DIR", help="diff against this experiment (the baseline is OTHER_DIR)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    for flag, folder in (("experiment_dir", args.experiment_dir), ("--compare", args.compare)):
        if folder is not None and not (Path(folder) / "profile.json").exists():
            print(
                f"{flag}: {folder} has no profile.json; give the folder of a finished run (<train_dir>/<experiment>)",
                file=sys.stderr,
            )
            return 2
    if args.compare:
        print(run_compare(args.compare, args.experiment_dir, as_json=args.json))
    else:
        print(run_report(args.experiment_dir, as_json=args.json))
    return 0
