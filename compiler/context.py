"""Context keys: the context tuple of every transition, hashed for speed and kept whole so that grouping is exact.

Every backend hashes a transition's context tuple into 64 bits (the hash is defined in `tracec.compiler.ir`). A hash
can map two different tuples to one key (a value equal to the hash's missing tag, or two fields whose words cancel),
so `ContextKeys` also holds the tuple itself, as arrays: the fact columns that plain context fields are (views, not
copies) and the words a kernel wrote for computed context expressions. Grouping
(`tracec.runtime.rewards.context_groups.exact_context_keys`) takes the hash to find candidates and the tuple to
decide, so two steps share a step group only when their tuples are equal: a missing value only with a missing one, a
set as a set, -0.0 as 0.0.

As an array (`np.asarray(keys)`, `keys[i]`), ContextKeys is its hash. Left out: any ordering of tuples (groups need
none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from tracec.compiler.ir import KernelProgram

ComponentKind = Literal["word", "bool", "float", "set"]


@dataclass(frozen=True, eq=False)
class Component:
    """One element of the context tuple over all transitions: values and known flags, offsets for a set.

    `word` values are int64 (ints, enum indices, entity ids, and the words of computed expressions), `bool` values
    0 / nonzero, `float` values finite where known; a `set` is a CSR slice of sorted, unique int64 ids."""

    kind: ComponentKind
    values: np.ndarray
    known: np.ndarray  # (n,) uint8
    offsets: np.ndarray | None = None  # sets: (n + 1,) int64


@dataclass(frozen=True, eq=False)
class ContextKeys:
    hash: np.ndarray  # (n,) int64, as `tracec.compiler.ir` defines it
    components: tuple[Component, ...]  # the tuple, in the order of the rubric's `context` line

    def __len__(self) -> int:
        return int(self.hash.shape[0])

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.array(self.hash, dtype=dtype, copy=copy)

    def __getitem__(self, index: Any) -> Any:
        return self.hash[index]

    def scalar_words(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(words, known) of the scalar components, each (n,) int64 / uint8 and contiguous: equal words mean equal
        values where both are known (bools as 0/1, floats by the bits of `x + 0.0`)."""
        words, known = [], []
        for component in self.components:
            if component.kind == "set":
                continue
            values = np.asarray(component.values)
            if component.kind == "bool":
                values = (values != 0).astype(np.int64)
            elif component.kind == "float":
                values = (values.astype(np.float64) + 0.0).view(np.int64)
            words.append(_owned(values, np.int64))
            known.append(_owned(component.known, np.uint8))
        return words, known

    def sets(self) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """(values, offsets, known) of the set components, contiguous."""
        sets = [c for c in self.components if c.kind == "set"]
        return ([_owned(c.values, np.int64) for c in sets], [_owned(c.offsets, np.int64) for c in sets],
                [_owned(c.known, np.uint8) for c in sets])


def _owned(array: Any, dtype: type) -> np.ndarray:
    """Contiguous and writable (Numba types read-only arrays apart, so one tuple could not hold both), copied only
    when it is not already so."""
    out = np.asarray(array)
    if out.dtype == np.bool_ and dtype is np.uint8:
        out = out.view(np.uint8)
    out = np.ascontiguousarray(out, dtype=dtype)
    return out if out.flags.writeable else out.copy()


ContextLayout = tuple[tuple[str | None, ComponentKind], ...]  # per context expression: its column (None: computed)


def computed_context(program: KernelProgram) -> tuple[int, ...]:
    """Positions of the context expressions that are not a plain column: a kernel writes their words."""
    return tuple(i for i, node in enumerate(program.context) if node.op not in ("load", "load_set"))


def context_layout(program: KernelProgram) -> ContextLayout:
    """Where each element of the context tuple comes from: a column, or (None) a word the kernel computes."""
    layout: list[tuple[str | None, ComponentKind]] = []
    for node in program.context:
        kind: ComponentKind = ("set" if node.type.kind == "set" else "bool" if node.type.kind == "bool"
                               else "float" if node.type.kind == "float" else "word")
        computed = node.op not in ("load", "load_set")
        layout.append((None, "word") if computed else (str(node.value), kind))
    return tuple(layout)


def context_keys(layout: ContextLayout, columns: Mapping[str, Any], hashes: np.ndarray, words: np.ndarray,
                 known: np.ndarray) -> ContextKeys:
    """The ContextKeys of a run: `hashes` (n,) from the kernel, and `words` / `known` (n_computed, n), one row per
    computed context expression (`computed_context`), as the kernel wrote them."""
    components: list[Component] = []
    computed = iter(range(words.shape[0]))
    for column_name, kind in layout:
        if column_name is None:
            row = next(computed)
            components.append(Component("word", words[row], known[row]))
        else:
            column = columns[column_name]
            components.append(Component(kind, column.values, column.known, column.offsets if kind == "set" else None))
    return ContextKeys(hashes, tuple(components))
