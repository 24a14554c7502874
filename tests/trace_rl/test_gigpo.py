"""GiGPO's credit against a direct transcription of its paper's equations (arXiv 2505.10978, Eqs. 3, 5-8), and its
anchor states read from a real environment's own states."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import standardized_tolerance, tolerance
from toy_env import capability_env
from tracec.trace_rl.envs.toolcall import format_tool_call
from tracec.trace_rl.grpo.gigpo import anchor_key, environment_steps, gigpo_step_advantages
from tracec.trace_rl.grpo.standardize import standardize_in_groups
from tracec.trace_rl.rollouts.engine import EpisodeRollout

EPS = 1e-6

# One episode: (its group id, its steps as (reward, anchor state) pairs).
Played = tuple[int, list[tuple[float, int]]]


def standardized(value: float, members: list[float], divide: bool) -> float:
    """(x - mean) / (std + eps), std the population std; or x - mean (F_norm = 1)."""
    mean = sum(members) / len(members)
    std = (sum((m - mean) ** 2 for m in members) / len(members)) ** 0.5
    return (value - mean) / (std + EPS) if divide else value - mean


def transcription(episodes: list[Played], gamma: float, omega: float, divide: bool) -> list[list[float]]:
    """The paper's equations as plain loops: A_E over the episodes of a group (Eq. 3), R_t = sum_k gamma^k r_{t+k}
    (Eq. 5), step groups of equal anchor states within an episode group (Eq. 6), A_S within them (Eq. 7), and
    A = A_E + omega A_S (Eq. 8)."""
    total = [sum(r for r, _ in steps) for _, steps in episodes]
    returns = [[sum(gamma ** k * steps[t + k][0] for k in range(len(steps) - t)) for t in range(len(steps))]
               for _, steps in episodes]
    out = []
    for i, (group, steps) in enumerate(episodes):
        a_e = standardized(total[i], [total[j] for j, (g, _) in enumerate(episodes) if g == group], divide)
        row = []
        for t, (_, anchor) in enumerate(steps):
            step_group = [returns[j][u] for j, (g, other) in enumerate(episodes) if g == group
                          for u, (_, s) in enumerate(other) if s == anchor]
            row.append(a_e + omega * standardized(returns[i][t], step_group, divide))
        out.append(row)
    return out


def run(episodes: list[Played], gamma: float, omega: float, divide: bool) -> list[np.ndarray]:
    return gigpo_step_advantages(np.array([g for g, _ in episodes]),
                                 [np.array([r for r, _ in steps], dtype=np.float64) for _, steps in episodes],
                                 [np.array([s for _, s in steps], dtype=np.int64) for _, steps in episodes],
                                 gamma=gamma, step_weight=omega, divide_by_std=divide)


def closeness(episodes: list[Played], i: int, t: int, gamma: float, omega: float, divide: bool) -> float:
    """The rule (tests/numerics.py) for step t of episode i: the episode group's standardization, omega times the
    step group's, and the sum's rounding; the returns, a recurrence against sums of powers, differ by the
    roundings of 4 operations a step, at most the sum of |r|."""
    group, steps = episodes[i]
    size = max([1.0] + [sum(abs(r) for r, _ in s) for _, s in episodes])
    longest = max(len(s) for _, s in episodes)
    totals = [sum(r for r, _ in s) for g, s in episodes if g == group]
    returns = [sum(gamma ** k * s[u + k][0] for k in range(len(s) - u)) for g, s in episodes if g == group
               for u in range(len(s)) if s[u][1] == steps[t][1]]
    off = tolerance(4 * longest, size, np.float64)
    episode_close = standardized_tolerance(totals, EPS, input_error=off, divide=divide)
    step_close = standardized_tolerance(returns, EPS, input_error=off, divide=divide)
    # |A_E| <= sqrt(n - 1) < 3 standardized, <= 2 size centred; |A_S| likewise
    return episode_close + omega * step_close + tolerance(2, (1 + omega) * (2 * size + 3), np.float64)


def assert_matches_transcription(episodes: list[Played], gamma: float, omega: float, divide: bool) -> None:
    got, expected = run(episodes, gamma, omega, divide), transcription(episodes, gamma, omega, divide)
    assert [len(a) for a in got] == [len(s) for _, s in episodes]
    for i, (row, want) in enumerate(zip(got, expected)):
        for t, value in enumerate(want):
            assert row[t] == pytest.approx(value, abs=closeness(episodes, i, t, gamma, omega, divide)), (i, t)


SHARED: list[Played] = [  # one group of three from state 0; two pass through state 1, one wins from it
    (0, [(0.0, 0), (0.0, 1), (1.0, 2)]),
    (0, [(0.0, 0), (0.0, 1), (0.0, 3)]),
    (0, [(0.0, 0), (0.0, 4)]),
    (1, [(0.0, 0), (0.5, 5)]),  # another group: its state 0 is not the first group's
    (1, [(0.0, 0), (0.0, 6)]),
]
NOTHING_SHARED: list[Played] = [(0, [(0.0, 10), (1.0, 11)]), (0, [(0.0, 12), (0.0, 13), (0.0, 14)]),
                                (1, [(0.3, 15)]), (1, [(0.0, 16), (0.7, 17)])]
SINGLETONS: list[Played] = [(0, [(0.0, 0), (1.0, 1)]), (1, [(0.0, 0), (0.0, 1)]), (2, [])]
LOOP: list[Played] = [  # the first episode comes back to state 0 (a loop), then wins
    (0, [(0.0, 0), (0.0, 1), (0.0, 0), (1.0, 2)]),
    (0, [(0.0, 0), (0.0, 3)]),
]
CASES = {"shared anchors": SHARED, "no shared anchors": NOTHING_SHARED, "singleton groups": SINGLETONS,
         "a loop back to a state": LOOP}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("gamma", [1.0, 0.95])
@pytest.mark.parametrize("divide", [True, False], ids=["std", "mean_norm"])
def test_gigpo_equals_the_papers_equations_on_hand_made_groups(case: str, gamma: float, divide: bool) -> None:
    assert_matches_transcription(CASES[case], gamma, 1.0, divide)
    assert_matches_transcription(CASES[case], gamma, 0.5, divide)


def test_shared_anchors_give_the_hand_computed_advantages() -> None:
    """Eq. 8 by hand, F_norm = 1, gamma = 0.95: A_E = R - mean over the episodes; A_S = R_t - mean over the steps
    from the same state."""
    got = run([(0, [(0.0, 1), (1.0, 2)]), (0, [(0.0, 1), (0.0, 3), (0.0, 2)])], 0.95, 1.0, False)
    # A_E = +-0.5; state 1: returns 0.95 and 0 (A_S = +-0.475); state 2: 1 and 0 (+-0.5); state 3 alone: 0
    np.testing.assert_allclose(got[0], [0.975, 1.0], atol=tolerance(8, 1.0, np.float64), rtol=0)
    np.testing.assert_allclose(got[1], [-0.975, -0.5, -1.0], atol=tolerance(8, 1.0, np.float64), rtol=0)


def test_without_shared_anchors_every_step_has_the_episode_advantage() -> None:
    for divide in (True, False):
        got = run(NOTHING_SHARED, 0.95, 1.0, divide)
        totals = np.array([sum(r for r, _ in s) for _, s in NOTHING_SHARED])
        episode = standardize_in_groups(totals, np.array([g for g, _ in NOTHING_SHARED]), divide_by_std=divide)
        for row, a_e in zip(got, episode):
            assert np.array_equal(row, np.full(len(row), a_e))  # A_S = 0 exactly: no step has company


def test_a_lone_episode_has_no_episode_advantage_but_its_loop_still_teaches() -> None:
    """A group of one is its own mean: A_E = 0 (verl-agent would give it its raw return); a state it comes back to
    still compares the two visits' returns."""
    alone = run([(0, [(1.0, 0), (0.0, 1)])], 0.95, 1.0, True)
    assert np.array_equal(alone[0], [0.0, 0.0])
    looped = run([(0, [(0.0, 0), (0.0, 1), (1.0, 0)])], 0.95, 1.0, False)
    # state 0: returns 0.9025 (first visit) and 1 (second), mean 0.95125
    np.testing.assert_allclose(looped[0], [-0.04875, 0.0, 0.04875], atol=tolerance(8, 1.0, np.float64), rtol=0)


played = st.tuples(st.integers(0, 2), st.lists(st.tuples(st.one_of(st.just(0.0), st.floats(-3, 3,
                                                                                            allow_subnormal=False)),
                                                         st.integers(0, 3)), max_size=5))


@settings(max_examples=150, deadline=None)
@given(episodes=st.lists(played, min_size=1, max_size=8), gamma=st.one_of(st.sampled_from([1.0, 0.95]),
                                                                         st.floats(0, 1)),
       omega=st.floats(0, 2), divide=st.booleans())
def test_gigpo_equals_the_papers_equations_on_random_groups(episodes: list[Played], gamma: float, omega: float,
                                                            divide: bool) -> None:
    assert_matches_transcription(episodes, gamma, omega, divide)


def test_the_anchor_key_ignores_key_order_and_tells_values_apart() -> None:
    state = {"location": "kitchen", "holding": ["mug"], "door": {"open": True, "locked": False}, "n": 1}
    reordered = {"n": 1, "door": {"locked": False, "open": True}, "holding": ["mug"], "location": "kitchen"}
    assert anchor_key(state) == anchor_key(reordered)
    assert 0 <= anchor_key(state) < 2 ** 64
    for changed in ({**state, "location": "hall"}, {**state, "holding": ["mug", "cup"]}, {**state, "n": 2},
                    {**state, "n": True}, {**state, "n": "1"}, {**state, "n": None}, {**state, "extra": 0},
                    {k: v for k, v in state.items() if k != "n"}, {**state, "door": {"open": False, "locked": False}}):
        assert anchor_key(changed) != anchor_key(state), changed


@settings(max_examples=100, deadline=None)
@given(state=st.dictionaries(st.text(max_size=4), st.one_of(st.integers(), st.text(max_size=4), st.booleans(),
                                                               st.lists(st.text(max_size=3), max_size=3)),
                             max_size=6), data=st.data())
def test_the_anchor_key_of_a_state_is_its_key_in_any_key_order(state: dict[str, Any], data: st.DataObject) -> None:
    order = data.draw(st.permutations(list(state)))
    assert anchor_key({name: state[name] for name in order}) == anchor_key(state)


def play(seed: int, turns: list[str], member: int) -> EpisodeRollout:
    """One scripted episode of the shipped tool-calling environment, as the rollout engine would record it."""
    with contextlib.closing(capability_env()) as env:
        env.reset(seed)
        for turn in turns:
            if env.step(turn).done:
                break
        record = env.trajectory(f"g0.{member}")
    steps = len(record["actions"])
    return EpisodeRollout(group=0, member=member, seed=seed, episode=f"g0.{member}",
                          token_ids=np.zeros(1, dtype=np.int64), sampler_logprobs=np.zeros(1, dtype=np.float32),
                          step_of_token=np.zeros(1, dtype=np.int32), sampled=np.zeros(1, dtype=bool),
                          trajectory=record, reward=float(record["env_reward"]), success=bool(record["success"]),
                          truncated=False, turns=steps)


def solution(seed: int) -> list[str]:
    """The gold solution of task `seed`: its tool calls as the agent writes them, then a word to the user."""
    with contextlib.closing(capability_env()) as env:
        env.reset(seed)
        calls = env.scenario.gold_calls
    return [format_tool_call(c.name, c.arguments) for c in calls] + ["Done: it is all set."]


def test_the_anchor_states_are_the_environments_own_states() -> None:
    gold = solution(5)
    group = [play(5, gold, 0), play(5, gold[:1] + ["I cannot do more."], 1), play(5, ["hello", "hello"], 2)]
    assert group[0].reward == 1.0 and group[1].reward == group[2].reward == 0.0
    steps = [environment_steps(episode) for episode in group]
    for episode, (rewards, anchors) in zip(group, steps):
        assert np.array_equal(rewards, [0.0] * (episode.turns - 1) + [episode.reward])  # the terminal reward
        assert [int(a) for a in anchors] == [anchor_key(s) for s in episode.trajectory["states"][:episode.turns]]
    assert len({int(anchors[0]) for _, anchors in steps}) == 1  # one task: one opening state
    assert steps[0][1][1] == steps[1][1][1] != steps[2][1][1]  # the same first call, the same state after it
    advantages = gigpo_step_advantages(np.zeros(3), *zip(*steps), gamma=0.95, step_weight=1.0, divide_by_std=True)
    plain = gigpo_step_advantages(np.zeros(3), *zip(*steps), gamma=0.95, step_weight=0.0, divide_by_std=True)
    assert advantages[0][1] > plain[0][1] and advantages[1][1] < plain[1][1]  # from the shared state, the win counts
    with pytest.raises(ValueError, match="one state more than actions"):
        cut = {**group[0].trajectory, "states": group[0].trajectory["states"][:-1]}
        environment_steps(dataclasses.replace(group[0], trajectory=cut))


def test_with_no_step_weight_gigpo_is_grpo_bit_for_bit() -> None:
    gold = solution(6)
    group = [play(6, gold, 0), play(6, ["hello"] * 3, 1), play(6, gold[1:], 2), play(6, gold[:1] + ["bye"], 3)]
    rewards, anchors = zip(*(environment_steps(e) for e in group))
    groups = np.array([0, 0, 1, 1])
    for divide in (True, False):
        got = gigpo_step_advantages(groups, rewards, anchors, gamma=0.95, step_weight=0.0, divide_by_std=divide)
        grpo = standardize_in_groups(np.array([e.reward for e in group]), groups, divide_by_std=divide)
        for row, expected in zip(got, grpo):
            assert np.array_equal(row, np.full(len(row), expected))


def test_mismatched_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="one of each per episode"):
        gigpo_step_advantages(np.zeros(2), [np.zeros(1)], [np.zeros(1)], gamma=1.0, step_weight=1.0,
                              divide_by_std=True)
    with pytest.raises(ValueError, match="episode 0: 2 step rewards but 1 anchor keys"):
        gigpo_step_advantages(np.zeros(1), [np.zeros(2)], [np.zeros(1)], gamma=1.0, step_weight=1.0,
                              divide_by_std=True)
