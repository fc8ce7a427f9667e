"""CPU time of the learner's recurrent pass through a core a user registered (an `nn.LSTM` written as Sample
Factory's cores are, for one step and for a PackedSequence): one call over the window's episode pieces
(`sequences_or_steps`, what the learner does) against one call per step (`step_through`, what it did before), with
the backward, over 32 rows of 32 steps (a 1,024-sample batch at `--recurrence=32`), 512 features in (sf's default
encoder), an LSTM of 64 (tests/sample_factory_scripts/train_lstm_core.py's), resets at 0.02 a step.

    python benchmarks/bench_custom_core.py
    pytest benchmarks/bench_custom_core.py --benchmark-enable
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

import pytest
import torch
from torch import nn

from sf.cfg.arguments import default_cfg
from sf.model.cores import ModelCore, sequences_or_steps, step_through

torch.set_num_threads(1)

ROWS, STEPS, FEATURES, HIDDEN, RESET_RATE = 32, 32, 512, 64, 0.02


class LstmCore(ModelCore):
    """Sample Factory's way: a PackedSequence goes to the LSTM as it is, one step is a sequence of one."""

    def __init__(self, cfg, input_size: int):
        super().__init__(cfg)
        self.lstm = nn.LSTM(input_size, cfg.rnn_size)
        self.core_output_size = cfg.rnn_size

    def forward(self, head_output, rnn_states):
        is_seq = not torch.is_tensor(head_output)
        h, c = rnn_states.unsqueeze(0).chunk(2, dim=2)
        x, (h, c) = self.lstm(head_output if is_seq else head_output.unsqueeze(0), (h.contiguous(), c.contiguous()))
        return (x if is_seq else x.squeeze(0)), torch.cat([h, c], dim=2).squeeze(0)


def train_pass(sequences: bool) -> Callable[[], None]:
    generator = torch.Generator().manual_seed(0)
    core = LstmCore(default_cfg(use_rnn=True, rnn_type="lstm", rnn_size=HIDDEN), FEATURES)
    x = torch.randn(ROWS, STEPS, FEATURES, generator=generator, requires_grad=True)
    h0 = torch.randn(ROWS, core.state_size, generator=generator)
    dones = (torch.rand(ROWS, STEPS, generator=generator) < RESET_RATE).float()
    run = sequences_or_steps if sequences else lambda owner, c, *args: step_through(c, *args)

    def step() -> None:
        run(core, core, x, h0, dones).square().mean().backward()

    return step


@pytest.mark.parametrize("sequences", [True, False], ids=["packed_sequence", "one_step_at_a_time"])
def test_custom_core(benchmark, sequences: bool):
    benchmark(train_pass(sequences))


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), best of 7 passes, alternating")
    passes = {name: train_pass(name == "packed sequence") for name in ("one step at a time", "packed sequence")}
    best = dict.fromkeys(passes, float("inf"))
    for step in passes.values():
        step()  # the first pass allocates what the others reuse
    for _ in range(7):
        for name, step in passes.items():
            best[name] = min(best[name], timeit.timeit(step, number=1) * 1e3)
    for name, ms in best.items():
        print(f"{name:20s} {ms:6.1f} ms")
    print(f"packed / one step at a time: {best['packed sequence'] / best['one step at a time']:.2f}")


if __name__ == "__main__":
    main()
