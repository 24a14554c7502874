"""One entry point to every backend: `compile_kernel(program, backend, cache) -> Kernel`.

Each backend gives the same object: `kernel.run(columns, n) -> (O uint8 (n, n_operators), ContextKeys | None)` (the
context hashes and tuples, `tracec.compiler.context`), equal bit for bit across backends
(tests/compiler/test_backends.py). `interp` wraps the reference interpreter;
`numba` and `c` compile one fused kernel through the KernelCache. Without a cache they compile into a temporary
directory that is gone when `compile_kernel` returns (the loaded code stays usable). `auto` is the C kernel where a C
compiler builds it (a new rubric's first build takes ~0.15 s against Numba's ~0.6 s, and it runs as fast), else the
Numba one; the command line's default.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
from tracec.compiler import c_backend, interp
from tracec.compiler.cache import KernelCache
from tracec.compiler.context import ContextKeys
from tracec.compiler.interp import ColumnData
from tracec.compiler.ir import KernelProgram

Backend = Literal["auto", "interp", "numba", "c"]
BACKENDS: tuple[Backend, ...] = ("auto", "interp", "numba", "c")


class Kernel(Protocol):
    @property
    def backend(self) -> str: ...

    @property
    def from_cache(self) -> bool: ...  # loaded from the KernelCache (or an artifact) rather than compiled

    def run(self, columns: Mapping[str, ColumnData], n: int) -> tuple[np.ndarray, ContextKeys | None]: ...


@dataclass(frozen=True)
class InterpKernel:
    program: KernelProgram
    backend: str = "interp"
    from_cache: bool = False

    def run(self, columns: Mapping[str, ColumnData], n: int) -> tuple[np.ndarray, ContextKeys | None]:
        return interp.run(self.program, columns, n)


def compile_kernel(program: KernelProgram, backend: Backend, cache: KernelCache | None) -> Kernel:
    if backend == "interp":
        return InterpKernel(program)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend `{backend}`; backends: {', '.join(BACKENDS)}")
    if cache is None:
        with tempfile.TemporaryDirectory(prefix="tracec-kernel-") as scratch:
            return compile_kernel(program, backend, KernelCache(Path(scratch)))
    if backend in ("auto", "c"):
        try:
            return c_backend.compile_c(program, cache)
        except c_backend.BuildError:
            if backend == "c":
                raise
    # Lazy: Numba costs a quarter second to import, paid only where a kernel is compiled with it.
    from tracec.compiler import numba_backend

    return numba_backend.compile_numba(program, cache)
