"""`python -m sf.profile`: the profiling toolkit's command line.

python -m sf.profile report <experiment_dir> [--compare <dir>] [--json]   # sf.analysis: verdict, diff
python -m sf.profile top <experiment_dir> [--once] [--replay]             # sf.analysis: watch a run live
python -m sf.profile breakdown [options] -- <training flags>               # sf.breakdown: cross-stack table
"""

from __future__ import annotations

import signal
import sys

USAGE = (
    "usage: python -m sf.profile report <experiment_dir> [--compare <dir>] [--json] | "
    "python -m sf.profile top <experiment_dir> [--once] [--replay] | "
    "python -m sf.profile breakdown [options] -- <training flags>"
)
COMMANDS = {
    "report": "name a run's bottleneck (verdict, who waits on whom, what-if), or diff two runs key by key",
    "top": "watch a run while it runs (or replay a finished one): FPS, busy and waiting bars, the live verdict",
    "breakdown": "run a training in serial mode and split each operation's time across the stack",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE + "\n\ncommands:")
        for name, what in COMMANDS.items():
            print(f"  {name:<10} {what}")
        print("\n`python -m sf.profile <command> --help` describes each.")
        return 0
    if not argv or argv[0] not in COMMANDS:
        print(USAGE, file=sys.stderr)
        return 2
    if argv[0] == "top":
        from sf.analysis.top import main as top_main

        return top_main(argv[1:])
    if argv[0] == "breakdown":
        from sf.breakdown.command import main as breakdown_main

        return breakdown_main(argv[1:])
    from sf.analysis.cli import main as report_main

    return report_main(argv[1:])


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... report <dir> | head` ends quietly, as other tools do
    sys.exit(main())
