"""CPU time of uint8 image normalization: the fused numba kernels against the same work in torch.

    python benchmarks/bench_obs_normalizer.py [--repeats 10]
    pytest benchmarks/bench_obs_normalizer.py --benchmark-enable

Shapes are Doom's default observation (3 x 72 x 128) at the learner's batch (1024) and a typical inference
batch (16). "update" moves the running per-pixel statistics; "normalize" produces the float32 channels-last
input of the conv encoder.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import pytest
import torch

from sf.algo.running_mean_std import RunningMeanStd
from sf.model.pixel_kernels import hwc_array, uint8_affine_channels_last, uint8_moments
from sf.utils.allocator import keep_freed_memory

torch.set_num_threads(1)
keep_freed_memory()  # as in training processes: outputs reuse freed memory instead of faulting in new pages

SHAPE = (3, 72, 128)
BATCHES = (16, 1024)
SCALE = 1.0 / 255.0


def make_batch(n: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, *SHAPE), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def _torch_scaled(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32, memory_format=torch.channels_last).mul_(SCALE)


def update_torch(stats: RunningMeanStd, x: torch.Tensor) -> None:
    stats.update(_torch_scaled(x))


def update_numba(stats: RunningMeanStd, x: torch.Tensor) -> None:
    mean, var = uint8_moments(x)
    stats.merge(mean * SCALE, var * SCALE**2, x.shape[0])


def normalize_torch(stats: RunningMeanStd, x: torch.Tensor) -> torch.Tensor:
    return stats.normalize(_torch_scaled(x))


def normalize_numba(stats: RunningMeanStd, x: torch.Tensor) -> torch.Tensor:
    inv_std = torch.rsqrt(stats.var + stats.epsilon)
    return uint8_affine_channels_last(x, hwc_array(SCALE * inv_std), hwc_array(-stats.mean * inv_std), stats.clip)


IMPLS: dict[str, Callable] = {
    "update_torch": update_torch,
    "update_numba": update_numba,
    "normalize_torch": normalize_torch,
    "normalize_numba": normalize_numba,
}


def _best_ms(fn: Callable, stats: RunningMeanStd, x: torch.Tensor, repeats: int) -> float:
    fn(stats, x)  # numba compiles or loads its cache here
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(stats, x)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


@pytest.mark.parametrize("n", BATCHES)
@pytest.mark.parametrize("name", sorted(IMPLS))
def test_obs_normalizer(benchmark, name: str, n: int):
    stats, x = RunningMeanStd(SHAPE), make_batch(n)
    IMPLS[name](stats, x)
    benchmark(IMPLS[name], stats, x)
    assert int(stats.count) > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), best of {args.repeats}")
    for n in BATCHES:
        x = make_batch(n)
        for op in ("update", "normalize"):
            t_torch = _best_ms(IMPLS[f"{op}_torch"], RunningMeanStd(SHAPE), x, args.repeats)
            t_numba = _best_ms(IMPLS[f"{op}_numba"], RunningMeanStd(SHAPE), x, args.repeats)
            print(
                f"N={n:5d} {op:9s}: torch {t_torch:8.2f} ms, numba {t_numba:8.2f} ms, "
                f"torch/numba {t_torch / t_numba:5.1f}x"
            )


if __name__ == "__main__":
    main()
