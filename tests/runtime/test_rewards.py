"""TRCA rewards, returns and advantages: the fixed kernels (the C extension where built; equal to the Numba ones bit
for bit, test_fixed.py) against a loop-by-loop reading of LANGUAGE.md (the oracle),
the properties the spec asks for, exact step groups (context tuples, not their hashes), and finite outputs for any
finite input."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import standardized_tolerance, tolerance
from tracec.compiler import interp, ir
from tracec.compiler.backends import compile_kernel
from tracec.compiler.context import ContextKeys
from tracec.compiler.ir import ColumnSpec, KernelProgram, Node, entity_id
from tracec.compiler.threads import balanced_cuts
from tracec.dsl.defaults import STEP_SCALES
from tracec.dsl.types import BOOL, INT, SET
from tracec.runtime.facts.fact_batch import Column
from tracec.runtime.rewards.context_groups import exact_context_keys
from tracec.runtime.rewards.task_groups import MIN_STEPS_PER_PART, task_groups
from tracec.runtime.rewards.trca import (
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


def _standardized(values: list[float], keys: list[object], eps: float, scale: str = "std") -> list[float]:
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
            out[i] = (values[i] - mean) / (std + eps) if scale == "std" else values[i] - mean
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
        a_s = _standardized(returns, list(zip(step_task, context_key)), config.eps, config.step_scale)
    a_e_steps = [a_e[i] for i in step_episode]
    return {"r_F": r_f, "r_B": r_b, "r_TRCA": r_trca, "R": returns, "A_E": a_e_steps, "A_S": a_s,
            "A": [x + y for x, y in zip(a_e_steps, a_s)]}


def _standardized_bounds(values: list[float], keys: list[object], eps: float, scale: str,
                         input_error: float) -> np.ndarray:
    """Per value, the rule's bound (tests/numerics.py) for `_standardized` computed another way; 0 in the groups
    it leaves at 0 (both give exactly 0 there)."""
    groups: dict[object, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key].append(i)
    out = np.zeros(len(values))
    for members in groups.values():
        xs = [values[i] for i in members]
        if len(xs) >= 2 and _population_std(xs) > 1e-9:
            out[members] = standardized_tolerance(xs, eps, input_error=input_error, divide=scale == "std")
    return out


def reference_bounds(offsets, env_reward, task_group, context_key, categories, config, want):
    """How far the kernels may be from `reference`'s outputs `want` (the rule, tests/numerics.py, in fp64): a
    reward sums <= n_ops weights and a potential difference, at the size of the budgets; a return sums an episode's
    discounted rewards (each that far off) and its outcome; an advantage standardizes those."""
    budgets = max(1.0, abs(config.budget_evidence) + abs(config.budget_execution) + abs(config.budget_invalidity))
    reward = tolerance(len(categories) + 4, budgets, np.float64)
    longest = max(np.diff(offsets), default=0)
    outcome = max((abs(float(r)) for r in env_reward), default=0.0)
    ret = longest * reward + tolerance(3 * longest + 2, longest * (budgets + outcome), np.float64)
    steps = len(want["R"])
    step_task = [task_group[i] for i in range(len(offsets) - 1) for _ in range(offsets[i], offsets[i + 1])]
    step_episode = [i for i in range(len(offsets) - 1) for _ in range(offsets[i], offsets[i + 1])]
    a_e = _standardized_bounds(list(env_reward), list(task_group), config.eps, "std", 0.0)[step_episode]
    a_s = np.zeros(steps) if context_key is None else _standardized_bounds(
        want["R"], list(zip(step_task, context_key)), config.eps, config.step_scale, ret)
    return {"r_F": np.full(steps, reward), "r_B": np.full(steps, reward), "r_TRCA": np.full(steps, reward),
            "R": np.full(steps, ret), "A_E": a_e, "A_S": a_s,
            "A": a_e + a_s + tolerance(1, float(np.abs(want["A"], dtype=np.float64).max(initial=0.0)), np.float64)}


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
                        eps=draw(st.sampled_from([1e-6, 0.0, 0.1])), step_scale=draw(st.sampled_from(STEP_SCALES)))


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
    bounds = reference_bounds(*batch[1:], config, want)
    for name, expected in want.items():
        actual = getattr(got, name)
        assert actual.dtype == np.float64 and actual.shape == (len(expected),), name
        assert (np.abs(actual - np.asarray(expected, dtype=np.float64)) <= bounds[name]).all(), name


@settings(max_examples=60, deadline=None)
@given(batches(), configs())
def test_the_separate_entry_points_agree_with_evaluate_rewards(batch, config):
    O, offsets, env_reward, task_group, context, categories = batch
    fire, coverage = operator_weights(categories, config)
    got = evaluate_rewards(O, offsets, env_reward, task_group, context, fire, coverage, config)
    r_f, r_b, r_trca = trca_rewards(O.astype(bool), offsets, fire, coverage, config.lam)
    np.testing.assert_array_equal(np.stack([r_f, r_b, r_trca]), np.stack([got.r_F, got.r_B, got.r_TRCA]))
    np.testing.assert_array_equal(discounted_returns(r_trca, env_reward, offsets, config.gamma), got.R)


# --- properties the spec names ----------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(CATEGORIES), min_size=1, max_size=8), st.integers(0, 60), st.integers(0, 2**32 - 1),
       configs())
def test_breakthroughs_telescope_to_the_final_potential(categories, length, seed, config):
    O = (np.random.default_rng(seed).random((length, len(categories))) < 0.15).astype(np.uint8)
    fire, coverage = operator_weights(categories, config)
    _, r_b, _ = trca_rewards(O, np.array([0, length]), fire, coverage, config.lam)
    phi_final = float(coverage @ O.any(axis=0)) if length else 0.0
    # the rule (tests/numerics.py): potentials summing <= n_ops weights, their differences summed over the steps
    budget = max(1.0, config.budget_evidence + config.budget_execution)
    close = tolerance(length + len(categories) + 2, budget, np.float64)
    assert (r_b >= 0).all()
    assert 0 <= r_b.sum() == pytest.approx(phi_final, abs=close)
    assert r_b.sum() <= config.budget_evidence + config.budget_execution + close


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


def _one_step_episodes(env_reward, task_group, eps: float) -> StepRewards:
    """A_E of episodes of one step each, with no operators: the standardized outcomes themselves."""
    config = RewardConfig(eps=eps)
    n = len(env_reward)
    fire, coverage = operator_weights([], config)
    return evaluate_rewards(np.zeros((n, 0), np.uint8), np.arange(n + 1), np.asarray(env_reward, dtype=np.float64),
                            np.asarray(task_group, dtype=np.int64), None, fire, coverage, config)


def test_singleton_and_flat_groups_get_zero():
    env_reward = [0.7, 1.0, 1.0, 1.0, 0.2, 0.2 + 1e-12]
    task_group = [5, 9, 9, 9, 3, 3]
    assert not _one_step_episodes(env_reward, task_group, 1e-6).A_E.any()
    context = np.zeros(6, dtype=np.int64)  # one step group per task: flat or singleton again
    fire, coverage = operator_weights([], RewardConfig())
    got = evaluate_rewards(np.zeros((6, 0), np.uint8), np.arange(7), np.array(env_reward), np.array(task_group),
                           context, fire, coverage, RewardConfig())
    assert not got.A_S.any()


def test_step_scale_none_keeps_the_step_advantage_centred_only():
    # Two one-step-apart returns in one step group, a third step alone in its own: R - mean, and 0 for the lone one.
    O = np.array([[1], [0], [1]], np.uint8)
    offsets, context = np.array([0, 1, 2, 3]), np.array([4, 4, 9], np.int64)
    config = RewardConfig(lam=0.0, gamma=1.0, step_scale="none")
    fire, coverage = operator_weights(["evidence"], config)
    got = evaluate_rewards(O, offsets, np.zeros(3), np.zeros(3, np.int64), context, fire, coverage, config)
    np.testing.assert_array_equal(got.R, [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(got.A_S, [0.5, -0.5, 0.0])
    scaled = evaluate_rewards(O, offsets, np.zeros(3), np.zeros(3, np.int64), context, fire, coverage,
                              RewardConfig(lam=0.0, gamma=1.0, eps=0.0))
    np.testing.assert_array_equal(scaled.A_S, [1.0, -1.0, 0.0])  # the std of {1, 0} is 0.5


def test_group_relative_advantage_by_hand():
    rewards = [1.0, 0.0, 0.0, 1.0, 3.0]
    group = [2, 2, 2, 2, -(2**63)]  # the last one is alone
    std = 0.5  # population std of {1, 0, 0, 1}
    # dyadic values: every step of the arithmetic is exact
    np.testing.assert_array_equal(_one_step_episodes(rewards, group, 0.0).A_E, [1, -1, -1, 1, 0])
    np.testing.assert_array_equal(_one_step_episodes(rewards, group, 0.5).A_E,
                                  [0.5 / (std + 0.5), -0.5, -0.5, 0.5, 0])


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
    np.testing.assert_array_equal(fire, [1.0, 1.0, 1.0, -0.5, 1.0])  # 3 / 3, 1 / 1, -0.5 / 1: exact
    np.testing.assert_array_equal(coverage, [1.0, 1.0, 1.0, 0.0, 1.0])
    fire, coverage = operator_weights([], config)
    assert fire.shape == coverage.shape == (0,)


def test_returns_discount_and_count_the_env_reward_once():
    r = np.array([1.0, 0.0, 2.0, 5.0])
    R = discounted_returns(r, np.array([10.0, 0.0, 7.0]), np.array([0, 3, 3, 4]), 0.5)
    np.testing.assert_array_equal(R, [1 + 0.5 * (0 + 0.5 * 12), 0.5 * 12, 12, 12])  # dyadic: exact


def test_segment_ids_skip_empty_episodes():
    np.testing.assert_array_equal(segment_ids(np.array([0, 2, 2, 3])), [0, 0, 2])


@pytest.mark.parametrize("field, value", [("lam", 1.5), ("gamma", -0.1), ("budget_invalidity", math.inf),
                                          ("budget_evidence", math.nan), ("budget_execution", -1.0),
                                          ("eps", -1e-6), ("step_scale", "mean")])
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
    offsets, env_reward, task = np.array([0, 3]), np.array([1.0]), np.array([0])
    with pytest.raises(ValueError, match="context_key must have shape"):
        evaluate_rewards(O, offsets, env_reward, task, np.zeros(2, dtype=np.int64), fire, coverage, config)
    with pytest.raises(ValueError, match="env_reward has a non-finite entry at index 1"):
        evaluate_rewards(O, np.array([0, 1, 3]), np.array([0.0, math.nan]), np.zeros(2, np.int64), None, fire,
                         coverage, config)


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


# --- exact step groups -----------------------------------------------------------------------------------------

_S = ir.CONTEXT_SEED
_MISSING_AS_VALUE = ir.to_signed(ir.MISSING_TAG)  # a known value that hashes as "missing" does


def _colliding_b(a: int, b: int, other_a: int) -> int:
    """The b' for which (other_a, b') hashes like (a, b): FNV on words cancels the first word in the second."""
    return ir.to_signed((b & ir.MASK64) ^ ir.mix(_S, a) ^ ir.mix(_S, other_a))


# Context tuples (prev.a, prev.b, prev.s), None for missing, and count(prev.s) after them; pairs that share a hash
# but are different tuples.
_TUPLES = [
    (1, 2, ("x",)), (5, _colliding_b(1, 2, 5), ("x",)),
    (_MISSING_AS_VALUE, 0, ()), (None, 0, ()),
    (0, _MISSING_AS_VALUE, None), (0, None, None),
    (-1, 2**63 - 1, ("x", "y")), (-(2**63), _colliding_b(-1, 2**63 - 1, -(2**63)), ("x", "y")),
    (7, 7, ("y",)), (7, 7, ("y", "x")), (7, 7, None),
]
_CONTEXT_PROGRAM = KernelProgram(
    (Node("load", (), BOOL, "act.ok"),),
    (Node("load", (), INT, "prev.a"), Node("load", (), INT, "prev.b"), Node("load_set", (), SET, "prev.s"),
     Node("count", (Node("load_set", (), SET, "prev.s"),), INT)),  # computed by the kernel: its words travel too
    (ColumnSpec("act.ok", BOOL), ColumnSpec("prev.a", INT), ColumnSpec("prev.b", INT), ColumnSpec("prev.s", SET)),
)


def test_the_collisions_are_real():
    keys = _context_keys([0, 1, 2, 3, 6, 7])
    assert keys.hash[0] == keys.hash[1] and keys.hash[2] == keys.hash[3] and keys.hash[4] == keys.hash[5]


def _context_columns(choices: list[int], ok: list[int] | None = None) -> dict[str, Column]:
    rows = [_TUPLES[c] for c in choices]
    n = len(rows)
    columns = {name: Column(np.array([0 if r[i] is None else r[i] for r in rows], dtype=np.int64),
                            np.array([r[i] is not None for r in rows], dtype=np.uint8))
               for i, name in ((0, "prev.a"), (1, "prev.b"))}
    flat = [sorted(entity_id(x) for x in (r[2] or ())) for r in rows]
    offsets = np.concatenate([[0], np.cumsum([len(f) for f in flat])]).astype(np.int64)
    columns["prev.s"] = Column(np.array([x for f in flat for x in f], dtype=np.int64),
                               np.array([r[2] is not None for r in rows], np.uint8), offsets)
    columns["act.ok"] = Column(np.array(ok or [1] * n, dtype=np.uint8), np.ones(n, np.uint8))
    return columns


def _context_keys(choices: list[int], ok: list[int] | None = None) -> ContextKeys:
    _, keys = interp.run(_CONTEXT_PROGRAM, _context_columns(choices, ok), len(choices))
    assert keys is not None
    return keys


def _python_tuple(choice: int) -> tuple:
    a, b, s = _TUPLES[choice]
    return a, b, None if s is None else frozenset(s), None if s is None else len(set(s))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=6).flatmap(lambda lengths: st.tuples(
    st.just(lengths),
    st.lists(st.integers(0, len(_TUPLES) - 1), min_size=sum(lengths), max_size=sum(lengths)),
    st.lists(st.integers(0, 2), min_size=len(lengths), max_size=len(lengths)),
    st.lists(st.integers(0, 1), min_size=sum(lengths), max_size=sum(lengths)))))
def test_steps_share_a_step_group_only_when_their_context_tuples_are_equal(drawn):
    lengths, choices, tasks, ok = drawn
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    keys = _context_keys(choices, ok)
    task_group = np.array(tasks, dtype=np.int64)
    step_task = task_group[segment_ids(offsets)]
    exact = exact_context_keys(keys, offsets, task_groups(task_group.view(np.uint64), offsets, 1), threads=1)
    tuples = [_python_tuple(c) for c in choices]
    for i in range(len(choices)):
        for j in range(len(choices)):
            if step_task[i] == step_task[j]:
                assert (exact[i] == exact[j]) == (tuples[i] == tuples[j]), (i, j, tuples[i], tuples[j])
    # And the advantages group so: A_S against the transcription grouping by (task, tuple).
    config = RewardConfig(lam=0.5, gamma=0.9)
    fire, coverage = operator_weights(["evidence"], config)
    O = np.array(ok, dtype=np.uint8).reshape(-1, 1)
    env_reward = np.linspace(0.0, 1.0, len(lengths))
    got = evaluate_rewards(O, offsets, env_reward, task_group, keys, fire, coverage, config)
    want = reference(O.tolist(), offsets.tolist(), env_reward, tasks, tuples, ["evidence"], config)
    bounds = reference_bounds(offsets.tolist(), env_reward, tasks, tuples, ["evidence"], config, want)
    assert (np.abs(got.A_S - np.asarray(want["A_S"], dtype=np.float64)) <= bounds["A_S"]).all()


@pytest.mark.parametrize("backend", ["numba", "c"])
def test_compiled_kernels_give_the_same_exact_step_groups(backend):
    choices = list(range(len(_TUPLES))) * 2
    offsets = np.array([0, len(_TUPLES), 2 * len(_TUPLES)], dtype=np.int64)
    expected = _context_keys(choices)
    _, keys = compile_kernel(_CONTEXT_PROGRAM, backend, None).run(_context_columns(choices), len(choices))
    assert keys is not None
    task = np.zeros(2, dtype=np.uint64)
    np.testing.assert_array_equal(keys.hash, expected.hash)
    groups = task_groups(task, offsets, 1)
    exact = exact_context_keys(keys, offsets, groups, 1)
    np.testing.assert_array_equal(exact, exact_context_keys(expected, offsets, groups, 1))
    assert len(set(exact.tolist())) == len({_python_tuple(c) for c in choices})


# --- finite outputs for finite inputs ---------------------------------------------------------------------------


def test_huge_outcomes_standardize_exactly_as_their_scaled_down_copies():
    """A task group beyond 2^480 is standardized on its values times 2^-600 (exact): with eps 0 the result is bit
    for bit that of the same values scaled down by any power of two, and never NaN."""
    values = np.array([1.0, -1.0, 0.5, 3.0, 0.0, 1.0])
    task = np.array([0, 0, 0, 0, 1, 1])
    small = _one_step_episodes(values, task, 0.0)
    for power in (0, 500, 1000, 1020):
        huge = _one_step_episodes(values * 2.0**power, task, 0.0)
        np.testing.assert_array_equal(huge.A_E, small.A_E, err_msg=str(power))
    issue = _one_step_episodes([1e308, -1e308, 1e308, 0.0], [0, 0, 0, 0], 1e-6)
    assert np.isfinite(issue.A_E).all() and issue.A_E[0] == issue.A_E[2] > 0 > issue.A_E[1]
    # eps 1e-6 against a std ~1e308 is nothing: what differs is rounding, relative to each value (tests/numerics.py)
    np.testing.assert_allclose(issue.A_E, _one_step_episodes([1.0, -1.0, 1.0, 0.0], [0, 0, 0, 0], 0.0).A_E,
                               rtol=standardized_tolerance([1.0, -1.0, 1.0, 0.0], 0.0), atol=0)


def test_huge_returns_give_finite_step_advantages():
    config = RewardConfig(eps=0.0)
    fire, coverage = operator_weights([], config)
    offsets = np.array([0, 2, 4])
    context = np.zeros(4, dtype=np.int64)
    small = evaluate_rewards(np.zeros((4, 0), np.uint8), offsets, np.array([1.0, -3.0]), np.zeros(2, np.int64),
                             context, fire, coverage, config)
    huge = evaluate_rewards(np.zeros((4, 0), np.uint8), offsets, np.array([2.0**1000, -3 * 2.0**1000]),
                            np.zeros(2, np.int64), context, fire, coverage, config)
    for name in ("A_E", "A_S", "A"):
        assert np.isfinite(getattr(huge, name)).all()
        np.testing.assert_array_equal(getattr(huge, name), getattr(small, name), err_msg=name)


def test_a_return_that_could_overflow_is_refused_by_episode():
    config = RewardConfig()
    fire, coverage = operator_weights(["evidence"], config)
    O = np.ones((3, 1), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"episode 1: env_reward 1\.7976931348623157e\+308 and 2 steps"):
        evaluate_rewards(O, np.array([0, 1, 3]), np.array([1.0, 1.7976931348623157e308]), np.zeros(2, np.int64),
                         None, fire, coverage, config)
    with pytest.raises(ValueError, match="budgets must add up to a finite number"):
        RewardConfig(budget_evidence=1e308, budget_execution=1e308)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1.7e308, 1.7e308), min_size=1, max_size=8), st.integers(0, 3))
def test_any_finite_outcomes_give_finite_outputs(env_reward, n_tasks):
    n = len(env_reward)
    config = RewardConfig()
    fire, coverage = operator_weights(["evidence", "invalidity"], config)
    offsets = np.arange(n + 1, dtype=np.int64)
    task = np.arange(n, dtype=np.int64) % (n_tasks + 1)
    got = evaluate_rewards(np.ones((n, 2), np.uint8), offsets, np.array(env_reward), task, np.zeros(n, np.int64),
                           fire, coverage, config)
    for name in StepRewards.__dataclass_fields__:
        assert np.isfinite(getattr(got, name)).all(), name
