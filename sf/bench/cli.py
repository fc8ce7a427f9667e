"""Throughput benchmarks, run as a user would.

`python -m sf.benchmark --suite cartpole`: each suite is one training command in benchmark mode. The overall FPS
is the run's own last line, `Collected {...}, FPS: X`. With `--sample_factory=/path/to/python` the same command
also runs under Sample Factory (an interpreter with `sample-factory` installed), alternating with ours, so both
figures come from the same session of the same machine; the report gives their ratio.

`python -m sf.benchmark --env=CartPole-v1 [training flags]`: the simulator ceiling of the layout, sampling only
and training side by side, as a table, `benchmark.json` and `benchmark.png` in `<train_dir>/<experiment>/`.

`--auto_tune=True --tune_budget_s=N` (with `--env=...` or `--suite ...`): short runs of candidate layouts chosen
by the profile report's verdicts; prints the best layout, its FPS and the command that trains with it.
"""

from __future__ import annotations

import argparse
import sys

from sf.bench.suites import SUITES, run_suite
from sf.cfg.arguments import str2bool


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sf.benchmark",
        description=__doc__,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--suite",
        choices=sorted(SUITES),
        default=None,
        help="compare with Sample Factory on this suite (or, with --auto_tune, tune its layout)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="suite mode: runs of each framework, alternating")
    parser.add_argument(
        "--sample_factory",
        default=None,
        help="python interpreter of a venv with sample-factory installed, to run the same command",
    )
    parser.add_argument("--sample_factory_cwd", default=None, help="scratch folder for Sample Factory's runs")
    parser.add_argument("--out", default=None, help="suite mode: write the result as JSON to this file")
    parser.add_argument(
        "--phase_s",
        type=float,
        default=30.0,
        help="env mode: seconds each phase runs (sampling and training stop earlier if the "
        "command line gives --train_for_env_steps or --train_for_seconds)",
    )
    parser.add_argument(
        "--auto_tune",
        type=str2bool,
        nargs="?",
        const=True,
        default=False,
        help="try layouts guided by the profile report's verdicts and print the fastest",
    )
    parser.add_argument("--tune_budget_s", type=float, default=300.0, help="auto-tune: total seconds for all trials")
    parser.add_argument(
        "--tune_trial_s",
        type=float,
        default=None,
        help="auto-tune: seconds of each trial run (default: budget / 8, within 8..60)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Flags this tool does not know are training flags; in suite mode they come after `--`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: len(argv) - len(extra) - 1] if "--" in argv else argv
    parser = _parser()
    args, training_flags = parser.parse_known_args(argv)
    args.extra = extra
    misspelled = _misspelled_flag(parser, training_flags)
    if misspelled:
        return _usage_error(misspelled)
    if args.suite and not args.auto_tune:
        if training_flags:
            return _usage_error(f"{training_flags[0]}: suite mode takes training flags only after `--`")
        return run_suite(args)
    if args.suite:
        training_flags = [*SUITES[args.suite].flags, *args.extra, *training_flags]
    elif args.extra:
        training_flags = [*args.extra, *training_flags]
    # imported here: the env mode's process settings import torch, which the suites and `--help` do without
    from sf.bench.env_command import run_env_mode

    return run_env_mode(training_flags, args)


def _misspelled_flag(parser: argparse.ArgumentParser, training_flags: list[str]) -> str | None:
    """A flag that is neither this tool's nor training's, named with the closest of either (`--suit`: did you mean
    `--suite`?). Flags of an env family's own parser are left to training's parser, which names them too."""
    import difflib

    from sf.cfg.arguments import make_parser

    ours = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    training = {o for action in make_parser()._actions for o in action.option_strings}
    for token in training_flags:
        name = token.split("=", 1)[0]
        if not name.startswith("--") or name in training:
            continue
        close = difflib.get_close_matches(name, ours, n=1, cutoff=0.8)
        if close:
            return f"unknown flag {name}; did you mean {close[0]}?"
    return None


def _usage_error(message: str) -> int:
    print(f"sf.benchmark: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
