"""The fixed kernels compiled with the package (tracec.runtime._fixed, runtime/_fixed*.c) against their Numba
definitions, bit for bit, on random batches that reach every rule (groups of one, flat groups, values near the float
range and the 2^480 scaling threshold, colliding context hashes, empty batches and episodes, wide rubrics); and a
fresh process that scores a rubric with empty caches compiles no fixed kernel and never imports Numba."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tracec.compiler.context import Component, ContextKeys
from tracec.dsl.defaults import STEP_SCALES
from tracec.runtime.rewards import advantage_kernels
from tracec.runtime.rewards.context_groups import exact_context_keys
from tracec.runtime.rewards.fixed_kernels import EXTENSION, fixed_kernels
from tracec.runtime.rewards.task_groups import task_groups
from tracec.runtime.rewards.trca import (
    RewardConfig,
    StepRewards,
    discounted_returns,
    evaluate_rewards,
    operator_weights,
    trca_rewards,
)

_fixed = pytest.importorskip(EXTENSION, reason="tracec.runtime._fixed is not built: reinstall with a C compiler")

REPO = Path(__file__).resolve().parents[2]
CATEGORIES = ("evidence", "execution", "invalidity")
KEYS = (-(2**63), -1, 0, 1, 7, 2**40 + 3, 2**63 - 1)
# Outcomes and budgets that reach the rules: equal values (flat groups), the scaling threshold 2^480 and either side
# of it, the float range's end (returns that could overflow are refused, by both), subnormals.
EDGES = (0.0, -0.0, 1.0, -1.0, 0.5, 1e300, -1e300, 1.7e308, -1.7e308, 2.0**480, 2.0**481, -(2.0**481), 5e-324, 1e-300)


@contextmanager
def numba_fallback() -> Iterator[None]:
    """The fixed kernels as a process gets them where the extension was not built: its import fails."""
    saved = sys.modules.get(EXTENSION)
    sys.modules[EXTENSION] = None  # type: ignore[assignment]
    fixed_kernels.cache_clear()
    try:
        assert not fixed_kernels().native
        yield
    finally:
        if saved is None:
            del sys.modules[EXTENSION]
        else:
            sys.modules[EXTENSION] = saved
        fixed_kernels.cache_clear()


def _bits(value: object) -> object:
    """Arrays as their bytes (so -0.0 differs from 0.0), an error as its type and message, other values as they are."""
    if isinstance(value, np.ndarray):
        return value.dtype.str, value.shape, value.tobytes()
    if isinstance(value, (tuple, list)):
        return [_bits(v) for v in value]
    if isinstance(value, StepRewards):
        return [_bits(getattr(value, name)) for name in StepRewards.__dataclass_fields__]
    return value


def _outcome(function, *args, **kwargs) -> object:
    try:
        return _bits(function(*args, **kwargs))
    except ValueError as error:
        return type(error).__name__, str(error)


def _same_in_c_and_numba(function, *args, **kwargs) -> None:
    native = _outcome(function, *args, **kwargs)
    with numba_fallback():
        fallback = _outcome(function, *args, **kwargs)
    assert native == fallback


def _exact_keys(context: ContextKeys, offsets: np.ndarray, task_keys: np.ndarray) -> np.ndarray:
    """The exact step groups over the task groups, both made by the kernels in use (as an evaluation makes them)."""
    return exact_context_keys(context, offsets, task_groups(task_keys, offsets, 1), 1)


def test_the_extension_is_what_a_process_gets_and_shares_the_numba_constants() -> None:
    assert fixed_kernels().native
    for name in ("ZERO_VARIANCE", "HUGE", "SHRINK", "GOLDEN", "SORT_RUN"):
        assert getattr(_fixed, name) == getattr(advantage_kernels, name), name


@st.composite
def configs(draw: st.DrawFn) -> RewardConfig:
    budget = st.sampled_from([0.0, 1.0, 0.5, 3.0, 1e150, 1e300]) | st.floats(0.05, 3.0)
    return RewardConfig(budget_evidence=draw(budget), budget_execution=draw(budget),
                        budget_invalidity=draw(budget | st.floats(-3.0, -0.05)),
                        lam=draw(st.sampled_from([0.0, 1.0, 0.8]) | st.floats(0.0, 1.0)),
                        gamma=draw(st.sampled_from([0.0, 1.0, 0.95]) | st.floats(0.0, 1.0)),
                        eps=draw(st.sampled_from([1e-6, 0.0, 0.1])), step_scale=draw(st.sampled_from(STEP_SCALES)))


def _component(draw: st.DrawFn, rng: np.random.Generator, n: int) -> Component:
    """One element of a context tuple, over few values (so that steps share them) and sometimes missing."""
    known = (rng.random(n) < draw(st.sampled_from([1.0, 0.7]))).astype(np.uint8)
    if draw(st.booleans()):
        return Component("word", rng.integers(-2, 3, n).astype(np.int64), known)
    lengths = rng.integers(0, 3, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = np.concatenate([np.sort(rng.choice(4, size=k, replace=False)) for k in lengths] + [np.zeros(0)])
    return Component("set", values.astype(np.int64), known, offsets)


@st.composite
def batches(draw: st.DrawFn) -> tuple:
    categories = draw(st.lists(st.sampled_from(CATEGORIES), max_size=9)
                      | st.lists(st.sampled_from(CATEGORIES), min_size=60, max_size=140))
    lengths = draw(st.lists(st.integers(0, 7), max_size=14))
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    n_steps, n_episodes = int(offsets[-1]), len(lengths)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    O = (rng.random((n_steps, len(categories))) < draw(st.sampled_from([0.0, 0.3, 1.0]))).astype(np.uint8)
    outcome = st.sampled_from(EDGES) | st.floats(-2.0, 2.0)
    env_reward = np.array(draw(st.lists(outcome, min_size=n_episodes, max_size=n_episodes)), dtype=np.float64)
    task_group = np.array(draw(st.lists(st.sampled_from(KEYS[:draw(st.integers(1, 4))]), min_size=n_episodes,
                                        max_size=n_episodes)), dtype=np.int64)
    kind = draw(st.sampled_from(["none", "keys", "tuples"]))
    context: np.ndarray | ContextKeys | None = None
    if kind == "keys":
        context = rng.choice(np.array(KEYS, dtype=np.int64), n_steps)
    elif kind == "tuples":  # hashes drawn apart from the tuples: many collide, and equal tuples may hash apart
        hashes = rng.choice(np.array(KEYS[:3], dtype=np.int64), n_steps)
        context = ContextKeys(hashes, tuple(_component(draw, rng, n_steps) for _ in range(draw(st.integers(0, 5)))))
    return O, offsets, env_reward, task_group, context, categories


EMPTY = (np.zeros((0, 2), np.uint8), np.array([0], np.int64), np.zeros(0), np.zeros(0, np.int64), None,
         ["evidence", "invalidity"])
SINGLETONS = (np.ones((3, 1), np.uint8), np.array([0, 1, 1, 3], np.int64), np.array([1e300, 2.0**481, 0.0]),
              np.array([0, 1, 2], np.int64), np.array([5, 5, 5], np.int64), ["execution"])


@settings(max_examples=300, deadline=None)
@given(batches(), configs())
@example(EMPTY, RewardConfig())
@example(SINGLETONS, RewardConfig(budget_execution=1e300))
def test_the_extension_equals_the_numba_kernels_bit_for_bit(batch, config) -> None:
    O, offsets, env_reward, task_group, context, categories = batch
    fire, coverage = operator_weights(categories, config)
    _same_in_c_and_numba(evaluate_rewards, O, offsets, env_reward, task_group, context, fire, coverage, config,
                         threads=1)
    _same_in_c_and_numba(trca_rewards, O, offsets, fire, coverage, config.lam)
    _same_in_c_and_numba(discounted_returns, np.linspace(-1e300, 1e300, O.shape[0]), env_reward / 2, offsets,
                         config.gamma)
    if isinstance(context, ContextKeys):
        _same_in_c_and_numba(_exact_keys, context, offsets, task_group.view(np.uint64))


def test_big_batches_shared_among_threads_are_equal_too() -> None:
    """A batch cut into parts for two threads, interleaved task groups, a context: the parts' kernels agree."""
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 30, 9000)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_steps = int(offsets[-1])
    categories = ["evidence"] * 4 + ["execution"] * 5 + ["invalidity"] * 3
    O = (rng.random((n_steps, len(categories))) < 0.2).astype(np.uint8)
    env_reward = rng.choice(np.array([0.0, 1.0, 1e300]), lengths.size)
    context = ContextKeys(rng.integers(0, 8, n_steps), (Component("word", rng.integers(0, 9, n_steps),
                                                                  np.ones(n_steps, np.uint8)),))
    config = RewardConfig()
    fire, coverage = operator_weights(categories, config)
    _same_in_c_and_numba(evaluate_rewards, O, offsets, env_reward, np.arange(lengths.size) % 700, context, fire,
                         coverage, config, threads=2)


def test_a_bad_array_is_refused_not_misread() -> None:
    with pytest.raises(TypeError, match="float64"):
        _fixed.returns_kernel(np.zeros(3, np.float32), np.zeros(1), np.array([0, 3]), 0.9, np.zeros(3))
    with pytest.raises(ValueError, match="contiguous"):  # numpy's own refusal
        _fixed.returns_kernel(np.zeros(6)[::2], np.zeros(1), np.array([0, 3]), 0.9, np.zeros(3))
    with pytest.raises(ValueError, match="read-only"):
        _fixed.returns_kernel(np.zeros(3), np.zeros(1), np.array([0, 3]), 0.9, np.frombuffer(bytes(24)))


HOUSEHOLD = [
    {"episode": name, "task": "mug", "instruction": "put a mug in the cabinet", "env_reward": reward,
     "states": [{"location": "hall", "holding": [], "visible": ["hall"], "opened": [], "feedback": ""},
                {"location": "cabinet", "holding": [], "visible": ["cabinet", "mug"], "opened": [], "feedback": ""},
                {"location": "cabinet", "holding": ["mug"], "visible": ["cabinet"], "opened": [], "feedback": ""}],
     "actions": [{"verb": "go", "obj": "cabinet", "parsed": True},
                 {"verb": verb, "obj": "mug", "recep": "cabinet", "parsed": True}]}
    for name, verb, reward in (("a", "take", 1.0), ("b", "look", 0.0), ("c", "take", 0.5))
]

# What the `tracec` script does, then the modules it ended up with, as the last line of stderr.
ENTRY = ("import json, sys; from tracec.cli import main; code = main(sys.argv[1:]); "
         "print(json.dumps(sorted(sys.modules)), file=sys.stderr); sys.exit(code)")


def test_a_fresh_process_with_empty_caches_compiles_no_fixed_kernel(tmp_path: Path) -> None:
    caches = {name: tmp_path / name for name in ("NUMBA_CACHE_DIR", "TRACEC_CACHE_DIR", "XDG_CACHE_HOME")}
    for folder in caches.values():
        folder.mkdir()
    trajectories = tmp_path / "household.jsonl"
    trajectories.write_text("".join(json.dumps(episode) + "\n" for episode in HOUSEHOLD))
    env = {**os.environ, **{name: str(folder) for name, folder in caches.items()}}
    done = subprocess.run([sys.executable, "-c", ENTRY, "score", str(REPO / "examples" / "household.rubric"),
                           "--trajectories", str(trajectories), "--backend", "c"], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 6  # one record a step
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert EXTENSION in loaded and "numba" not in loaded
    assert not list(caches["NUMBA_CACHE_DIR"].rglob("*"))  # nothing compiled into Numba's cache either
    assert list(caches["TRACEC_CACHE_DIR"].rglob("kernel_*.so"))  # the rubric's own kernel was built
