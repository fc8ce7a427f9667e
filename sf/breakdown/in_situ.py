"""What an instrumentation event costs inside the training, against what it costs in the micro-benchmarks.

The micro-benchmarks (`sf.breakdown.calibration`) time events back to back, where the profiler's code and data stay
in the caches. Inside a training step an event called from Python follows other work that has evicted them, and it
pays to bring them back: a `torch.add` right after a 4 MB sweep and some Python costs the profiler 1.13 us per
recorded operator against 0.23 us in a tight loop (64 calls in a row after the same sweep, 0.26 us). That extra
lands outside the recorded intervals, on the Python side of the events called from Python (Timing ranges, simulator
ranges, outermost operators); operators nested inside an operator run back to back in C++ and stay at the tight-loop
cost. How much extra depends on how much the workload evicts between events, so no
workload-free benchmark can know it.

So a few short slices of the same training run at start, alternately plain and profiled; the profiled slice's
events are counted and priced at the micro-benchmarks' costs, and what the profiler added beyond that price gives
`python_scale`: the factor on the Python side of the events (1.0: the micro-benchmarks are right in this workload).
The slices are separate runs, never the ones the breakdown reports or checks against.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from sf.breakdown.correction import Overhead

SLICE_S = 0.3  # aim for slices whose main loop runs this long: their factors agreed within 5 % from 0.2 s on
MIN_SLICE_FRAMES = 1024
MIN_SHARE = 0.03  # an instrumentation that costs less than this share of a slice is within the slices' noise
SCALE_BOUNDS = (0.5, 8.0)


@dataclass(frozen=True)
class SlicePair:
    frames: int  # env frames of each slice
    plain_s: float  # main-thread CPU seconds of the plain slice's event loop
    profiled_s: float
    priced: Overhead  # the profiled slice's events at the micro-benchmarks' costs

    @property
    def added_s(self) -> float:
        return self.profiled_s - self.plain_s


@dataclass
class InSituCalibration:
    pairs: list[SlicePair] = field(default_factory=list)
    python_scale: float = 1.0
    note: str | None = None  # why the scale stayed 1.0

    def to_dict(self) -> dict:
        return {
            "python_scale": self.python_scale,
            "note": self.note,
            "pairs": [dict(asdict(p), scale=pair_scale(p) if p.priced.python_s > 0 else None) for p in self.pairs],
        }


def slice_frames(total_frames: int | None, fps: float | None) -> int:
    """Frames for a slice of about SLICE_S seconds at `fps` (a guess of 4096 when unknown), at most the whole run."""
    wanted = max(MIN_SLICE_FRAMES, 4096 if not fps else int(fps * SLICE_S))
    return wanted if total_frames is None else max(1, min(total_frames, wanted))


def pair_scale(pair: SlicePair) -> float:
    """The factor on the Python side that makes the priced events add what the profiler added."""
    return 1.0 + (pair.added_s - pair.priced.total_s) / pair.priced.python_s


def calibrate(
    run_slice: Callable[[bool, int], tuple[float, Overhead | None]], total_frames: int | None, pairs: int = 3
) -> InSituCalibration:
    """Run `pairs` pairs of slices (`run_slice(profiled, frames)` -> (main-thread CPU s, the profiled slice's events
    priced)) and take the median pair's factor, bounded by SCALE_BOUNDS. The first plain slice's speed sizes the
    rest (never smaller). Stops after one pair when the events cost under MIN_SHARE of the slice: their extra cost
    could not be told from the noise, and would not matter."""
    result = InSituCalibration()
    frames = slice_frames(total_frames, None)
    for _ in range(pairs):
        plain_s, _ = run_slice(False, frames)
        profiled_s, priced = run_slice(True, frames)
        result.pairs.append(SlicePair(frames, plain_s, profiled_s, priced))
        if len(result.pairs) == 1:
            if priced.total_s < MIN_SHARE * plain_s or priced.python_s <= 0:
                result.note = (
                    f"the events cost {priced.total_s / plain_s:.1%} of a slice at the micro-benchmarks' "
                    f"prices, under {MIN_SHARE:.0%}: too little to measure in the training"
                )
                return result
            # a slice's fixed costs (env starts, a first batch) make short slices slow: they only ever grow
            frames = max(frames, slice_frames(total_frames, frames / plain_s))
    if not result.pairs:
        result.note = "no calibration slices were run"
        return result
    low, high = SCALE_BOUNDS
    result.python_scale = min(high, max(low, statistics.median(pair_scale(p) for p in result.pairs)))
    return result
