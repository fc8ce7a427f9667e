"""The calibration slices: the factor on the Python side of events is what makes the priced events add up to what
the profiler added, taken robustly over pairs, sized from the first slice's speed, and skipped where the events are
too cheap to measure."""

import pytest

from sf.breakdown.correction import Overhead
from sf.breakdown.in_situ import MIN_SHARE, SCALE_BOUNDS, calibrate, slice_frames


class FakeTraining:
    """Slices of a training at `fps` whose profiler adds the events' priced cost, with their Python side
    `true_scale` times dearer; `spoil` adds a burst of a neighbour's work to the given profiled slices."""

    def __init__(
        self,
        fps: float,
        python_per_frame: float,
        backend_per_frame: float,
        true_scale: float,
        spoil: dict[int, float] | None = None,
    ):
        self.fps, self.python, self.backend, self.true_scale = fps, python_per_frame, backend_per_frame, true_scale
        self.spoil = spoil or {}
        self.calls: list[tuple[bool, int]] = []

    def __call__(self, profiled: bool, frames: int) -> tuple[float, Overhead | None]:
        self.calls.append((profiled, frames))
        plain = frames / self.fps
        if not profiled:
            return plain, None
        priced = Overhead(self.python * frames, self.backend * frames)
        added = self.true_scale * priced.python_s + priced.backend_s + self.spoil.get(len(self.calls) // 2 - 1, 0.0)
        return plain + added, priced


def test_the_factor_is_what_the_profiler_added_beyond_the_price():
    training = FakeTraining(fps=40_000, python_per_frame=4e-6, backend_per_frame=5e-6, true_scale=2.4)
    result = calibrate(training, total_frames=40_000, pairs=3)
    assert result.python_scale == pytest.approx(2.4)
    assert len(result.pairs) == 3 and result.note is None
    # the first pair uses a guessed size, the others a size from the first plain slice's speed
    assert training.calls[0] == (False, 4096) and training.calls[1] == (True, 4096)
    assert {frames for _, frames in training.calls[2:]} == {slice_frames(40_000, 40_000)} == {12_000}


def test_one_spoiled_pair_does_not_move_the_factor():
    training = FakeTraining(
        fps=40_000, python_per_frame=4e-6, backend_per_frame=5e-6, true_scale=1.8, spoil={1: 0.5}
    )  # a neighbour's half second lands in the second profiled slice
    assert calibrate(training, total_frames=None, pairs=3).python_scale == pytest.approx(1.8)


def test_events_too_cheap_to_measure_keep_the_micro_benchmarks_costs_after_one_pair():
    training = FakeTraining(fps=2_000, python_per_frame=1e-6, backend_per_frame=1e-6, true_scale=3.0)
    result = calibrate(training, total_frames=100_000, pairs=3)
    assert 2 * 2e-6 * 2_000 < MIN_SHARE  # the priced events are 0.4 % of a slice
    assert result.python_scale == 1.0 and len(result.pairs) == 1 and "too little" in result.note


def test_the_factor_stays_within_bounds():
    low, high = SCALE_BOUNDS
    wild = FakeTraining(fps=40_000, python_per_frame=4e-6, backend_per_frame=5e-6, true_scale=50.0)
    assert calibrate(wild, total_frames=None).python_scale == high
    cheap = FakeTraining(fps=40_000, python_per_frame=4e-6, backend_per_frame=5e-6, true_scale=0.0)
    assert calibrate(cheap, total_frames=None).python_scale == low


def test_a_slice_is_never_longer_than_the_run():
    assert slice_frames(2048, None) == 2048
    assert slice_frames(2048, 1e6) == 2048
    assert slice_frames(None, 100.0) == 1024  # a slow training still gets enough frames for a few batches
