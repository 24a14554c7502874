"""How a generated kernel is called, for every backend: the order and dtypes of the column arrays it takes
(`arguments`, `c_parameters`), the arrays themselves checked and converted (`marshal`) and handed over (`pointers`),
and the outputs it fills (`allocate`, `Outputs`). One definition, so that a kernel's signature and its callers
cannot drift apart.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

import numpy as np
from tracec.compiler.context import ContextKeys, ContextLayout, context_keys
from tracec.compiler.interp import ColumnData, check_floats
from tracec.compiler.ir import ColumnSpec


class Argument(NamedTuple):  # not a dataclass: every kernel call builds some forty of these, cheaply
    """One column array a generated kernel takes: `c{column}_{v|k|o}` for values, known flags and set offsets."""

    name: str
    column: int
    role: Literal["values", "known", "offsets"]
    dtype: str  # "int64" | "float64" | "uint8"


def arguments(specs: tuple[ColumnSpec, ...]) -> tuple[Argument, ...]:
    out: list[Argument] = []
    for c, spec in enumerate(specs):
        kind = spec.type.kind
        dtype = "int64" if kind == "set" else "uint8" if kind == "bool" else "float64" if kind == "float" else "int64"
        out.append(Argument(f"c{c}_v", c, "values", dtype))
        out.append(Argument(f"c{c}_k", c, "known", "uint8"))
        if spec.is_set:
            out.append(Argument(f"c{c}_o", c, "offsets", "int64"))
    return tuple(out)


C_TYPES = {"int64": "int64_t", "float64": "double", "uint8": "uint8_t"}


def c_parameters(specs: tuple[ColumnSpec, ...]) -> str:
    """The C parameter list of a kernel over these columns, after its leading integers: arrays, then out, keys and
    the words and known flags of computed context expressions."""
    columns = [f"const {C_TYPES[a.dtype]} *{a.name}" for a in arguments(specs)]
    return ", ".join([*columns, "uint8_t *out", "int64_t *keys", "int64_t *words", "uint8_t *wknown"])


def ctypes_arguments(leading: int, specs: tuple[ColumnSpec, ...]) -> list[type]:
    """The ctypes argument types of a kernel over these columns: its `leading` int64s, then a pointer for each array
    of `c_parameters`."""
    return [ctypes.c_int64] * leading + [ctypes.c_void_p] * (len(arguments(specs)) + 4)


def pointers(arrays: list[np.ndarray]) -> list[int]:
    """The addresses of the arrays' data, in the order of `c_parameters` (the arrays must stay alive)."""
    return [array.ctypes.data for array in arrays]


def marshal(specs: tuple[ColumnSpec, ...], columns: Mapping[str, ColumnData], n: int) -> list[np.ndarray]:
    """The kernel's column arrays, checked against `n` and converted to their dtypes (no copy when they match).

    Set offsets are trusted to be non-decreasing (FactBatch builds them so); their ends are checked because a
    compiled kernel reads without bounds checks.
    """
    check_floats(specs, columns, n)
    arrays: list[np.ndarray] = []
    for arg in arguments(specs):
        spec = specs[arg.column]
        if spec.name not in columns:
            raise ValueError(f"the kernel reads column `{spec.name}`, which the fact batch lacks")
        raw = getattr(columns[spec.name], arg.role)
        if raw is None:
            raise ValueError(f"column `{spec.name}` is a set column and needs offsets")
        array = _contiguous(raw, _NP_TYPES[arg.dtype])
        expected = n + 1 if arg.role == "offsets" else None if spec.is_set and arg.role == "values" else n
        if array.ndim != 1 or (expected is not None and array.shape[0] != expected):
            raise ValueError(f"column `{spec.name}`: {arg.role} has shape {array.shape}, expected ({expected},)")
        if arg.role == "offsets" and n > 0 and (array[0] < 0 or array[-1] > arrays[-2].shape[0]):
            raise ValueError(f"column `{spec.name}`: offsets run outside its {arrays[-2].shape[0]} values")
        arrays.append(array)
    return arrays


_NP_TYPES = {name: np.dtype(name) for name in C_TYPES}


def _contiguous(raw: Any, dtype: np.dtype) -> np.ndarray:
    if type(raw) is np.ndarray and raw.dtype == dtype and raw.flags.c_contiguous:
        return raw  # the common case, kept cheap: a kernel call marshals some forty arrays
    array = np.asarray(raw)
    return np.ascontiguousarray(array.view(np.uint8) if array.dtype == np.bool_ else array, dtype=dtype)


class Outputs(NamedTuple):
    """What a kernel writes, each in full: O, the context hashes (empty without context) and, per computed context
    expression (`Schedule.computed`), its words and known flags, transition-major."""

    fired: np.ndarray  # (n, n_operators) uint8
    keys: np.ndarray  # (n,) int64, or (0,)
    words: np.ndarray  # (n, n_computed) int64
    known: np.ndarray  # (n, n_computed) uint8

    def arrays(self) -> list[np.ndarray]:
        return [self.fired, self.keys, self.words, self.known]

    def results(self, layout: ContextLayout,
                columns: Mapping[str, ColumnData]) -> tuple[np.ndarray, ContextKeys | None]:
        """What `Kernel.run` returns: O, and the ContextKeys (None when the program has no context)."""
        if not layout:
            return self.fired, None
        return self.fired, context_keys(layout, columns, self.keys, self.words.T, self.known.T)


def allocate(n: int, n_operators: int, has_context: bool, n_computed: int = 0) -> Outputs:
    return Outputs(np.empty((n, n_operators), dtype=np.uint8), np.empty(n if has_context else 0, dtype=np.int64),
                   np.empty((n, n_computed), dtype=np.int64), np.empty((n, n_computed), dtype=np.uint8))
