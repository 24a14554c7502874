"""How the fixed kernels (rewards, advantages, exact step groups) are compiled: with the package, in C; else by Numba,
once, into its on-disk cache.

The kernels are the same code for every rubric. Their definition is in Numba (`reward_kernels`, `advantage_kernels`,
`context_group_kernels`); runtime/_fixed.c and runtime/_fixed_groups.c are the same loops in C, the same operations
in the same order, built without -ffast-math or FMA contraction so that every float rounds alike, and held to the
Numba kernels bit for bit (tests/runtime/test_fixed.py). setup.py builds them as the optional extension
`tracec.runtime._fixed`, so a process that has it compiles nothing and never imports Numba; `fixed_kernels()` gives
its functions, or the Numba kernels where it was not built (no C compiler at install).

Those are `fixed_kernel` = `numba.njit(cache=True)`: Numba keeps the machine code in `$NUMBA_CACHE_DIR` when that is
set, else beside the source (`__pycache__`), else (a read-only install) in the user's cache folder, and a later
process loads it in milliseconds (it recompiles by itself when the source, Numba or the CPU changes).
`python -m tracec.runtime.jit` compiles them for the argument types the package passes them (6-7 s), where they
are the ones in use. If no cache folder can be written at all, Numba refuses `cache=True` when the module is
imported; then the kernels are compiled in memory instead, each process paying the compile, and a warning says
that `NUMBA_CACHE_DIR` moves the cache to a writable folder.
"""

from __future__ import annotations

import functools
import importlib
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import numpy as np
from tracec.compiler.context import Component, ContextKeys

F = TypeVar("F", bound=Callable[..., Any])

EXTENSION = "tracec.runtime._fixed"
UNCACHED_WARNING = ("tracec: no folder for Numba's kernel cache can be written here, so the reward kernels are "
                    "compiled in every process (several seconds); set NUMBA_CACHE_DIR to a writable folder")


class FixedKernels(NamedTuple):
    """The entry points of one implementation of the fixed kernels, named and called as in the Numba modules."""

    chunk_table: Callable[..., None]
    trca_kernel: Callable[..., None]
    returns_kernel: Callable[..., None]
    first_overflowing_return: Callable[..., int]
    group_by_key: Callable[..., int]
    trca_advantage_kernel: Callable[..., None]
    exact_keys: Callable[..., None]
    native: bool  # the C extension, not Numba


@functools.cache
def fixed_kernels() -> FixedKernels:
    """The C extension's kernels, else (where it was not built) the Numba ones."""
    try:
        module = importlib.import_module(EXTENSION)
    except ImportError:
        return numba_kernels()
    return FixedKernels._make([*(getattr(module, name) for name in FixedKernels._fields[:-1]), True])


def numba_kernels() -> FixedKernels:
    """The Numba definitions (imported, and compiled or loaded from Numba's cache, on first use)."""
    # Lazy: the kernel modules import Numba (which a process with the C extension never loads) and this module.
    from tracec.runtime import advantage_kernels, context_group_kernels, reward_kernels

    return FixedKernels(reward_kernels.chunk_table, reward_kernels.trca_kernel, reward_kernels.returns_kernel,
                        reward_kernels.first_overflowing_return, advantage_kernels.group_by_key,
                        advantage_kernels.trca_advantage_kernel, context_group_kernels.exact_keys, native=False)


def fixed_kernel(**options: Any) -> Callable[[F], F]:
    """`numba.njit(cache=True, **options)`, or without the cache (and a warning) where none can be written."""
    from numba import njit  # only the Numba kernel modules call this, when they are imported

    def decorate(function: F) -> F:
        try:
            return njit(cache=True, **options)(function)  # type: ignore[no-any-return]
        except RuntimeError as error:  # "cannot cache function ...: no locator available for file ..."
            if "cannot cache" not in str(error):
                raise
            warnings.warn(UNCACHED_WARNING, RuntimeWarning, stacklevel=2)
            return njit(**options)(function)  # type: ignore[no-any-return]

    return decorate


def warm() -> float:
    """Compile (or load) every fixed kernel in use for the types the package calls it with; returns the seconds."""
    # Lazy: a cycle (rewards imports this module for `fixed_kernels`).
    from tracec.runtime.rewards import RewardConfig, discounted_returns, evaluate_rewards, trca_rewards

    started = time.perf_counter()
    offsets = np.array([0, 2, 3], dtype=np.int64)
    env_reward, groups = np.array([1.0, 0.0]), np.array([0, 0], dtype=np.int64)
    hashes = np.array([5, 5, 7], dtype=np.int64)
    word = Component(kind="word", values=np.array([1, 1, 2], dtype=np.int64), known=np.ones(3, dtype=np.uint8))
    a_set = Component(kind="set", values=np.array([3, 4], dtype=np.int64), known=np.ones(3, dtype=np.uint8),
                      offsets=np.array([0, 1, 1, 2], dtype=np.int64))
    # Exact step groups compile once per (scalar, set) tuple arity, rounded up to a power of two (context_groups).
    contexts = [hashes, None] + [ContextKeys(hash=hashes, components=(word,) * words + (a_set,) * sets)
                                 for words in (1, 2, 4) for sets in (0, 2)]
    config = RewardConfig()
    for n_ops in (3, 70):  # up to 64 operators in one pass, more in several
        O = (np.arange(3 * n_ops).reshape(3, n_ops) % 3 == 0).astype(np.uint8)
        weights = np.linspace(-1.0, 1.0, n_ops)
        for context in contexts:
            evaluate_rewards(O, offsets, env_reward, groups, context, weights, np.abs(weights), config, threads=1)
        r_trca = trca_rewards(O, offsets, weights, np.abs(weights), config.lam)[2]
    discounted_returns(r_trca, env_reward, offsets, config.gamma)
    return time.perf_counter() - started


if __name__ == "__main__":
    if fixed_kernels().native:
        print("tracec: the reward kernels were compiled with the package (tracec.runtime._fixed): nothing to do",
              file=sys.stderr)
    else:
        print(f"tracec: reward kernels compiled into Numba's cache in {warm():.1f} s", file=sys.stderr)
