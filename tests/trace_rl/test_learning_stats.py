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
    area_over_cost,
    area_under_curve,
    holm,
    level_reaches,
    paired_auc,
    paired_difference,
    reach,
    reach_ratio,
    seed_paired_area,
    seed_paired_cost_area,
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


def _holm_rejections(p_values: list[float], alpha: float) -> set[int]:
    """Holm's procedure as its paper states it: order the p-values, reject while p_(k) <= alpha / (m - k + 1)
    (k from 1), stop at the first that is not."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = set()
    for k, index in enumerate(order, start=1):
        if p_values[index] > alpha / (len(p_values) - k + 1):
            break
        rejected.add(index)
    return rejected


@given(st.lists(st.integers(1, 1000), min_size=1, max_size=6), st.sampled_from([0.01, 0.05, 0.1]))
def test_holm_adjusted_p_values_reject_what_holms_procedure_rejects(thousandths: list[int], alpha: float) -> None:
    p_values = [t / 1000 for t in thousandths]
    adjusted = holm(p_values)
    # alpha / (m - k + 1) and p x (m - k + 1) round differently: compare away from the boundary
    clear = [abs(a - alpha) > 1e-9 for a in adjusted]
    rejected = _holm_rejections(p_values, alpha)
    assert all((a <= alpha) == (i in rejected) for i, a in enumerate(adjusted) if clear[i])
    assert all(p <= a <= 1.0 for p, a in zip(p_values, adjusted, strict=True))


def test_holm_on_the_three_pre_registered_comparisons() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06], abs=MEAN)  # 0.04 x 1 is held up to 0.06
    assert holm([0.5]) == [0.5]


def test_level_reaches_read_each_seeds_own_curve() -> None:
    runs = np.zeros((2, 4, 1, 1))
    runs[0, :, 0, 0] = [0.0, 0.2, 0.4, 0.6]
    runs[1, :, 0, 0] = [0.0, 0.1, 0.1, 0.1]
    found = level_reaches(ROLLOUTS, runs, 0.3)
    assert found[0] == pytest.approx(150.0, abs=INTERPOLATED) and found[1] is None


def test_the_area_over_cost_reads_the_curve_on_the_cpu_seconds_axis() -> None:
    # the same curve in 300 s: over its first 150 s (its first 150 rollouts) the mean of a line from 0 to 0.15
    line = [0.0, 0.1, 0.2, 0.3]
    assert area_over_cost(ROLLOUTS, line, 300.0, 150.0) == pytest.approx(0.075, abs=MEAN)
    # twice as slow a run: its first 150 s are its first 75 rollouts
    assert area_over_cost(ROLLOUTS, line, 600.0, 150.0) == pytest.approx(0.0375, abs=MEAN)
    assert area_over_cost(ROLLOUTS, line, 300.0, 300.0) == pytest.approx(area_under_curve(ROLLOUTS, line), abs=MEAN)
    with pytest.raises(ValueError, match="horizon"):
        area_over_cost(ROLLOUTS, line, 300.0, 301.0)


def test_a_method_twice_as_costly_loses_its_lead_per_rollout_on_the_compute_matched_axis() -> None:
    a, b = np.zeros((3, 4, 1, 1)), np.zeros((3, 4, 1, 1))
    a[:, :, 0, 0] = [0.0, 0.1, 0.2, 0.3]  # A: 0.1 a 100 rollouts, 300 s a run
    b[:, :, 0, 0] = [0.0, 0.15, 0.3, 0.45]  # B: 1.5x A per rollout, but 600 s a run
    assert seed_paired_area(ROLLOUTS, a, b).mean > 0
    test = seed_paired_cost_area(ROLLOUTS, a, [300.0] * 3, b, [600.0] * 3)
    # over the first 300 s: A's mean 0.15; B reaches 150 rollouts (0.225) in them, its mean 0.1125
    assert test.mean == pytest.approx(0.1125 - 0.15, abs=MEAN)
    assert len(test.differences) == 3
