"""Weighted sampling from a replay buffer, five ways: a worked hotspot case study
(docs/case-study-weighted-sampling.md).

A buffer holds the return of each of 1,000,000 stored transitions. Every training step one new return overwrites
the oldest entry, then a batch of 256 indices is drawn (with replacement), each with probability proportional to
its return shifted to be non-negative: w_i = r_i - min(min(r), 0). The five samplers below give the same
distribution and differ only in cost:

1. `numpy`          recomputes min, shift, normalization and `choice` over the whole buffer for every batch;
2. `torch`          the same with `torch.multinomial`;
3. `numpy_min`      keeps the minimum incrementally and draws by one cumulative sum and a binary search;
4. `numba`          compiles that pass into one loop (no temporaries);
5. `sum_tree`       keeps partial sums in a tree: O(log n) per update and per draw.

`python -m sf_examples.profiling.weighted_sampling --profiling_backend=cprofile` times each with Timing, runs each
once under the chosen Python profiler, prints the profiler's top functions, the Timing tree and a speed-up table.
The table gives wall time (Timing) and process CPU time per batch; the speed-up is on CPU time, which a busy machine
does not inflate (torch runs on one thread here, so the two are comparable).
"""

from __future__ import annotations

import argparse
import io
import sys
import time

import numba
import numpy as np
import torch

from sf.utils.timing import Timing

BUFFER = 1_000_000
BATCH = 256


def shift(values_min: float) -> float:
    """The offset that makes every return non-negative: min(min(r), 0)."""
    return min(values_min, 0.0)


class NumpySampler:
    """Everything recomputed per batch, as first written."""

    name = "numpy"

    def __init__(self, returns: np.ndarray, seed: int):
        self.r = returns.astype(np.float64).copy()
        self.rng = np.random.default_rng(seed)

    def add(self, index: int, value: float) -> None:
        self.r[index] = value

    def sample(self, batch: int, timing: Timing) -> np.ndarray:
        with timing.add_time("probabilities"):
            w = self.r + abs(shift(self.r.min()))
            p = w / w.sum()
        with timing.add_time("choice"):
            return self.rng.choice(len(self.r), size=batch, p=p)


class TorchSampler:
    """The same computation in torch: multinomial instead of numpy's choice."""

    name = "torch"

    def __init__(self, returns: np.ndarray, seed: int):
        self.r = torch.from_numpy(returns.astype(np.float64).copy())
        self.gen = torch.Generator().manual_seed(seed)

    def add(self, index: int, value: float) -> None:
        self.r[index] = value

    def sample(self, batch: int, timing: Timing) -> np.ndarray:
        with timing.add_time("probabilities"):
            w = self.r - torch.clamp(self.r.min(), max=0.0)
        with timing.add_time("choice"):
            return torch.multinomial(w, batch, replacement=True, generator=self.gen).numpy()


class NumpyMinSampler:
    """The minimum kept up to date on every add (a full scan only when the minimum itself is overwritten)."""

    name = "numpy_min"

    def __init__(self, returns: np.ndarray, seed: int):
        self.r = returns.astype(np.float64).copy()
        self.rng = np.random.default_rng(seed)
        self.min_index = int(self.r.argmin())

    def add(self, index: int, value: float) -> None:
        old_min = self.r[self.min_index]
        self.r[index] = value
        if value <= old_min:
            self.min_index = index
        elif index == self.min_index:
            self.min_index = int(self.r.argmin())

    def sample(self, batch: int, timing: Timing) -> np.ndarray:
        with timing.add_time("cumsum"):
            cdf = np.cumsum(self.r - shift(self.r[self.min_index]))
        with timing.add_time("search"):
            return np.searchsorted(cdf, self.rng.random(batch) * cdf[-1], side="right").clip(max=len(cdf) - 1)


@numba.njit(cache=True)
def _draw_linear(r: np.ndarray, offset: float, u: np.ndarray) -> np.ndarray:
    """One pass: cumulative shifted sums into a reused array, then a binary search per draw."""
    n = r.shape[0]
    cdf = np.empty(n)
    acc = 0.0
    for i in range(n):
        acc += r[i] - offset
        cdf[i] = acc
    out = np.empty(u.shape[0], dtype=np.int64)
    for j in range(u.shape[0]):
        out[j] = min(np.searchsorted(cdf, u[j] * acc, side="right"), n - 1)
    return out


class NumbaSampler(NumpyMinSampler):
    """numpy_min's pass compiled by numba: no temporaries, one loop."""

    name = "numba"

    def sample(self, batch: int, timing: Timing) -> np.ndarray:
        with timing.add_time("draw"):
            return _draw_linear(self.r, shift(self.r[self.min_index]), self.rng.random(batch))


@numba.njit(cache=True)
def _tree_set(sums: np.ndarray, mins: np.ndarray, size: int, index: int, weight: float, value: float) -> None:
    i = index + size
    sums[i] = weight
    mins[i] = value
    i //= 2
    while i >= 1:
        sums[i] = sums[2 * i] + sums[2 * i + 1]
        mins[i] = min(mins[2 * i], mins[2 * i + 1])
        i //= 2


@numba.njit(cache=True)
def _tree_draw(
    sums: np.ndarray, size: int, excess: float, targets: np.ndarray, accept: np.ndarray, out: np.ndarray, filled: int
) -> int:
    """Descend for each target (sorted, so neighbouring descents share cached nodes); keep leaf i with probability
    (w_i - excess) / w_i. Returns how many of `out` are filled."""
    for j in range(targets.shape[0]):
        target = targets[j]
        i = 1
        while i < size:
            if target < sums[2 * i]:
                i = 2 * i
            else:
                target -= sums[2 * i]
                i = 2 * i + 1
        w = sums[i]
        if w > 0 and accept[j] * w < w - excess:
            out[filled] = i - size
            filled += 1
    return filled


class SumTreeSampler:
    """A sum tree over w_i = r_i - floor (and a min tree over r), both updated in O(log n) per add.

    The true weights are w_i - excess with excess = shift(min r) - floor >= 0, because the floor is never above the
    current shift. A draw from the tree is accepted with probability (w_i - excess) / w_i, which makes the accepted
    draws exactly proportional to r_i - shift. When the minimum rises far enough that fewer than half the draws would
    be accepted, the tree is rebuilt with the current shift as its floor (O(n), rare).
    """

    name = "sum_tree"

    def __init__(self, returns: np.ndarray, seed: int):
        self.n = len(returns)
        self.size = 1 << (self.n - 1).bit_length()
        self.r = returns.astype(np.float64).copy()
        self.rng = np.random.default_rng(seed)
        self.rebuild()

    def rebuild(self) -> None:
        size = self.size
        self.floor = shift(self.r.min())
        self.sums = np.zeros(2 * size)
        self.mins = np.full(2 * size, np.inf)
        self.sums[size : size + self.n] = self.r - self.floor
        self.mins[size : size + self.n] = self.r
        for level_start in (1 << k for k in range(size.bit_length() - 2, -1, -1)):
            children = slice(2 * level_start, 4 * level_start)
            self.sums[level_start : 2 * level_start] = self.sums[children].reshape(-1, 2).sum(axis=1)
            self.mins[level_start : 2 * level_start] = self.mins[children].reshape(-1, 2).min(axis=1)

    def add(self, index: int, value: float) -> None:
        self.r[index] = value
        if value < self.floor:
            self.rebuild()
            return
        _tree_set(self.sums, self.mins, self.size, index, value - self.floor, value)

    def sample(self, batch: int, timing: Timing) -> np.ndarray:
        with timing.add_time("draw"):
            excess = shift(self.mins[1]) - self.floor
            if self.n * excess > 0.5 * self.sums[1]:
                self.rebuild()
                excess = 0.0
            out = np.empty(batch, dtype=np.int64)
            filled = 0
            while filled < batch:  # rejections are rare: a second round, if any, is short
                missing = batch - filled
                targets = np.sort(self.rng.random(missing)) * self.sums[1]
                filled = _tree_draw(self.sums, self.size, excess, targets, self.rng.random(missing), out, filled)
            self.rng.shuffle(out)  # draws come out in index order; a batch should not
            return out


SAMPLERS = (NumpySampler, TorchSampler, NumpyMinSampler, NumbaSampler, SumTreeSampler)


def workload(sampler, steps: int, timing: Timing, rng: np.random.Generator) -> None:
    """`steps` training steps: overwrite the oldest return with a new one, draw a batch."""
    n = len(sampler.r)
    for step in range(steps):
        with timing.add_time("add"):
            sampler.add(step % n, float(rng.normal()))
        with timing.add_time("sample"):
            sampler.sample(BATCH, timing)


def profile_once(backend: str, fn) -> str:
    """Run `fn` under one in-process Python profiler and return its top functions as text."""
    if backend == "cprofile":
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(fn)
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(6)
        return "\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip())
    if backend == "yappi":
        import yappi

        yappi.clear_stats()
        yappi.set_clock_type("wall")
        yappi.start()
        fn()
        yappi.stop()
        stats = yappi.get_func_stats().sort("tsub")
        return "\n".join(f"{s.tsub:9.4f}s self  {s.ncall:7d} calls  {s.full_name}" for s in list(stats)[:6])
    if backend == "pyinstrument":
        from pyinstrument import Profiler

        profiler = Profiler()
        profiler.start()
        fn()
        profiler.stop()
        return profiler.output_text(unicode=False, color=False, show_all=False)
    fn()
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Weighted replay sampling, five ways, timed and profiled.")
    parser.add_argument("--buffer", type=int, default=BUFFER, help="entries in the replay buffer")
    parser.add_argument("--seconds", type=float, default=2.0, help="time spent on each sampler (at least 5 batches)")
    parser.add_argument(
        "--profiling_backend", choices=("cprofile", "yappi", "pyinstrument", "none"), default="cprofile"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one thread like the others, so CPU time and wall time measure the same thing
    returns = np.random.default_rng(0).normal(size=args.buffer)
    timing = Timing("weighted_sampling")
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for cls in SAMPLERS:
        sampler = cls(returns, seed=1)
        workload(sampler, 2, Timing("warm-up"), np.random.default_rng(2))  # numba compiles here, outside the timing
        probe = time.process_time()
        workload(sampler, 3, Timing("probe"), np.random.default_rng(3))
        steps = max(5, int(args.seconds / max(1e-7, (time.process_time() - probe) / 3)))
        cpu_start = time.process_time()
        with timing.add_time(cls.name):
            workload(sampler, steps, timing, np.random.default_rng(4))
        cpu[cls.name] = (time.process_time() - cpu_start) / steps
        wall[cls.name] = timing.get(cls.name) / steps
        if args.profiling_backend != "none":
            print(f"--- {cls.name}: {args.profiling_backend}, {min(steps, 50)} batches")
            print(
                profile_once(
                    args.profiling_backend,
                    lambda sampler=sampler, steps=steps: workload(
                        sampler, min(steps, 50), Timing("profiled"), np.random.default_rng(5)
                    ),
                )
            )
    print(timing.tree_str())
    first = SAMPLERS[0].name
    print(
        f"\n{'sampler':<12} {'wall ms/batch':>13} {'CPU ms/batch':>13} {'speed-up (CPU)':>15}   "
        f"(buffer {args.buffer:,}, batch {BATCH})"
    )
    for name in cpu:
        print(f"{name:<12} {1e3 * wall[name]:>13.4f} {1e3 * cpu[name]:>13.4f} {cpu[first] / cpu[name]:>14.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
