"""How a Numba fixed kernel is compiled: `numba.njit(cache=True)`, so that Numba keeps the machine code in
`$NUMBA_CACHE_DIR` when that is set, else beside the source (`__pycache__`), else (a read-only install) in the user's
cache folder, and a later process loads it in milliseconds (it recompiles by itself when the source, Numba or the
CPU changes). If no cache folder can be written at all, Numba refuses `cache=True` when the kernel module is
imported; then the kernels are compiled in memory instead, each process paying the compile, and a warning says that
`NUMBA_CACHE_DIR` moves the cache to a writable folder.

Only the Numba kernel modules (`reward_kernels`, `advantage_kernels`, `context_group_kernels`) import this; which
implementation runs is `fixed_kernels`'s choice.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

UNCACHED_WARNING = ("tracec: no folder for Numba's kernel cache can be written here, so the reward kernels are "
                    "compiled in every process (several seconds); set NUMBA_CACHE_DIR to a writable folder")


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
