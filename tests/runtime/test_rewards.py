"""TRCA rewards, returns and advantages: the Numba kernels against a loop-by-loop reading of LANGUAGE.md, and the
properties the spec asks for."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.compiler.threads import balanced_cuts
from tracec.runtime.advantages import MIN_STEPS_PER_PART, episode_advantage, grpo_advantage, step_advantage
from tracec.runtime.rewards import (
    RewardConfig,
    StepRewards,
    discounted_returns,
    evaluate_rewards,
    operator_weights,
    segment_ids,
    trca_rewards,
)

CATEGORIES = ("evidence", "execution", "invalidity")
KEYS = (-(2**63), -1, 0, 1, 7, 2**40 + 3, 2**63 - 1)  # int64 hashes, extremes included


# --- the spec, transcribed loop by loop ------------------------------------------------------------------------


def _population_std(xs: list[float]) -> float:
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


def _standardized(values: list[float], keys: list[object], eps: float, divide: bool = True) -> list[float]:
    groups: dict[object, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key].append(i)
    out = [0.0] * len(values)
    for members in groups.values():
        xs = [values[i] for i in members]
        if len(xs) < 2 or _population_std(xs) <= 1e-9:
            continue
        mean, std = sum(xs) / len(xs), _population_std(xs)
        for i in members:
            out[i] = (values[i] - mean) / (std + eps) if divide else values[i] - mean
    return out


def reference(O, offsets, env_reward, task_group, context_key, categories, config):
    """Every formula of "Rewards (exact)" as written, one step and one operator at a time."""
    budget = {"evidence": config.budget_evidence, "execution": config.budget_execution,
              "invalidity": config.budget_invalidity}
    M = {c: sum(1 for x in categories if x == c) for c in CATEGORIES}
    n_ops = len(categories)
    r_f, r_b, r_trca, returns, step_task, step_episode = [], [], [], [], [], []
    for i in range(len(offsets) - 1):
        steps = range(offsets[i], offsets[i + 1])
        C = [0] * n_ops
        phi_prev = 0.0
        episode_trca = []
        for t in steps:
            q = 0.0
            for j, c in enumerate(categories):
                if O[t][j] == 1:
                    q += budget[c] / M[c] if c != "invalidity" else -abs(budget[c]) / M[c]
            for j in range(n_ops):
                C[j] = max(C[j], int(O[t][j]))
            phi = 0.0
            for c in ("evidence", "execution"):
                if M[c]:
                    phi += budget[c] / M[c] * sum(C[j] for j in range(n_ops) if categories[j] == c)
            breakthrough = phi - phi_prev
            phi_prev = phi
            r_f.append(q)
            r_b.append(breakthrough)
            episode_trca.append((1 - config.lam) * q + config.lam * breakthrough)
            step_task.append(task_group[i])
            step_episode.append(i)
        r_trca += episode_trca
        last = len(episode_trca) - 1
        for t in range(len(episode_trca)):
            returns.append(sum(config.gamma ** (k - t) * ((env_reward[i] if k == last else 0.0) + episode_trca[k])
                               for k in range(t, len(episode_trca))))
    a_e = _standardized(list(env_reward), list(task_group), config.eps)
    if context_key is None:
        a_s = [0.0] * len(returns)
    else:
        a_s = _standardized(returns, list(zip(step_task, context_key)), config.eps)
    a_e_steps = [a_e[i] for i in step_episode]
    return {"r_F": r_f, "r_B": r_b, "r_TRCA": r_trca, "R": returns, "A_E": a_e_steps, "A_S": a_s,
            "A": [x + y for x, y in zip(a_e_steps, a_s)]}


# --- random batches ---------------------------------------------------------------------------------------------


@st.composite
def configs(draw):
    # No tiny nonzero weights: they make returns differ by ~1e-9 atop values ~1, where two correct summation
    # orders give standardized values that differ by more than any tight tolerance.
    def weight(low, high):
        return st.one_of(st.just(0.0), st.floats(low, high))

    return RewardConfig(budget_evidence=draw(weight(0.05, 3.0)), budget_execution=draw(weight(0.05, 3.0)),
                        budget_invalidity=draw(st.one_of(weight(0.05, 3.0), st.floats(-3.0, -0.05))),
                        lam=draw(weight(0.05, 1.0)), gamma=draw(weight(0.5, 1.0)),
                        eps=draw(st.sampled_from([1e-6, 0.0, 0.1])))


@st.composite
def batches(draw, with_context=True):
    # Mostly small rubrics; wide ones cross the 8-operator word loads and the 64-operator passes of the kernel.
    categories = draw(st.lists(st.sampled_from(CATEGORIES), max_size=6)
                      | st.lists(st.sampled_from(CATEGORIES), min_size=7, max_size=80))
    lengths = draw(st.lists(st.integers(0, 6), max_size=8))
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    n_steps, n_ops = int(offsets[-1]), len(categories)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    O = (rng.random((n_steps, n_ops)) < draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))).astype(np.uint8)
    outcome = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(-2.0, 2.0))
    env_reward = np.array(draw(st.lists(outcome, min_size=len(lengths), max_size=len(lengths))), dtype=np.float64)
    task_group = np.array(draw(st.lists(st.sampled_from(KEYS[:4]), min_size=len(lengths),
                                        max_size=len(lengths))), dtype=np.int64)
    context = None
    if with_context and draw(st.booleans()):
        context = np.array(draw(st.lists(st.sampled_from(KEYS), min_size=n_steps, max_size=n_steps)),
                           dtype=np.int64)
    return O, offsets, env_reward, task_group, context, categories


def _evaluate(batch, config):
    O, offsets, env_reward, task_group, context, categories = batch
    fire, coverage = operator_weights(categories, config)
    return evaluate_rewards(O, offsets, env_reward, task_group, context, fire, coverage, config)


@settings(max_examples=120, deadline=None)
@given(batches(), configs())
def test_kernels_match_the_spec_transcription(batch, config):
    got = _evaluate(batch, config)
    want = reference(*batch, config)
    for name, expected in want.items():
        actual = getattr(got, name)
        assert actual.dtype == np.float64 and actual.shape == (len(expected),), name
        np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-9, err_msg=name)


@settings(max_examples=60, deadline=None)
@given(batches(), configs())
def test_the_separate_entry_points_agree_with_evaluate_rewards(batch, config):
    O, offsets, env_reward, task_group, context, categories = batch
    fire, coverage = operator_weights(categories, config)
    got = evaluate_rewards(O, offsets, env_reward, task_group, context, fire, coverage, config)
    r_f, r_b, r_trca = trca_rewards(O.astype(bool), offsets, fire, coverage, config.lam)
    np.testing.assert_array_equal(np.stack([r_f, r_b, r_trca]), np.stack([got.r_F, got.r_B, got.r_TRCA]))
    np.testing.assert_array_equal(discounted_returns(r_trca, env_reward, offsets, config.gamma), got.R)
    # Task groups given per step (the generic path) group like task groups given per episode; the canonical
    # summation orders differ (steps by value there, episodes by content here), hence rounding.
    step_task = task_group[segment_ids(offsets)]
    np.testing.assert_allclose(step_advantage(got.R, step_task, context, config.eps), got.A_S, rtol=1e-12,
                               atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-5, 5), max_size=12).flatmap(
    lambda r: st.tuples(st.just(r), st.lists(st.sampled_from(KEYS[:3]), min_size=len(r), max_size=len(r)))),
    st.sampled_from(["std", "none"]))
def test_grpo_advantage_matches_transcription(rewards_and_groups, scale):
    rewards, groups = rewards_and_groups
    got = grpo_advantage(np.array(rewards), np.array(groups, dtype=np.int64), scale, 1e-6)
    np.testing.assert_allclose(got, _standardized(rewards, groups, 1e-6, divide=scale == "std"), atol=1e-9)


# --- properties the spec names ----------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(CATEGORIES), min_size=1, max_size=8), st.integers(0, 60), st.integers(0, 2**32 - 1),
       configs())
def test_breakthroughs_telescope_to_the_final_potential(categories, length, seed, config):
    O = (np.random.default_rng(seed).random((length, len(categories))) < 0.15).astype(np.uint8)
    fire, coverage = operator_weights(categories, config)
    _, r_b, _ = trca_rewards(O, np.array([0, length]), fire, coverage, config.lam)
    phi_final = float(coverage @ O.any(axis=0)) if length else 0.0
    assert (r_b >= 0).all()
    assert 0 <= r_b.sum() == pytest.approx(phi_final, abs=1e-12)
    assert r_b.sum() <= config.budget_evidence + config.budget_execution + 1e-12


@given(st.integers(1, 5), st.integers(0, 4), st.floats(1e-3, 1.0), st.floats(0.1, 3.0))
def test_first_coverage_beats_a_repeat_of_the_same_evidence(n_evidence, n_other, lam, budget):
    categories = ["evidence"] * n_evidence + ["execution"] * n_other
    config = RewardConfig(budget_evidence=budget, lam=lam)
    fire, coverage = operator_weights(categories, config)
    O = np.zeros((3, len(categories)), dtype=np.uint8)
    O[0, 0] = O[2, 0] = 1  # the same evidence, first at step 0, again at step 2
    _, _, r_trca = trca_rewards(O, np.array([0, 3]), fire, coverage, lam)
    assert r_trca[0] > r_trca[2] >= 0


@settings(max_examples=60, deadline=None)
@given(batches(), configs())
def test_an_all_failed_group_still_gets_step_advantages(batch, config):
    O, offsets, _, _, _, categories = batch
    n_episodes, n_steps = offsets.size - 1, int(offsets[-1])
    task_group = np.zeros(n_episodes, dtype=np.int64)
    context = (np.arange(n_steps) % 3).astype(np.int64)
    got = _evaluate((O, offsets, np.zeros(n_episodes), task_group, context, categories), config)
    assert not got.A_E.any()
    for key in range(3):
        returns = got.R[context == key]
        if returns.size:
            deviates = np.abs(returns - returns.mean()) > 1e-6
            assert (got.A_S[context == key][deviates] != 0).all()


@settings(max_examples=50, deadline=None)
@given(batches(with_context=False), configs())
def test_no_context_means_no_step_advantage(batch, config):
    got = _evaluate(batch, config)
    assert not got.A_S.any()
    np.testing.assert_array_equal(got.A, got.A_E)


def test_singleton_and_flat_groups_get_zero():
    env_reward = np.array([0.7, 1.0, 1.0, 1.0, 0.2, 0.2 + 1e-12])
    task_group = np.array([5, 9, 9, 9, 3, 3])
    assert not episode_advantage(env_reward, task_group, 1e-6).any()
    assert not step_advantage(env_reward, task_group, np.zeros(6, dtype=np.int64), 1e-6).any()
    for scale in ("std", "none"):
        assert not grpo_advantage(env_reward, task_group, scale, 1e-6).any()


def test_group_relative_advantage_by_hand():
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 3.0])
    group = np.array([2, 2, 2, 2, -(2**63)])  # the last one is alone
    std = 0.5  # population std of {1, 0, 0, 1}
    np.testing.assert_allclose(grpo_advantage(rewards, group, "std", 0.0), [1, -1, -1, 1, 0])
    np.testing.assert_allclose(grpo_advantage(rewards, group, "none", 0.0), [0.5, -0.5, -0.5, 0.5, 0])
    np.testing.assert_allclose(episode_advantage(rewards, group, 0.5), [0.5 / (std + 0.5), -0.5, -0.5, 0.5, 0])


@settings(max_examples=80, deadline=None)
@given(batches(), configs(), st.randoms(use_true_random=False))
def test_permuting_episodes_permutes_the_outputs_exactly(batch, config, rnd):
    O, offsets, env_reward, task_group, context, categories = batch
    n_episodes = offsets.size - 1
    perm = list(range(n_episodes))
    rnd.shuffle(perm)
    steps = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in perm] + [np.zeros(0, np.int64)])
    lengths = np.diff(offsets)[perm]
    permuted = (O[steps], np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), env_reward[perm],
                task_group[perm], None if context is None else context[steps], categories)
    got, shuffled = _evaluate(batch, config), _evaluate(permuted, config)
    for name in ("r_F", "r_B", "r_TRCA", "R", "A_E", "A_S", "A"):
        np.testing.assert_array_equal(getattr(shuffled, name), getattr(got, name)[steps], err_msg=name)


# --- plumbing and errors ----------------------------------------------------------------------------------------


def test_operator_weights_split_each_budget_among_its_category():
    config = RewardConfig(budget_evidence=1.0, budget_execution=3.0, budget_invalidity=-0.5)
    fire, coverage = operator_weights(["execution", "evidence", "execution", "invalidity", "execution"], config)
    np.testing.assert_allclose(fire, [1.0, 1.0, 1.0, -0.5, 1.0])
    np.testing.assert_allclose(coverage, [1.0, 1.0, 1.0, 0.0, 1.0])
    fire, coverage = operator_weights([], config)
    assert fire.shape == coverage.shape == (0,)


def test_returns_discount_and_count_the_env_reward_once():
    r = np.array([1.0, 0.0, 2.0, 5.0])
    R = discounted_returns(r, np.array([10.0, 0.0, 7.0]), np.array([0, 3, 3, 4]), 0.5)
    np.testing.assert_allclose(R, [1 + 0.5 * (0 + 0.5 * 12), 0.5 * 12, 12, 12])


def test_segment_ids_skip_empty_episodes():
    np.testing.assert_array_equal(segment_ids(np.array([0, 2, 2, 3])), [0, 0, 2])


@pytest.mark.parametrize("field, value", [("lam", 1.5), ("gamma", -0.1), ("budget_invalidity", math.inf),
                                          ("budget_evidence", math.nan), ("budget_execution", -1.0),
                                          ("eps", -1e-6)])
def test_config_rejects_out_of_range_values(field, value):
    with pytest.raises(ValueError, match=field):
        RewardConfig(**{field: value})


def test_bad_inputs_are_named():
    config = RewardConfig()
    with pytest.raises(ValueError, match="operator 1 has category 'evidance'"):
        operator_weights(["evidence", "evidance"], config)
    fire, coverage = operator_weights(["evidence"], config)
    O = np.zeros((3, 1), dtype=np.uint8)
    with pytest.raises(ValueError, match="must not decrease"):
        trca_rewards(O, np.array([0, 2, 1, 3]), fire, coverage, 0.5)
    with pytest.raises(ValueError, match="from 0 to n_steps = 3"):
        trca_rewards(O, np.array([0, 2]), fire, coverage, 0.5)
    with pytest.raises(ValueError, match="uint8"):
        trca_rewards(O.astype(np.float32), np.array([0, 3]), fire, coverage, 0.5)
    with pytest.raises(ValueError, match=r"fire_weight must have shape \(1,\)"):
        trca_rewards(O, np.array([0, 3]), np.zeros(2), coverage, 0.5)
    with pytest.raises(ValueError, match="context_key must have shape"):
        step_advantage(np.zeros(3), np.zeros(3, dtype=np.int64), np.zeros(2, dtype=np.int64), 1e-6)
    with pytest.raises(ValueError, match="env_reward has a non-finite entry at index 1"):
        episode_advantage(np.array([0.0, math.nan]), np.zeros(2, dtype=np.int64), 1e-6)
    with pytest.raises(ValueError, match="scale must be"):
        grpo_advantage(np.zeros(2), np.zeros(2, dtype=np.int64), "mean", 1e-6)  # type: ignore[arg-type]


def test_threads_share_the_batch_without_changing_a_bit():
    """Batches big enough to be cut into parts: any thread count gives the single-thread result exactly, with task
    groups laid out in runs (as rollouts come) or interleaved across the whole batch."""
    rng = np.random.default_rng(5)
    categories = ["evidence"] * 5 + ["execution"] * 6 + ["invalidity"] * 4
    lengths = rng.integers(0, 40, 12000)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_steps = int(offsets[-1])
    assert len(balanced_cuts(offsets, 2, MIN_STEPS_PER_PART)) > 2  # big enough to be shared
    O = (rng.random((n_steps, len(categories))) < 0.15).astype(np.uint8)
    env_reward = rng.integers(0, 2, lengths.size).astype(np.float64)
    context = rng.integers(0, 30, n_steps).astype(np.int64)
    config = RewardConfig()
    fire, coverage = operator_weights(categories, config)
    for task_group in (np.arange(lengths.size) // 8, np.arange(lengths.size) % 1500):
        single = evaluate_rewards(O, offsets, env_reward, task_group, context, fire, coverage, config, threads=1)
        for threads in (2, 3):
            shared = evaluate_rewards(O, offsets, env_reward, task_group, context, fire, coverage, config, threads)
            for name in StepRewards.__dataclass_fields__:
                np.testing.assert_array_equal(getattr(shared, name), getattr(single, name), err_msg=name)


def test_outputs_fill_a_given_block_and_bad_blocks_are_refused():
    rng = np.random.default_rng(3)
    categories = ["evidence", "execution", "invalidity"] * 3
    offsets = np.array([0, 4, 9, 9, 15], dtype=np.int64)
    O = (rng.random((15, len(categories))) < 0.3).astype(np.uint8)
    env_reward, task_group = np.array([1.0, 0.0, 1.0, 0.0]), np.array([1, 1, 2, 2], dtype=np.int64)
    context = rng.integers(0, 3, 15).astype(np.int64)
    config = RewardConfig()
    fire, coverage = operator_weights(categories, config)
    fresh = evaluate_rewards(O, offsets, env_reward, task_group, context, fire, coverage, config)
    block = np.full((7, 20), np.nan)  # wider than the batch: the first 15 columns are used
    given = evaluate_rewards(O, offsets, env_reward, task_group, context, fire, coverage, config, out=block)
    assert np.shares_memory(given.A, block) and np.isnan(block[:, 15:]).all()
    for name in StepRewards.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(given, name), getattr(fresh, name), err_msg=name)
    for bad in (np.empty((6, 15)), np.empty((7, 14)), np.empty((7, 15), dtype=np.float32), np.empty((15, 7)).T):
        with pytest.raises(ValueError, match=r"out must be a writable float64 array of shape \(7, m >= 15\)"):
            evaluate_rewards(O, offsets, env_reward, task_group, context, fire, coverage, config, out=bad)
