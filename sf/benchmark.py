"""`python -m sf.benchmark`: the command line of `sf.bench` (suites against Sample Factory, the env benchmark and the
layout auto-tuner); `python -m sf.benchmark --help` describes it."""

import sys

from sf.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
