"""The five replay samplers of the weighted-sampling case study draw from the same distribution.

Each sampler draws from a 40-entry buffer after updates that move the minimum down and then overwrite it (the
incremental minimum and the sum tree's floor must follow), and a chi-square goodness-of-fit test compares the counts
with the exact probabilities (r_i - min(min(r), 0)) / sum. scipy is not a dependency, so the critical value comes from
the Wilson-Hilferty approximation of the chi-square quantile, accurate to well under 1 % for these degrees of freedom;
alpha = 1e-3 per sampler keeps the chance of any false failure under 0.5 %.
"""

import math

import numpy as np
import pytest

from sf.utils.timing import Timing
from sf_examples.profiling.weighted_sampling import SAMPLERS, SumTreeSampler

Z_999 = 3.0902  # standard normal quantile at 1 - 1e-3
DRAWS = 60_000


def chi2_critical(df: int, z: float = Z_999) -> float:
    """Wilson-Hilferty: (chi2/df)^(1/3) is close to normal with mean 1 - 2/(9 df) and variance 2/(9 df)."""
    a = 2 / (9 * df)
    return df * (1 - a + z * math.sqrt(a)) ** 3


def exact_probabilities(r: np.ndarray) -> np.ndarray:
    w = r - min(r.min(), 0.0)
    return w / w.sum()


def updated_buffer(cls):
    r = np.random.default_rng(7).normal(size=40)
    sampler = cls(r, seed=11)
    sampler.add(3, -5.0)  # a new minimum below everything
    sampler.add(5, 2.5)
    sampler.add(3, 0.7)  # the minimum is overwritten: the shift rises
    sampler.add(int(np.argmin(np.asarray(sampler.r))), 0.1)
    return sampler


def test_chi2_critical_matches_known_quantiles():
    # table values of the chi-square 0.999 quantile
    assert chi2_critical(10) == pytest.approx(29.588, rel=0.01)
    assert chi2_critical(38) == pytest.approx(70.703, rel=0.01)


@pytest.mark.parametrize("cls", SAMPLERS, ids=[c.name for c in SAMPLERS])
def test_sampler_draws_proportional_to_shifted_returns(cls):
    sampler = updated_buffer(cls)
    r = np.asarray(sampler.r, dtype=np.float64)
    p = exact_probabilities(r)
    timing = Timing("test")
    counts = np.zeros(len(r))
    for _ in range(DRAWS // 256):
        np.add.at(counts, sampler.sample(256, timing), 1)
    total = counts.sum()
    assert counts[p == 0].sum() == 0, "an entry of zero weight was drawn"
    support = p > 0
    expected = total * p[support]
    statistic = float(((counts[support] - expected) ** 2 / expected).sum())
    assert statistic < chi2_critical(int(support.sum()) - 1), f"{cls.name}: chi-square {statistic:.1f}"


def test_samplers_agree_with_each_other_on_a_skewed_buffer():
    """A buffer where one entry holds most of the weight: every sampler gives it the same share (within 4 sigma)."""
    r = np.concatenate([np.linspace(-1.0, 1.0, 99), [30.0]])
    p = exact_probabilities(r)[-1]
    n = 256 * 80
    for cls in SAMPLERS:
        sampler = cls(r, seed=3)
        hits = sum(int((sampler.sample(256, Timing("t")) == 99).sum()) for _ in range(80))
        assert abs(hits / n - p) < 4 * math.sqrt(p * (1 - p) / n), cls.name


def test_sum_tree_rebuilds_when_the_minimum_rises_far():
    r = np.full(64, 1.0)
    r[0] = -1000.0
    sampler = SumTreeSampler(r, seed=0)
    sampler.add(0, 1.0)  # every weight drops by 1000 in truth; the tree must notice
    draws = sampler.sample(256, Timing("t"))
    assert sampler.floor == 0.0
    assert len(np.unique(draws)) > 32  # uniform over 64 equal entries now
