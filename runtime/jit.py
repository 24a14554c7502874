"""How the fixed Numba kernels (rewards, advantages) are compiled: once, into Numba's on-disk cache, not per process.

The reward and advantage kernels are the same code for every rubric, so compiling them (6-7 s) belongs to the
install, not to a user's first `tracec eval`. `fixed_kernel` is `numba.njit(cache=True)`: Numba keeps the machine
code in `$NUMBA_CACHE_DIR` when that is set, else beside the source (`__pycache__`), else (a read-only install) in
the user's cache folder, and a later process loads it in milliseconds (it recompiles by itself when the source,
Numba or the CPU changes; a process with another NUMBA_CACHE_DIR than the install's compiles once more). `python -m tracec.runtime.jit` compiles every kernel for the argument types the package passes them, and
`make venv` runs it once the package is installed.

If no cache folder can be written at all, Numba refuses `cache=True` when the module is imported; then the kernels
are compiled in memory instead, each process paying the compile, and a warning says that `NUMBA_CACHE_DIR`
moves the cache to a writable folder. Left out: shipping compiled code in the wheel (it would have to match each
machine's CPU and Numba version).
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from numba import njit

F = TypeVar("F", bound=Callable[..., Any])

UNCACHED_WARNING = ("tracec: no folder for Numba's kernel cache can be written here, so the reward kernels are "
                    "compiled in every process (several seconds); set NUMBA_CACHE_DIR to a writable folder")


def fixed_kernel(**options: Any) -> Callable[[F], F]:
    """`numba.njit(cache=True, **options)`, or without the cache (and a warning) where none can be written."""

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
    """Compile (or load) every fixed kernel for the types the package calls it with; returns the seconds taken."""
    import numpy as np
    from tracec.compiler.context import Component, ContextKeys
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
    for n_ops in (3, 70):  # up to 64 operators in one pass, more in several
        O = (np.arange(3 * n_ops).reshape(3, n_ops) % 3 == 0).astype(np.uint8)
        weights = np.linspace(-1.0, 1.0, n_ops)
        for context in contexts:
            evaluate_rewards(O, offsets, env_reward, groups, context, weights, np.abs(weights), RewardConfig(),
                             threads=1)
        r_trca = trca_rewards(O, offsets, weights, np.abs(weights), 0.8)[2]
    discounted_returns(r_trca, env_reward, offsets, 0.95)
    return time.perf_counter() - started


if __name__ == "__main__":
    print(f"tracec: reward kernels compiled into Numba's cache in {warm():.1f} s", file=sys.stderr)
