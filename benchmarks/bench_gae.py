"""CPU time of the two GAE implementations (numba kernel vs torch reverse loop) on typical batch shapes.

python benchmarks/bench_gae.py [--repeats 50]
pytest benchmarks/bench_gae.py --benchmark-enable
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from sf.algo.gae import compute_gae_numba, compute_gae_torch

torch.set_num_threads(1)

SHAPES = [(n, t) for n in (32, 256, 1024) for t in (32, 128)]
GAMMA, LAMBDA = 0.99, 0.95
GaeFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def make_inputs(n: int, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(n, t, generator=gen)
    dones = (torch.rand(n, t, generator=gen) < 0.01).float()
    values = torch.randn(n, t + 1, generator=gen)
    return rewards, dones, values


@dataclass(frozen=True)
class Timing:
    n: int
    t: int
    numba_us: float
    torch_us: float

    def __str__(self) -> str:
        return (
            f"N={self.n:5d} T={self.t:4d}: numba {self.numba_us:9.1f} us, torch {self.torch_us:9.1f} us, "
            f"torch/numba {self.torch_us / self.numba_us:6.1f}x"
        )


def _best_us(fn: GaeFn, inputs, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*inputs, GAMMA, LAMBDA)
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def measure(n: int, t: int, repeats: int) -> Timing:
    """Best of `repeats` calls each, after one warm-up call (numba compiles or loads its cache there)."""
    inputs = make_inputs(n, t)
    for fn in (compute_gae_numba, compute_gae_torch):
        fn(*inputs, GAMMA, LAMBDA)
    return Timing(n, t, _best_us(compute_gae_numba, inputs, repeats), _best_us(compute_gae_torch, inputs, repeats))


@pytest.mark.parametrize("n,t", SHAPES)
@pytest.mark.parametrize("impl", [compute_gae_numba, compute_gae_torch], ids=["numba", "torch"])
def test_gae(benchmark, impl: GaeFn, n: int, t: int):
    inputs = make_inputs(n, t)
    impl(*inputs, GAMMA, LAMBDA)
    advantages, _ = benchmark(impl, *inputs, GAMMA, LAMBDA)
    assert advantages.shape == (n, t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    for n, t in SHAPES:
        print(measure(n, t, args.repeats))


if __name__ == "__main__":
    main()
