"""Statistics of learning curves that can tell two methods apart: paired bootstrap intervals over seeds and games.

A method's evaluation at one checkpoint is an array of wins, (seeds, games, episodes): every seed of every method
meets the same held-out games with the same random streams, so the games pair the methods. Every interval here is a
percentile bootstrap that resamples both sources of noise at once: the games (one draw shared by the two methods:
the pairing) and each method's seeds (independently: the runs are independent). Functions:
- `paired_difference`: the mean success of B minus A at one checkpoint, with its interval;
- `reach`: the rollouts a curve needs to reach a target success, by linear interpolation between evaluated points
  (a first crossing of the curve, not of one noisy endpoint: the curve is a mean over seeds and games), or None;
- `reach_ratio`: TRCA's rollouts to reach a share of GRPO's final success over GRPO's own, with its interval (a
  resample where a method never reaches the target counts at the budget, so the ratio is then a bound);
- `area_under_curve`: mean success over the rollout axis (trapezoids), normalised by the budget;
- `seed_paired_area`: the pre-registered primary metric (docs/learning.md): per training seed, B's area minus A's
  (seed i of one method paired with seed i of the other: the same task stream and evaluation stream), their mean,
  and the two-sided p-value of the exact sign-flip permutation test (all 2^n sign assignments of the n
  differences; no distribution assumed);
- `holm`: Holm's step-down adjusted p-values, the pre-registered correction over TRCA's three comparisons;
- `level_reaches`: each seed's rollouts to reach a fixed success level on its own curve (a secondary metric);
- `seed_paired_cost_area`: the primary metric on the compute-matched axis: the area over the first CPU seconds
  that every run of both methods spent, each run's seconds spread evenly over its rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ROUNDS = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.estimate:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"

    def level(self) -> str:
        """As a level (a success rate), not a difference."""
        return f"{self.estimate:.3f} [{self.low:.3f}, {self.high:.3f}]"

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def _percentiles(samples: np.ndarray) -> tuple[float, float]:
    finite = samples[np.isfinite(samples)]
    if not len(finite):
        return float("nan"), float("nan")
    tail = (1 - LEVEL) / 2 * 100
    return float(np.percentile(finite, tail)), float(np.percentile(finite, 100 - tail))


def _resample(rng: np.random.Generator, seeds: int, games: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(0, seeds, seeds), rng.integers(0, games, games)


def paired_difference(a: np.ndarray, b: np.ndarray, *, seed: int = 0, rounds: int = ROUNDS) -> Interval:
    """Mean success of `b` minus `a` (each (seeds, games, episodes), the same games), with its interval."""
    _check_pair(a, b)
    rng = np.random.default_rng(seed)
    per_game_a, per_game_b = a.mean(axis=2), b.mean(axis=2)  # (seeds, games)
    samples = np.empty(rounds)
    for r in range(rounds):
        games = rng.integers(0, a.shape[1], a.shape[1])
        seeds_a, seeds_b = rng.integers(0, a.shape[0], a.shape[0]), rng.integers(0, b.shape[0], b.shape[0])
        samples[r] = per_game_b[np.ix_(seeds_b, games)].mean() - per_game_a[np.ix_(seeds_a, games)].mean()
    return Interval(float(per_game_b.mean() - per_game_a.mean()), *_percentiles(samples))


def reach(rollouts: Sequence[int], success: Sequence[float], target: float) -> float | None:
    """The first rollout count at which the piecewise-linear curve through the evaluated points reaches `target`
    (0 when the untrained point already does); None when it never does."""
    if success[0] >= target:
        return 0.0
    for k in range(1, len(rollouts)):
        if success[k] >= target:
            share = (target - success[k - 1]) / (success[k] - success[k - 1])
            return float(rollouts[k - 1] + share * (rollouts[k] - rollouts[k - 1]))
    return None


def reach_ratio(rollouts: Sequence[int], grpo: np.ndarray, trca: np.ndarray, *, share: float, seed: int = 0,
                rounds: int = ROUNDS) -> tuple[Interval, list[float | None], list[float | None]]:
    """The ratio of means of per-seed reaches: each seed's rollouts to reach `share` x GRPO's final mean success,
    read on that seed's own curve (mean over games and episodes, piecewise linear between evaluated points; a seed
    that never reaches it counts as the budget), averaged over TRCA's seeds, over the same average for GRPO's seeds
    (not the crossing of the mean curves); its interval resamples seeds and games (the goal recomputed from each
    resample's GRPO finals). Also each seed's reach (None: never). `grpo`, `trca`: (seeds, points, games, episodes)
    wins along the curve."""
    rng = np.random.default_rng(seed)
    budget = float(rollouts[-1])

    def reaches(runs: np.ndarray, games: np.ndarray, target: float) -> np.ndarray:
        curves = runs[:, :, games].mean(axis=(2, 3))  # (seeds, points)
        found = [reach(rollouts, curve, target) for curve in curves]
        return np.array([budget if r is None else r for r in found])

    n_games = int(grpo.shape[2])  # an int, not the shape's Any: then `integers` is typed an array
    everything = np.arange(n_games)
    target = share * grpo[:, -1].mean()
    estimate = reaches(trca, everything, target).mean() / reaches(grpo, everything, target).mean()
    samples = np.empty(rounds)
    for r in range(rounds):
        games = rng.integers(0, n_games, n_games)
        seeds_g, seeds_t = rng.integers(0, grpo.shape[0], grpo.shape[0]), rng.integers(0, trca.shape[0], trca.shape[0])
        goal = share * grpo[seeds_g][:, -1][:, games].mean()
        with np.errstate(invalid="ignore", divide="ignore"):  # a goal at the start: 0 / 0, left out as not finite
            samples[r] = reaches(trca[seeds_t], games, goal).mean() / reaches(grpo[seeds_g], games, goal).mean()
    per_seed = [level_reaches(rollouts, runs, target) for runs in (grpo, trca)]
    return Interval(float(estimate), *_percentiles(samples)), per_seed[0], per_seed[1]


def area_under_curve(rollouts: Sequence[float], success: Sequence[float]) -> float:
    """Mean success over [0, budget] (trapezoids between the evaluated points)."""
    x, y = np.asarray(rollouts, dtype=float), np.asarray(success, dtype=float)
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def paired_auc(rollouts: Sequence[int], a: np.ndarray, b: np.ndarray, *, seed: int = 0,
               rounds: int = ROUNDS) -> Interval:
    """The area under B's curve minus A's (each (seeds, points, games, episodes)), with its interval."""
    rng = np.random.default_rng(seed)
    curve_a, curve_b = a.mean(axis=3), b.mean(axis=3)  # (seeds, points, games)

    def auc(curves: np.ndarray) -> float:
        return area_under_curve(rollouts, curves.mean(axis=(0, 2)))

    samples = np.empty(rounds)
    for r in range(rounds):
        games = rng.integers(0, a.shape[2], a.shape[2])
        seeds_a, seeds_b = rng.integers(0, a.shape[0], a.shape[0]), rng.integers(0, b.shape[0], b.shape[0])
        samples[r] = auc(curve_b[seeds_b][:, :, games]) - auc(curve_a[seeds_a][:, :, games])
    return Interval(auc(curve_b) - auc(curve_a), *_percentiles(samples))


def success_interval(wins: np.ndarray, *, seed: int = 0, rounds: int = ROUNDS) -> Interval:
    """A method's mean success at one checkpoint ((seeds, games, episodes)) with its interval."""
    rng = np.random.default_rng(seed)
    per_game = wins.mean(axis=2)
    samples = np.empty(rounds)
    for r in range(rounds):
        seeds, games = _resample(rng, *per_game.shape)
        samples[r] = per_game[np.ix_(seeds, games)].mean()
    return Interval(float(per_game.mean()), *_percentiles(samples))


def _check_pair(a: np.ndarray, b: np.ndarray) -> None:
    if a.ndim != 3 or b.ndim != 3 or a.shape[1] != b.shape[1]:
        raise ValueError(f"paired_difference: wins of shape (seeds, games, episodes) over the same games; got "
                         f"{a.shape} and {b.shape}")


@dataclass(frozen=True)
class PairedTest:
    mean: float  # the mean of the per-seed differences
    p_value: float  # two-sided, exact sign-flip permutation
    differences: tuple[float, ...]

    def __str__(self) -> str:
        return f"{self.mean:+.3f} (p = {self.p_value:.4f}, n = {len(self.differences)})"


MAX_EXACT_SEEDS = 20  # 2^20 sign assignments: about a second


def sign_flip_test(differences: Sequence[float]) -> PairedTest:
    """The mean of paired `differences` and the exact two-sided sign-flip permutation p-value: the share of the 2^n
    assignments of signs whose |mean| is at least the observed one (the observed assignment included, so p > 0)."""
    d = np.asarray(differences, dtype=float)
    if not 1 <= len(d) <= MAX_EXACT_SEEDS or not np.all(np.isfinite(d)):
        raise ValueError(f"sign_flip_test: 1 to {MAX_EXACT_SEEDS} finite differences, got {len(d)}")
    signs = 1 - 2 * ((np.arange(2 ** len(d))[:, None] >> np.arange(len(d))) & 1)  # (2^n, n) of +-1
    means = np.abs(signs @ d) / len(d)
    observed = abs(d.mean())
    # An assignment whose mean equals the observed one in exact arithmetic counts: a sum of n terms is off by at most
    # n eps |d|_1 (worst case), its mean by eps |d|_1, and two of them by twice that.
    tied = means >= observed - 2 * np.finfo(float).eps * float(np.abs(d).sum())
    return PairedTest(float(d.mean()), float(tied.mean()), tuple(float(x) for x in d))


def seeds_both_ran(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two methods' runs ((seeds, ...), each in seed order from the same first seed) on the seeds both ran: a method
    run at fewer seeds (an ablation, the gate's oracle) runs the other's first few, so an interval over these reads
    the runs the seed-paired test reads (over all of the other's seeds it would centre on another estimate)."""
    seeds = min(len(a), len(b))
    return a[:seeds], b[:seeds]


def seed_paired_area(rollouts: Sequence[int], a: np.ndarray, b: np.ndarray) -> PairedTest:
    """Per seed, the area under B's curve minus A's (each (seeds, points, games, episodes), seed i paired with seed i
    of the other), tested by `sign_flip_test`; the seeds beyond the shorter method's are left out."""
    a, b = seeds_both_ran(a, b)
    return sign_flip_test([area_under_curve(rollouts, run_b.mean(axis=(1, 2)))
                           - area_under_curve(rollouts, run_a.mean(axis=(1, 2))) for run_a, run_b in zip(a, b)])


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the given order: the k-th smallest (k from 0) times (m - k), kept from falling
    below the one before it in that order, at most 1. A hypothesis is rejected at family-wise level alpha exactly
    where its adjusted p-value is <= alpha."""
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(sorted(range(len(p_values)), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def level_reaches(rollouts: Sequence[int], runs: np.ndarray, level: float) -> list[float | None]:
    """Each seed's rollouts to reach success `level` on its own curve (`reach`; None: never). `runs`: (seeds, points,
    games, episodes) wins."""
    return [reach(rollouts, run.mean(axis=(1, 2)), level) for run in runs]


def area_over_cost(rollouts: Sequence[int], success: Sequence[float], seconds: float, horizon: float) -> float:
    """Mean success over a run's first `horizon` CPU seconds (0 < horizon <= seconds): its evaluated points placed at
    `rollouts` x seconds / rollouts[-1] (every iteration the same work), piecewise linear between them."""
    x = np.asarray(rollouts, dtype=float) * seconds / rollouts[-1]
    y = np.asarray(success, dtype=float)
    if not 0 < horizon <= x[-1] * (1 + 1e-12):
        raise ValueError(f"area_over_cost: horizon {horizon} outside the run's (0, {x[-1]}] seconds")
    inside = x < horizon
    return area_under_curve(np.append(x[inside], horizon).tolist(),
                            np.append(y[inside], np.interp(horizon, x, y)).tolist())


def seed_paired_cost_area(rollouts: Sequence[int], a: np.ndarray, a_seconds: Sequence[float], b: np.ndarray,
                          b_seconds: Sequence[float]) -> PairedTest:
    """`seed_paired_area` on the CPU-seconds axis: per seed, B's area minus A's over the first seconds that every run
    of both spent (`area_over_cost`), tested by `sign_flip_test`."""
    a, b = seeds_both_ran(a, b)
    horizon = min(*a_seconds[:len(a)], *b_seconds[:len(b)])
    return sign_flip_test([area_over_cost(rollouts, b[i].mean(axis=(1, 2)), b_seconds[i], horizon)
                           - area_over_cost(rollouts, a[i].mean(axis=(1, 2)), a_seconds[i], horizon)
                           for i in range(len(a))])
