"""`python -m sf.profile report <experiment_dir> [--compare <dir>] [--json]`: the report of one run, or the diff of
two, printed; the charts and report.html written into the run's profiling/ folder."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from sf.analysis.charts import ActivityBar, ChangeBar, activity_bars, change_bars, share_bars
from sf.analysis.compare import compare
from sf.analysis.compare import format_text as format_comparison
from sf.analysis.experiment_folder import folder_error
from sf.analysis.json_safe import finite_json
from sf.analysis.report import build_report, format_text, hotspot_items
from sf.analysis.report_html import write_compare_page, write_report_page
from sf.analysis.run_data import load_experiment

REPORT_FILES = ("report.html", "report_activity.png", "report_hotspots.png")
COMPARE_FILES = ("compare.html", "compare.png")


def written_line(experiment_dir: str | Path, files: tuple[str, ...]) -> str:
    """What the command wrote besides what it printed, so that nobody has to look for it."""
    folder = Path(experiment_dir) / "profiling"
    return f"wrote {folder / files[0]} (open it in a browser) and {', '.join(files[1:])} beside it"


def run_report(experiment_dir: str | Path, as_json: bool = False) -> str:
    """Build the report, write report.html (and the charts as PNG files) into profiling/, return what to print."""
    experiment = load_experiment(experiment_dir)
    report = build_report(experiment)
    out = Path(experiment_dir) / "profiling"
    out.mkdir(exist_ok=True)
    activity_bars(
        [ActivityBar(r.name, r.work, r.wait, r.overhead) for r in report.components],
        f"verdict: {report.verdict.kind}-bound",
        out / REPORT_FILES[1],
    )
    share_bars(hotspot_items(report), "% of the component's lifetime", out / REPORT_FILES[2])
    write_report_page(report, experiment, out / REPORT_FILES[0])
    return json.dumps(report.to_json(), indent=2) if as_json else format_text(report)


def run_compare(baseline_dir: str | Path, run_dir: str | Path, as_json: bool = False) -> str:
    """Diff `run_dir` against `baseline_dir`; write profiling/compare.html and compare.png in `run_dir`; return what
    to print."""
    baseline, run = load_experiment(baseline_dir), load_experiment(run_dir)
    comparison = compare(baseline, run)
    out = Path(run_dir) / "profiling"
    out.mkdir(exist_ok=True)
    change_bars([ChangeBar(r.key, r.change, r.noise, r.marked) for r in comparison.rows], out / COMPARE_FILES[1])
    write_compare_page(comparison, run, baseline, out / COMPARE_FILES[0])
    if as_json:
        return json.dumps(finite_json({**asdict(comparison), "marked": [r.key for r in comparison.marked]}), indent=2)
    return format_comparison(comparison)


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
        error = folder_error(flag, folder) if folder is not None else None
        if error is not None:
            print(error, file=sys.stderr)
            return 2
    if args.compare:
        print(run_compare(args.compare, args.experiment_dir, as_json=args.json))
        written = written_line(args.experiment_dir, COMPARE_FILES)
    else:
        print(run_report(args.experiment_dir, as_json=args.json))
        written = written_line(args.experiment_dir, REPORT_FILES)
    print(written, file=sys.stderr if args.json else sys.stdout)  # JSON on stdout stays JSON
    return 0
