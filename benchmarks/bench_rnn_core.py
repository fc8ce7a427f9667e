"""CPU time of the learner's recurrent pass: `RnnCore.forward_seq` and its backward over a batch of 32 rows of 32
steps (a 1,024-sample batch at `--recurrence=32`), a GRU of 512, at the CartPole (64 features in) and Doom (512)
shapes, with episode resets at several rates, against the same pass without resets (one RNN call: the floor).

    python benchmarks/bench_rnn_core.py
    pytest benchmarks/bench_rnn_core.py --benchmark-enable

A reset cuts the window for every row at that step (`forward_seq`), so the ratio to the floor grows with the number
of distinct steps at which some row resets, not with the number of resets.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

import pytest
import torch

from sf.model.cores import RnnCore

torch.set_num_threads(1)

ROWS, STEPS, HIDDEN = 32, 32, 512
FEATURES = {"cartpole": 64, "doom": 512}
RESET_RATES = (0.0, 0.005, 0.02, 0.05)


def train_pass(features: int, reset_rate: float) -> Callable[[], None]:
    """forward_seq and backward with fixed inputs and resets drawn once at `reset_rate` per step."""
    generator = torch.Generator().manual_seed(0)
    core = RnnCore(features, "gru", HIDDEN, 1)
    x = torch.randn(ROWS, STEPS, features, generator=generator, requires_grad=True)
    h0 = torch.randn(ROWS, core.state_size, generator=generator)
    dones = (torch.rand(ROWS, STEPS, generator=generator) < reset_rate).float()

    def step() -> None:
        core.forward_seq(x, h0, dones).square().mean().backward()

    return step


@pytest.mark.parametrize("shape", sorted(FEATURES))
@pytest.mark.parametrize("reset_rate", RESET_RATES)
def test_rnn_core(benchmark, shape: str, reset_rate: float):
    benchmark(train_pass(FEATURES[shape], reset_rate))


def best_ms(step: Callable[[], None], passes: int = 5) -> float:
    step()  # the first pass allocates what the others reuse
    return min(timeit.repeat(step, number=1, repeat=passes)) * 1e3


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), best of 5 passes")
    for shape, features in FEATURES.items():
        floor = best_ms(train_pass(features, 0.0))
        print(f"{shape} ({features} features in): no resets {floor:6.1f} ms")
        for rate in RESET_RATES[1:]:
            ms = best_ms(train_pass(features, rate))
            print(f"  resets at {rate:5.3f} a step: {ms:6.1f} ms, {ms / floor:4.2f}x the pass without resets")


if __name__ == "__main__":
    main()
