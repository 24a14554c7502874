"""The learning statistics against direct transcriptions: interpolated reach, the area under a curve, and
bootstrap intervals that cover what they should and separate what differs."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numerics import tolerance
from tracec.trace_rl.experiments.learning_stats import (
    area_under_curve,
    paired_auc,
    paired_difference,
    reach,
    reach_ratio,
    seed_paired_area,
    sign_flip_test,
    success_interval,
)

ROLLOUTS = [0, 100, 200, 300]
# The rule (tests/numerics.py): an interpolation divides a value's distance by a segment's rise (>= 0.1 in these
# hand cases), a few roundings at the rollouts over that rise; a mean of <= 4 values <= 1, a few more.
INTERPOLATED = tolerance(8, ROLLOUTS[-1] / 0.1, float)
MEAN = tolerance(8, 1.0, float)


def test_reach_interpolates_the_first_crossing() -> None:
    assert reach(ROLLOUTS, [0.0, 0.2, 0.4, 0.6], 0.3) == pytest.approx(150.0, abs=INTERPOLATED)
    assert reach(ROLLOUTS, [0.0, 0.2, 0.4, 0.6], 0.2) == pytest.approx(100.0, abs=INTERPOLATED)
    assert reach(ROLLOUTS, [0.0, 0.5, 0.1, 0.6], 0.3) == pytest.approx(60.0, abs=INTERPOLATED)  # the first crossing
    assert reach(ROLLOUTS, [0.0, 0.1, 0.1, 0.1], 0.3) is None
    assert reach(ROLLOUTS, [0.4, 0.1, 0.1, 0.1], 0.3) == 0.0


@given(st.lists(st.floats(0, 1), min_size=2, max_size=8), st.floats(0.01, 1))
def test_reach_is_where_the_piecewise_linear_curve_first_meets_the_target(values: list[float], target: float) -> None:
    rollouts = [64 * k for k in range(len(values))]
    found = reach(rollouts, values, target)
    grid = np.union1d(np.linspace(0, rollouts[-1], 20001), rollouts)  # the evaluated points themselves included
    curve = np.interp(grid, rollouts, values)
    hits = grid[curve >= target - 1e-9]
    if found is None:
        assert not len(hits)
    else:
        assert len(hits) and abs(found - hits[0]) <= rollouts[-1] / 20000 + 1e-6


def test_the_area_is_the_trapezoid_mean() -> None:
    assert area_under_curve(ROLLOUTS, [0.0, 0.3, 0.3, 0.6]) == pytest.approx((0.15 + 0.3 + 0.45) / 3, abs=MEAN)


def _wins(rng: np.random.Generator, rates: np.ndarray, seeds: int, episodes: int) -> np.ndarray:
    """(seeds, games, episodes) wins at each game's rate."""
    return (rng.random((seeds, len(rates), episodes)) < rates[None, :, None]).astype(float)


def test_a_paired_difference_separates_a_real_gap_and_covers_no_gap() -> None:
    rng = np.random.default_rng(0)
    rates = rng.uniform(0.1, 0.6, 32)  # games differ a lot: pairing removes that
    a = _wins(rng, rates, 5, 8)
    same = _wins(rng, rates, 5, 8)
    better = _wins(rng, np.clip(rates + 0.15, 0, 1), 5, 8)
    gap = paired_difference(a, better)
    assert gap.excludes_zero() and gap.low < 0.15 < gap.high + 0.05
    assert gap.estimate == pytest.approx(better.mean() - a.mean(), abs=MEAN)  # sums of 0 / 1: exact but the means
    assert not paired_difference(a, same).excludes_zero()
    one = success_interval(a)
    assert one.low < a.mean() < one.high and one.estimate == pytest.approx(a.mean(), abs=MEAN)
    with pytest.raises(ValueError, match="same games"):
        paired_difference(a, better[:, :5])


def test_the_reach_ratio_finds_a_method_twice_as_fast() -> None:
    rng = np.random.default_rng(1)
    rollouts = [0, 100, 200, 300, 400]
    slow = np.array([0.0, 0.1, 0.2, 0.3, 0.4])
    fast = np.array([0.0, 0.2, 0.4, 0.4, 0.4])
    games = np.full(32, 1.0)

    def runs(curve: np.ndarray) -> np.ndarray:  # (seeds, points, games, episodes)
        return np.stack([np.stack([_wins(rng, games * p, 1, 16)[0] for p in curve]) for _ in range(5)])

    ratio, grpo_seeds, trca_seeds = reach_ratio(rollouts, runs(slow), runs(fast), share=1.0)
    assert 0.3 < ratio.estimate < 0.75 and ratio.high < 1.0
    assert len(grpo_seeds) == len(trca_seeds) == 5
    auc = paired_auc(rollouts, runs(slow), runs(fast))
    assert auc.excludes_zero() and auc.estimate > 0


def _transcribed_p(differences: list[int]) -> Fraction:
    """The sign-flip test's p-value as its definition reads, in exact arithmetic: the share of the 2^n sign
    assignments whose |sum| is at least the observed |sum|."""
    observed = abs(sum(differences))
    flips = list(itertools.product((1, -1), repeat=len(differences)))
    return Fraction(sum(abs(sum(s * d for s, d in zip(signs, differences))) >= observed for signs in flips), len(flips))


@given(st.lists(st.integers(-6, 6), min_size=1, max_size=9), st.integers(1, 2 ** 20))
def test_the_sign_flip_p_value_is_its_definition(differences: list[int], scale: int) -> None:
    # integers over a power of two: floats that hold every sign assignment's sum exactly, ties included
    test = sign_flip_test([d / scale for d in differences])
    assert test.p_value == float(_transcribed_p(differences))
    exact = sum(differences) / scale / len(differences)
    assert test.mean == pytest.approx(exact, abs=tolerance(len(differences), 6 / scale, float))


def test_ten_seeds_all_ahead_give_the_smallest_p_and_no_gap_gives_one() -> None:
    assert sign_flip_test([0.1 + i / 100 for i in range(10)]).p_value == 2 / 2 ** 10
    assert sign_flip_test([0.0] * 5).p_value == 1.0
    with pytest.raises(ValueError, match="finite differences"):
        sign_flip_test([])


def test_the_seed_paired_area_pairs_seed_i_with_seed_i() -> None:
    rollouts = [0, 100, 200]
    a = np.zeros((3, 3, 2, 1))
    b = np.zeros((4, 3, 2, 1))
    b[:, 1:] = 1.0  # b wins from the second point on: area 0.75 per seed; a never does
    b[0] = 0.0  # b's seed 0 learns nothing: paired with a's seed 0, its difference is 0
    test = seed_paired_area(rollouts, a, b)
    assert test.differences == (0.0, 0.75, 0.75)  # b's fourth seed has no partner
    assert test.p_value == 0.5  # of the 8 sign assignments, those giving both .75 one sign reach the observed mean
