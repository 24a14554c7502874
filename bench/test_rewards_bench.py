"""TRCA rewards + returns + advantages: a plain Python transcription against the Numba path, side by side.

Batches as the spec's training loop makes them: 15 operators (5 per category), episodes of 20..40 steps, task groups
of 8 episodes, a context key with 20 distinct values. The Python side gets lists (what a loop-per-step
implementation would hold); the conversion is not timed. Each Numba side runs 1 thread and all (os.cpu_count());
plain Python runs one and is compared with the 1-thread rows. Measured by bench/sides.py: interleaved rounds,
medians, paired ratios. Writes the tables to bench/RESULTS.md, section "rewards".

Environment overrides, for a quick trial (the figures in RESULTS.md come from the defaults): REWARDS_SIZES
(comma-separated steps, e.g. `10000`; default 1e4,1e5,1e6) and REWARDS_ROUNDS (default bench.sides.ROUNDS = 5).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from tracec.compiler.context import Component, ContextKeys
from tracec.runtime.rewards.task_groups import MIN_STEPS_PER_PART
from tracec.runtime.rewards.trca import RewardConfig, evaluate_rewards, operator_weights

from bench.results import markdown_table, record
from bench.sides import ROUNDS, Rounds, describe, from_env, interleaved, load_average, threads_text

SIZES = from_env("REWARDS_SIZES", (10**4, 10**5, 10**6))
RUN_ROUNDS = int(os.environ.get("REWARDS_ROUNDS", str(ROUNDS)))
THREADS = os.cpu_count() or 1  # the all-threads rows
THREAD_COUNTS = tuple(sorted({1, THREADS}))
TARGET_SIZE, TARGET = 10**6, 100  # plain Python / Numba (1 thread each, a new output block) at 10^6
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


# {variant: name in the tables}; a Numba side is "<variant>/<threads>".
VARIANTS = {"numba": "Numba, a new output block", "reused": "Numba, output block reused",
            "tuples": "Numba, context tuples checked"}


def _report(found: dict[int, Rounds]) -> str:
    measured = [size for size in SIZES if size in found]
    sides = [("python", "plain Python", 1),
             *((f"{variant}/{t}", name, t) for variant, name in VARIANTS.items() for t in THREAD_COUNTS)]
    times = markdown_table(["side", "threads", *(f"{size:.0e} ms" for size in measured)],
                           [[name, str(t), *(found[size].time(side).scaled(1e3).cell() for size in measured)]
                            for side, name, t in sides])
    comparisons = [(f"plain Python / {name}, 1 thread each", "python", f"{variant}/1")
                   for variant, name in VARIANTS.items()]
    if THREADS > 1:
        comparisons += [(f"{name}: 1 thread / {threads_text(THREADS)} (speed-up)", f"{variant}/1",
                         f"{variant}/{THREADS}") for variant, name in VARIANTS.items()]
    comparisons += [(f"a new block / reused, {threads_text(t)} each", f"numba/{t}", f"reused/{t}")
                    for t in THREAD_COUNTS]

    def cell(numerator: str, denominator: str, size: int) -> str:
        ratio = found[size].ratio(numerator, denominator)
        headline = (numerator, denominator) == ("python", "numba/1") and size == TARGET_SIZE
        return ratio.cell(suffix="x") + (" missed" if headline and ratio.median < TARGET else "")

    ratios = markdown_table(["ratio (> 1x: the second side is faster)", *(f"{size:.0e}" for size in measured),
                             f"target at {TARGET_SIZE:.0e}"],
                            [[name, *(cell(top, bottom, size) for size in measured),
                              f">= {TARGET}x" if (top, bottom) == ("python", "numba/1") else ""]
                             for name, top, bottom in comparisons])
    rounds, split = min(len(found[size]) for size in measured), 2 * MIN_STEPS_PER_PART
    note = (describe(rounds, "in-process", f"plain Python 1; each Numba side 1 and {THREADS} (os.cpu_count()), as "
                                          "the threads column says")
            + " r_F, r_B, r_TRCA, returns, A_E, A_S and A for one batch, jit warmed (each side checked against plain "
            "Python first). Each round runs plain Python once and each Numba side 5 times (a round's figure: the "
            "median of those runs). Numba's threads are `evaluate_rewards(threads=...)`: episodes and task groups "
            f"shared among the calling thread and helpers (`compiler/threads.py`), a batch split only from {split} "
            "steps of work, so below that the all-threads rows run one thread. 'a new output "
            "block' writes new memory each call, as Python builds new lists; 'output block reused' fills one block "
            "again, as `RubricScorer` does between batches once the last results are dropped (fresh memory costs the "
            "kernel a page fault and zeroing per page). 'context tuples checked' is given what a compiled rubric's "
            "kernel returns (`ContextKeys`: hashes and the tuples they came from, here one int64 field), so it also "
            "checks every step's tuple against its step group's (`runtime/rewards/context_groups.py`), which plain "
            f"int64 keys skip. Target: plain Python / Numba (a new block), 1 thread each, >= {TARGET}x at "
            f"{TARGET_SIZE:.0e}; 'missed' marks a median short of it. Load average (1 min) at the end: "
            f"{load_average()}.")
    return f"{times}\n\n{ratios}\n\n{note}"


@pytest.fixture(scope="module")
def timings() -> Iterator[dict[int, Rounds]]:
    found: dict[int, Rounds] = {}
    yield found
    if found:
        record("rewards", _report(found), COMMAND)


@pytest.mark.parametrize("size", SIZES)
def test_rewards(benchmark, timings, size):
    config = RewardConfig()
    fire, coverage = operator_weights(CATEGORIES, config)
    batch = make_batch(size)
    lists = [array.tolist() for array in batch]
    python_args = (*lists, fire.tolist(), coverage.tolist(), config)
    block = np.empty((7, size))
    O, offsets, env_reward, task_group, context_key = batch
    # What a compiled rubric's kernel hands over: the hashes and the tuple (here one int64 field) they came from.
    tuples = ContextKeys(context_key, (Component("word", context_key, np.ones(size, np.uint8)),))

    def numba_side(variant: str, threads: int) -> Callable[[], object]:
        keys = tuples if variant == "tuples" else context_key
        out = block if variant == "reused" else None
        return lambda: evaluate_rewards(O, offsets, env_reward, task_group, keys, fire, coverage, config,
                                        threads=threads, out=out)

    sides: dict[str, tuple[Callable[[], object], int]] = {"python": (lambda: python_rewards(*python_args), 1)}
    sides.update({f"{variant}/{t}": (numba_side(variant, t), 5) for variant in VARIANTS for t in THREAD_COUNTS})
    # Every side computes the same A before anything is timed, which also warms it (the rounds need no warming
    # run, which would cost plain Python another 1.5 s at 10^6).
    expected = python_rewards(*python_args)[-1]
    for name, (run, _) in sides.items():
        if name != "python":
            np.testing.assert_allclose(run().A, expected, atol=1e-9)  # type: ignore[attr-defined]
    benchmark.group = f"rewards {size:.0e} steps"
    timings[size] = interleaved(benchmark, sides, RUN_ROUNDS, warm=False)
