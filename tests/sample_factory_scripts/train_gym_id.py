"""The shortest Sample Factory training script, written for its public API: flags parsed, then trained; `--env` a
gymnasium id that nothing registers."""

import sys

from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.train import run_rl


def main():
    parser, _ = parse_sf_args()
    cfg = parse_full_cfg(parser)
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
