"""Advantages against the formulas of docs/language.md ("Rewards (exact)") computed in exact arithmetic, for batches
that mix huge outcomes (1e300, 1e308) with ordinary ones, through every kernel backend (issue 20 §2).

The transcription reads the floats the kernels standardize (each episode's `env_reward`, each step's return R as
the output holds it) as the rationals they are, and takes means, variances and square roots exactly (Fraction,
then Decimal at 60 digits): a step group of ordinary returns keeps its advantages beside a huge one in the same
task group, and a group of equal huge values is flat. The returns themselves are checked against an exact
transcription too (they are dyadic here, so exact but for the rounding of huge sums).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import replace
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numerics import standardized_tolerance, tolerance
from tracec.compiler.backends import compile_kernel
from tracec.compiler.load import load_rubric
from tracec.runtime.facts.trajectories.jsonl import Episode
from tracec.runtime.scored_batch import ScoredBatch
from tracec.runtime.scoring import RubricScorer

SOURCE = """
schema walk { state { room: entity } action { go: bool } }
rubric walking for walk {
  evidence goes "goes somewhere": act.go
  lambda 0.5
  gamma 0.5
  context prev.room
}
"""
EPS, ZERO_VARIANCE = Fraction(1e-6), Fraction(1e-9)
HUGE = (1e300, -1e300, 1e308, -1e308, 2.0**481, 2.0**480)  # 2^480 itself is the last value left unscaled
ORDINARY = (0.0, 1.0, -1.0, 2.0, 3.5, -0.25, 100.0)  # dyadic: their sums are exact, their spreads far from 1e-9


def _exact_standardized(values: Sequence[float], keys: Sequence[Hashable]) -> list[float]:
    """(x - mean) / (std + eps) in each group of equal keys, 0 for a group of one or of std <= 1e-9."""
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key].append(i)
    out = [0.0] * len(values)
    with localcontext() as decimal:
        decimal.prec = 60
        for members in groups.values():
            xs = [Fraction(values[i]) for i in members]
            mean = sum(xs, Fraction(0)) / len(xs)
            variance = sum(((x - mean) ** 2 for x in xs), Fraction(0)) / len(xs)
            std = (Decimal(variance.numerator) / Decimal(variance.denominator)).sqrt()
            if len(xs) < 2 or std <= Decimal(ZERO_VARIANCE.numerator) / Decimal(ZERO_VARIANCE.denominator):
                continue
            scale = std + Decimal(EPS.numerator) / Decimal(EPS.denominator)
            for i, x in zip(members, xs):
                deviation = x - mean
                out[i] = float(Decimal(deviation.numerator) / Decimal(deviation.denominator) / scale)
    return out


def _bounds(values: Sequence[float], keys: Sequence[Hashable]) -> np.ndarray:
    """Per value, how far the kernels' standardized value may be from `_exact_standardized`'s: the rule's bound
    (tests/numerics.py) for its group; 0 in a group of one or a flat one (both give exactly 0)."""
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key].append(i)
    out = np.zeros(len(values))
    for members in groups.values():
        if len(members) >= 2 and len({values[i] for i in members}) > 1:
            out[members] = standardized_tolerance([values[i] for i in members], float(EPS))
    return out


def _exact_returns(episode: Episode) -> list[Fraction]:
    """R_t of one episode: q = 1 where `go` fires, r_B = 1 where it fires first, r_TRCA = 0.5 q + 0.5 r_B (lambda
    0.5), discounted by gamma 0.5 with the env_reward at the last step."""
    fired = [bool(action["go"]) for action in episode.actions]
    trca = [Fraction(1, 2) * go + Fraction(1, 2) * (go and not any(fired[:t])) for t, go in enumerate(fired)]
    env = [Fraction(0)] * len(trca)
    if env:
        env[-1] = Fraction(episode.env_reward)
    return [sum((Fraction(1, 2) ** (k - t) * (env[k] + trca[k]) for k in range(t, len(trca))), Fraction(0))
            for t in range(len(trca))]


@pytest.fixture(scope="module", params=["interp", "numba", "c"])
def scorer(request: pytest.FixtureRequest) -> RubricScorer:
    compiled = load_rubric(SOURCE, "walk.rubric")
    return RubricScorer(compiled, compile_kernel(compiled.program, request.param, None))


def _check(result: ScoredBatch, episodes: list[Episode]) -> None:
    steps = [(e, t) for e, episode in enumerate(episodes) for t in range(len(episode.actions))]
    returns = [r for episode in episodes for r in _exact_returns(episode)]
    rewards = result.rewards
    # a return sums <= 3 discounted terms, exact but where a huge outcome rounds: relative to the return itself
    np.testing.assert_allclose(rewards.R, [float(r) for r in returns], rtol=tolerance(6, 1.0, np.float64), atol=0)
    a_e = _exact_standardized([e.env_reward for e in episodes], [e.task for e in episodes])
    want_e = [a_e[e] for e, _ in steps]
    step_keys = [(episodes[e].task, episodes[e].states[t]["room"]) for e, t in steps]
    want_s = _exact_standardized(rewards.R.tolist(), step_keys)
    bound_e = _bounds([e.env_reward for e in episodes], [e.task for e in episodes])[[e for e, _ in steps]]
    bound_s = _bounds(rewards.R.tolist(), step_keys)
    assert (np.abs(rewards.A_E - want_e) <= bound_e).all()
    assert (np.abs(rewards.A_S - want_s) <= bound_s).all()
    assert (np.abs(rewards.A - np.add(want_e, want_s)) <= bound_e + bound_s + tolerance(1, 1.0, np.float64)
            * np.abs(rewards.A)).all()


def _episode(name: str, task: str, rooms: list[str], goes: list[bool], env_reward: float) -> Episode:
    states = [{"room": room} for room in rooms] + [{"room": "end"}]
    return Episode(name, task, "", states, [{"go": go} for go in goes], env_reward, None)


@st.composite
def batches(draw: st.DrawFn) -> list[Episode]:
    episodes = []
    for i in range(draw(st.integers(1, 9))):
        n_steps = draw(st.integers(0, 3))
        rooms = draw(st.lists(st.sampled_from("ab"), min_size=n_steps, max_size=n_steps))
        goes = draw(st.lists(st.booleans(), min_size=n_steps, max_size=n_steps))
        outcome = draw(st.sampled_from(HUGE) | st.sampled_from(ORDINARY))
        episodes.append(_episode(f"e{i}", draw(st.sampled_from(["t0", "t1"])), rooms, goes, outcome))
    return episodes


ISSUE = [_episode("huge", "t", ["a"], [False], 1e300), _episode("low", "t", ["b"], [False], 2.0),
         _episode("high", "t", ["b"], [False], 3.5)]
FLAT = [_episode(f"e{i}", "t", ["a"], [False], 1e300) for i in range(7)]  # 7 * 1e300 / 7 is not 1e300 in floats


@settings(max_examples=60, deadline=None)
@given(batches())
@example(ISSUE)
@example(FLAT)
def test_advantages_are_the_exact_formulas_beside_huge_outcomes(scorer: RubricScorer,
                                                                 episodes: list[Episode]) -> None:
    _check(scorer.score(episodes), episodes)


def test_a_step_group_beside_a_huge_outcome_keeps_its_advantages(scorer: RubricScorer) -> None:
    """Issue 20: the 2.0 / 3.5 step group got 0 beside an episode at 1e300 (scaled by 2^-600 with it, its squares
    underflowed), where with 100.0 in place of 1e300 it gets -1 and +1 (less eps)."""
    for outcome in (1e300, 100.0):
        result = scorer.score([replace(ISSUE[0], env_reward=outcome), *ISSUE[1:]])
        np.testing.assert_allclose(result.rewards.A_S, [0.0, -1 / (1 + 1e-6 / 0.75), 1 / (1 + 1e-6 / 0.75)],
                                   atol=standardized_tolerance([2.0, 3.5], 1e-6), rtol=0)
    assert scorer.score(FLAT).rewards.A_E.tolist() == [0.0] * 7
