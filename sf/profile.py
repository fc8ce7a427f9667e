"""The profiling commands:

`python -m sf.profile report <experiment_dir> [--compare <dir>] [--json]`,
`python -m sf.profile top <experiment_dir> [--once] [--replay]`,
`python -m sf.profile breakdown -- <training flags>`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sf.profile report", description="Name a run's bottleneck, or diff two runs key by key."
    )
    parser.add_argument("experiment_dir", help="an experiment folder with profile.json")
    parser.add_argument(
        "--compare", metavar="OTHER_DIR", help="diff against this experiment (the baseline is OTHER_DIR)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    for flag, folder in (("experiment_dir", args.experiment_dir), ("--compare", args.compare)):
        if folder is not None and not (Path(folder) / "profile.json").exists():
            print(
                f"{flag}: {folder} has no profile.json; give the folder of a finished run (<train_dir>/<experiment>)",
                file=sys.stderr,
            )
            return 2
    if args.compare:
        from sf.profiling.compare import run_compare

        print(run_compare(args.compare, args.experiment_dir, as_json=args.json))
    else:
        from sf.profiling.report import run_report

        print(run_report(args.experiment_dir, as_json=args.json))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("report", "top", "breakdown"):
        print(
            "usage: python -m sf.profile report <experiment_dir> [--compare <dir>] [--json] | "
            "python -m sf.profile top <experiment_dir> [--once] [--replay] | "
            "python -m sf.profile breakdown -- <training flags>",
            file=sys.stderr,
        )
        return 2
    if argv[0] == "top":
        from sf.profiling.top import main as top_main

        return top_main(argv[1:])
    if argv[0] == "breakdown":
        from sf.profiling.breakdown import main as breakdown_main

        rest = argv[1:]
        return breakdown_main(rest[1:] if rest[:1] == ["--"] else rest)
    return _report(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
