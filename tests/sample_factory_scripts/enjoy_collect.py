"""Sample Factory's evaluation script for `train_collect.py`, written for its public API."""

import sys

from sample_factory.enjoy import enjoy
from train_collect import parse_custom_args, register_custom_components


def main():
    register_custom_components()
    cfg = parse_custom_args(evaluation=True)
    return enjoy(cfg)


if __name__ == "__main__":
    sys.exit(main())
