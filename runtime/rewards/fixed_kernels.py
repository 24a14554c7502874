"""Which implementation of the fixed kernels (rewards, advantages, exact step groups) runs: the one compiled with the
package, in C; else Numba's.

The kernels are the same code for every rubric. Their definition is in Numba (`reward_kernels`, `advantage_kernels`,
`context_group_kernels`, compiled into Numba's on-disk cache: `numba_cache`); runtime/_fixed.c and
runtime/_fixed_groups.c are the same loops in C, the same operations in the same order, built without -ffast-math or
FMA contraction so that every float rounds alike, and held to the Numba kernels bit for bit
(tests/runtime/test_fixed.py). setup.py builds them as the optional extension `tracec.runtime._fixed`, so a process
that has it compiles nothing and never imports Numba; `fixed_kernels()` gives its functions, or the Numba kernels
where it was not built (no C compiler at install). Whoever runs a fixed kernel asks this module; the kernel modules
never import it. `python -m tracec.runtime.rewards.warm` compiles the Numba ones ahead.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import NamedTuple

EXTENSION = "tracec.runtime._fixed"


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
    # Lazy: the kernel modules import Numba, which a process with the C extension never loads.
    from tracec.runtime.rewards import advantage_kernels, context_group_kernels, reward_kernels

    return FixedKernels(reward_kernels.chunk_table, reward_kernels.trca_kernel, reward_kernels.returns_kernel,
                        reward_kernels.first_overflowing_return, advantage_kernels.group_by_key,
                        advantage_kernels.trca_advantage_kernel, context_group_kernels.exact_keys, native=False)
