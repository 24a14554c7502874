"""TRCA rewards + returns + advantages: a plain Python transcription against the Numba path, side by side.

Batches as the spec's training loop makes them: 15 operators (5 per category), episodes of 20..40 steps, task groups
of 8 episodes, a context key with 20 distinct values. The Python side gets lists (what a loop-per-step
implementation would hold); the conversion is not timed. Writes the table to bench/RESULTS.md, section "rewards".
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from tracec.compiler.context import Component, ContextKeys
from tracec.compiler.threads import default_threads
from tracec.runtime.rewards import RewardConfig, evaluate_rewards, operator_weights

from bench.results import markdown_table, record
from bench.sides import best_times

SIZES = (10**4, 10**5, 10**6)
CATEGORIES = ["evidence"] * 5 + ["execution"] * 5 + ["invalidity"] * 5
COMMAND = "pytest bench/test_rewards_bench.py --benchmark-only -p no:xdist"


def make_batch(n_steps: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    ends = np.cumsum(rng.integers(20, 41, size=n_steps // 20 + 1))
    offsets = np.concatenate([[0], ends[ends < n_steps], [n_steps]]).astype(np.int64)
    n_episodes = offsets.size - 1
    O = (rng.random((n_steps, len(CATEGORIES))) < 0.1).astype(np.uint8)
    env_reward = rng.integers(0, 2, n_episodes).astype(np.float64)
    task_group = rng.integers(-(2**63), 2**63 - 1, n_episodes // 8 + 1, dtype=np.int64)[np.arange(n_episodes) // 8]
    context_key = rng.integers(-(2**63), 2**63 - 1, 20, dtype=np.int64)[rng.integers(0, 20, n_steps)]
    return O, offsets, env_reward, task_group, context_key


def python_rewards(O, offsets, env_reward, task_group, context_key, fire_weight, coverage_weight, config):
    """The same computation, one step and one operator at a time, in plain Python."""
    lam, gamma, eps = config.lam, config.gamma, config.eps
    n_steps, n_ops = len(O), len(fire_weight)
    r_f, r_b, r_trca, returns = [0.0] * n_steps, [0.0] * n_steps, [0.0] * n_steps, [0.0] * n_steps
    step_group = [None] * n_steps
    for e in range(len(offsets) - 1):
        start, stop = offsets[e], offsets[e + 1]
        covered = [False] * n_ops
        for t in range(start, stop):
            row, fired, newly = O[t], 0.0, 0.0
            for j in range(n_ops):
                if row[j]:
                    fired += fire_weight[j]
                    if not covered[j]:
                        covered[j] = True
                        newly += coverage_weight[j]
            r_f[t], r_b[t], r_trca[t] = fired, newly, (1 - lam) * fired + lam * newly
            step_group[t] = (task_group[e], context_key[t])
        acc = env_reward[e]
        for t in range(stop - 1, start - 1, -1):
            acc = r_trca[t] + (acc if t == stop - 1 else gamma * acc)
            returns[t] = acc
    a_e = _python_standardize(env_reward, task_group, eps)
    a_s = _python_standardize(returns, step_group, eps)
    a = [a_e[e] + a_s[t] for e in range(len(offsets) - 1) for t in range(offsets[e], offsets[e + 1])]
    return r_f, r_b, r_trca, returns, a_e, a_s, a


def _python_standardize(values, keys, eps):
    groups = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key].append(i)
    out = [0.0] * len(values)
    for members in groups.values():
        if len(members) < 2:
            continue
        xs = [values[i] for i in members]
        mean = sum(xs) / len(xs)
        std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
        if std > 1e-9:
            for i in members:
                out[i] = (values[i] - mean) / (std + eps)
    return out


SIDES = {"numba": "numba", "numba-1thread": "numba, 1 thread", "numba-reused": "numba, output block reused",
         "numba-tuples": "numba, context tuples checked"}


@pytest.fixture(scope="module")
def timings():
    found: dict[tuple[int, str], float] = {}
    yield found
    rows = []
    for size in SIZES:
        if all((size, side) in found for side in ("python", *SIDES)):
            python_s = found[(size, "python")]
            rows.append([f"{size:.0e}", f"{python_s:.3f}", *(f"{found[(size, side)] * 1e3:.2f}" for side in SIDES),
                         *(f"{python_s / found[(size, side)]:.0f}x" for side in SIDES)])
    if rows:
        headers = ["steps", "python s", *(f"{name} ms" for name in SIDES.values()),
                   *(f"ratio, {name}" for name in SIDES.values())]
        record("rewards", markdown_table(headers, rows)
               + f"\n\nr_F, r_B, r_TRCA, returns, A_E, A_S and A for one batch, jit warmed. Sides interleaved: each "
               "round runs python once and each Numba side 5 times (3 rounds, 2 at 1e6); best time of each side. "
               f"Numba runs {default_threads()} threads (its default: one per core), episodes and task groups shared "
               "among them; the plain Python transcription runs one. 'numba' writes a new output block each call, "
               "as Python builds new lists; 'output block reused' fills one block again, as `RubricScorer` does "
               "between batches once the last results are dropped (fresh memory costs the kernel a page fault and "
               "zeroing per page). 'context tuples checked' is given what a compiled rubric's kernel returns "
               "(`ContextKeys`: hashes and the tuples they came from, here one int64 field), so it also checks "
               "every step's tuple against its step group's (`runtime/context_groups.py`), which plain int64 keys "
               "skip. Target: >= 100x at 1e6.", COMMAND)


@pytest.mark.parametrize("size", SIZES)
def test_rewards(benchmark, timings, size):
    config = RewardConfig()
    fire, coverage = operator_weights(CATEGORIES, config)
    batch = make_batch(size)
    lists = [array.tolist() for array in batch]
    python_args = (*lists, fire.tolist(), coverage.tolist(), config)
    # Both sides compute the same thing (which also warms the kernels).
    np.testing.assert_allclose(python_rewards(*python_args)[-1], evaluate_rewards(*batch, fire, coverage, config).A,
                               atol=1e-9)
    benchmark.group = f"rewards {size:.0e} steps"
    block = np.empty((7, size))
    O, offsets, env_reward, task_group, context_key = batch
    # What a compiled rubric's kernel hands over: the hashes and the tuple (here one int64 field) they came from.
    tuples = ContextKeys(context_key, (Component("word", context_key, np.ones(size, np.uint8)),))
    np.testing.assert_array_equal(evaluate_rewards(O, offsets, env_reward, task_group, tuples, fire, coverage, config).A,
                                  evaluate_rewards(*batch, fire, coverage, config).A)
    found = best_times(benchmark, {
        "python": (lambda: python_rewards(*python_args), 1),
        "numba": (lambda: evaluate_rewards(*batch, fire, coverage, config), 5),
        "numba-1thread": (lambda: evaluate_rewards(*batch, fire, coverage, config, threads=1), 5),
        "numba-reused": (lambda: evaluate_rewards(*batch, fire, coverage, config, out=block), 5),
        "numba-tuples": (lambda: evaluate_rewards(O, offsets, env_reward, task_group, tuples, fire, coverage,
                                                  config), 5),
    }, rounds=2 if size >= 10**6 else 3)
    timings.update({(size, impl): seconds for impl, seconds in found.items()})
