"""TRCA rewards + returns + advantages: plain Python, vectorised numpy, tracec and a memory floor, side by side.

Batches as the spec's training loop makes them: 15 operators (5 per category), episodes of 20..40 steps, task groups
of 8 episodes, a context key with 20 distinct values. The Python side gets lists (what a loop-per-step
implementation would hold); the conversion is not timed. tracec is `evaluate_rewards`, its rows named for the
kernels it ran (`fixed_backend`: the C extension, or Numba where it was not built); each tracec side and the floor
(bench/floors.py) run 1 thread and all (os.cpu_count()); plain Python and numpy run one and are compared with the
1-thread rows. Measured by bench/sides.py: interleaved rounds,
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
from tracec.runtime.rewards.fixed_kernels import fixed_kernels
from tracec.runtime.rewards.task_groups import MIN_STEPS_PER_PART
from tracec.runtime.rewards.trca import RewardConfig, evaluate_rewards, operator_weights

from bench.floors import read_write_floor
from bench.results import markdown_table, record
from bench.sides import ROUNDS, Rounds, describe, from_env, interleaved, load_average, threads_text

SIZES = from_env("REWARDS_SIZES", (10**4, 10**5, 10**6))
RUN_ROUNDS = int(os.environ.get("REWARDS_ROUNDS", str(ROUNDS)))
THREADS = os.cpu_count() or 1  # the all-threads rows
THREAD_COUNTS = tuple(sorted({1, THREADS}))
TARGET_SIZE, TARGET = 10**6, 100  # plain Python / tracec (1 thread each, a new output block) at 10^6
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


def numpy_rewards(O, offsets, env_reward, task_group, context_key, fire_weight, coverage_weight, config):
    """The same seven outputs in vectorised numpy, as a user who knows numpy would write them: matrix products for
    r_F and r_B (first coverage from running counts within each episode), the returns' reverse scan as one
    vectorised step per position from the episodes' ends (at most the longest episode's length of them), and each
    standardisation by group ids from `np.unique` (a step's group: its task group's id and its context's, as one
    int64) and sums from `np.bincount`."""
    lam, gamma, eps = config.lam, config.gamma, config.eps
    n_steps, lengths = O.shape[0], np.diff(offsets)
    episode = np.repeat(np.arange(lengths.size), lengths)
    counts = np.cumsum(O, axis=0, dtype=np.int32)
    before = np.vstack([np.zeros((1, O.shape[1]), np.int32), counts])[offsets[:-1]][episode]  # counts at its start
    newly = (O == 1) & (counts - before == 1)
    r_f, r_b = O @ fire_weight, newly @ coverage_weight
    r_trca = (1 - lam) * r_f + lam * r_b
    returns = np.empty(n_steps)
    ends = offsets[1:] - 1
    steps, alive = ends[lengths > 0], lengths[lengths > 0]
    returns[steps] = r_trca[steps] + env_reward[lengths > 0]
    for back in range(1, int(alive.max(initial=0))):
        alive, steps = alive[alive > back], steps[alive > back]
        returns[steps - back] = r_trca[steps - back] + gamma * returns[steps - back + 1]
    group = np.unique(task_group, return_inverse=True)[1]
    a_e = _numpy_standardize(env_reward, group, eps)
    context = np.unique(context_key, return_inverse=True)[1]
    pair = group[episode].astype(np.int64) * (int(context.max(initial=0)) + 1) + context  # (group, context) as one id
    a_s = _numpy_standardize(returns, np.unique(pair, return_inverse=True)[1], eps)
    return r_f, r_b, r_trca, returns, a_e, a_s, a_e[episode] + a_s


def _numpy_standardize(values, ids, eps):
    sizes = np.bincount(ids)
    mean = np.bincount(ids, values) / sizes
    std = np.sqrt(np.bincount(ids, (values - mean[ids]) ** 2) / sizes)
    scaled = (values - mean[ids]) / (std[ids] + eps)
    return np.where((sizes[ids] >= 2) & (std[ids] > 1e-9), scaled, 0.0)


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


def fixed_backend() -> str:
    """What `evaluate_rewards` runs its per-step kernels on in this process, as the tables name it: the C extension
    `make` builds (`tracec.runtime._fixed`), or Numba where it was not built (`runtime/rewards/fixed_kernels.py`)."""
    return "C extension" if fixed_kernels().native else "Numba"


# {variant: what it is, in the tables after the backend's name}; a tracec side is "<variant>/<threads>".
VARIANTS = {"new": "a new output block", "reused": "output block reused", "tuples": "context tuples checked"}
TARGET_FLOOR, TARGET_THREADS = 1.5, 1.8  # at 10^6: tracec (a new block) / the floor, 1 thread; 1 thread / all


def _report(found: dict[int, Rounds], backend: str) -> str:
    measured = [size for size in SIZES if size in found]
    sides = [("python", "plain Python", 1), ("numpy", "vectorised numpy", 1),
             *((f"{variant}/{t}", f"tracec ({backend}), {name}", t) for variant, name in VARIANTS.items()
               for t in THREAD_COUNTS),
             *((f"floor/{t}", "memory floor: inputs read once, outputs written", t) for t in THREAD_COUNTS)]
    times = markdown_table(["side", "threads", *(f"{size:.0e} ms" for size in measured)],
                           [[name, str(t), *(found[size].time(side).scaled(1e3).cell() for size in measured)]
                            for side, name, t in sides])
    # (name, numerator, denominator, target at 10^6, whether the target is a ceiling)
    comparisons: list[tuple[str, str, str, float | None, bool]] = [
        ("plain Python / tracec (a new block), 1 thread each", "python", "new/1", TARGET, False),
        ("vectorised numpy / tracec (a new block), 1 thread each", "numpy", "new/1", None, False),
        ("plain Python / vectorised numpy, 1 thread each", "python", "numpy", None, False),
        *((f"tracec (a new block) / the memory floor, {threads_text(t)} each", f"new/{t}", f"floor/{t}",
           TARGET_FLOOR if t == 1 else None, True) for t in THREAD_COUNTS),
        *((f"tracec ({name}) / the memory floor, 1 thread each", f"{variant}/1", "floor/1", None, True)
          for variant, name in VARIANTS.items() if variant != "new")]
    if THREADS > 1:
        comparisons += [(f"tracec ({name}): 1 thread / {threads_text(THREADS)} (speed-up)", f"{variant}/1",
                         f"{variant}/{THREADS}", TARGET_THREADS if variant == "new" else None, False)
                        for variant, name in VARIANTS.items()]

    def cell(numerator: str, denominator: str, size: int, target: float | None, ceiling: bool) -> str:
        ratio = found[size].ratio(numerator, denominator)
        missed = target is not None and size == TARGET_SIZE and (ratio.median > target if ceiling
                                                                  else ratio.median < target)
        return ratio.cell(suffix="x") + (" missed" if missed else "")

    ratios = markdown_table(["ratio", *(f"{size:.0e}" for size in measured), f"target at {TARGET_SIZE:.0e}"],
                            [[name, *(cell(top, bottom, size, target, ceiling) for size in measured),
                              "" if target is None else f"{'<=' if ceiling else '>='} {target:g}x"]
                             for name, top, bottom, target, ceiling in comparisons])
    rounds, split = min(len(found[size]) for size in measured), 2 * MIN_STEPS_PER_PART
    note = (describe(rounds, "in-process", f"plain Python and numpy 1; each tracec side and the floor 1 and "
                                          f"{THREADS} (os.cpu_count()), as the threads column says")
            + f" r_F, r_B, r_TRCA, returns, A_E, A_S and A for one batch, warmed (each side checked against plain "
            "Python first). tracec is `evaluate_rewards`, whose per-step kernels run on "
            f"the {backend} in this process (`fixed_kernels()`: the C extension `make` builds, else Numba). Each "
            "round runs plain Python once and every other side 5 times (a round's figure: the median of those "
            "runs). Its threads are `evaluate_rewards(threads=...)`: episodes and task groups shared among the "
            f"calling thread and helpers (`compiler/threads.py`), a batch split only from {split} steps of work, so "
            "below that the all-threads rows run one thread. 'a new output block' writes new memory each call, as "
            "Python and numpy build new arrays; 'output block reused' fills one block again, as `RubricScorer` does "
            "between batches once the last results are dropped (fresh memory costs a page fault and zeroing per "
            "page). 'context tuples checked' is given what a compiled rubric's kernel returns (`ContextKeys`: "
            "hashes and the tuples they came from, here one int64 field), so it also checks every step's tuple "
            "against its step group's (`runtime/rewards/context_groups.py`), which plain int64 keys skip. The "
            "vectorised numpy side is `numpy_rewards` (this file). The memory floor (bench/floors.py) reads every "
            "input once and writes the seven outputs into fresh memory: no implementation does less (the machine's "
            f"read bandwidth is in the header). Targets at {TARGET_SIZE:.0e}: plain Python / tracec >= "
            f"{TARGET}x and tracec within {TARGET_FLOOR:g}x of the floor, 1 thread each; {THREADS} threads >= "
            f"{TARGET_THREADS:g}x one; 'missed' marks a median on the wrong side of its target. Load average (1 min) "
            f"at the end: {load_average()}.")
    return f"{times}\n\n{ratios}\n\n{note}"


@pytest.fixture(scope="module")
def timings() -> Iterator[dict[int, Rounds]]:
    found: dict[int, Rounds] = {}
    yield found
    if found:
        record("rewards", _report(found, fixed_backend()), COMMAND)


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

    def tracec_side(variant: str, threads: int) -> Callable[[], object]:
        keys = tuples if variant == "tuples" else context_key
        out = block if variant == "reused" else None
        return lambda: evaluate_rewards(O, offsets, env_reward, task_group, keys, fire, coverage, config,
                                        threads=threads, out=out)

    def floor_side(threads: int) -> Callable[[], object]:
        return lambda: read_write_floor([O, offsets, env_reward, task_group, context_key], size, outputs, threads)

    outputs = [((7,), np.float64)]  # the seven outputs of a step
    sides: dict[str, tuple[Callable[[], object], int]] = {
        "python": (lambda: python_rewards(*python_args), 1),
        "numpy": (lambda: numpy_rewards(O, offsets, env_reward, task_group, context_key, fire, coverage, config), 5)}
    sides.update({f"{variant}/{t}": (tracec_side(variant, t), 5) for variant in VARIANTS for t in THREAD_COUNTS})
    sides.update({f"floor/{t}": (floor_side(t), 5) for t in THREAD_COUNTS})
    # Every side but the floor computes the same A before anything is timed, which also warms it (the rounds need no
    # warming run, which would cost plain Python another 1.5 s at 10^6); the floor is run once too.
    expected = python_rewards(*python_args)[-1]
    numpy_a = numpy_rewards(O, offsets, env_reward, task_group, context_key, fire, coverage, config)[-1]
    np.testing.assert_allclose(numpy_a, expected, atol=1e-9)
    for name, (run, _) in sides.items():
        if name.split("/")[0] in VARIANTS:
            np.testing.assert_allclose(run().A, expected, atol=1e-9)  # type: ignore[attr-defined]
        elif name.startswith("floor"):
            run()
    benchmark.group = f"rewards {size:.0e} steps"
    timings[size] = interleaved(benchmark, sides, RUN_ROUNDS, warm=False)
