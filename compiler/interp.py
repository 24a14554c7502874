"""The reference interpreter: the living definition of the kernel ops, one transition at a time.

Slow on purpose and obviously right: every backend is tested against it. It walks the lowered IR
(`tracec.compiler.ir`) with the semantics of `tracec.compiler.values` (Kleene logic, 64-bit integers whose overflow
is unknown, finite floats, exact comparisons); the context key is hashed as `tracec.compiler.ir` defines it, and
`tracec.compiler.context` keeps the tuple beside it so that step groups can be exact.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
from tracec.compiler import values as V
from tracec.compiler.context import ContextKeys, context_keys, context_layout
from tracec.compiler.ir import CONTEXT_SEED, MISSING_TAG, ColumnSpec, KernelProgram, Node, mix, to_signed

Value = tuple[Any, bool]  # (value, known); the value means nothing when known is False


class ColumnData(Protocol):
    """A fact column as the kernels see it (see `tracec.runtime.facts.columns.Column`); read-only, so a frozen
    dataclass fits it."""

    @property
    def values(self) -> np.ndarray: ...  # scalars: (n,); sets: (n_elements,) int64, sorted, unique per transition

    @property
    def known(self) -> np.ndarray: ...  # (n,) uint8

    @property
    def offsets(self) -> np.ndarray | None: ...  # sets only: (n + 1,) int64


def evaluate(node: Node, columns: Mapping[str, ColumnData], t: int) -> Value:
    """The (value, known) of `node` on transition `t`."""
    op, args = node.op, node.args
    if op == "const":
        return node.value, True
    if op == "load":
        column = columns[node.value]
        value = column.values[t].item()
        return (value != 0 if node.type.kind == "bool" else value), bool(column.known[t])
    if op == "load_set":
        column = columns[node.value]
        assert column.offsets is not None
        start, stop = column.offsets[t], column.offsets[t + 1]
        return tuple(column.values[start:stop].tolist()), bool(column.known[t])
    if op in ("not", "and", "or"):
        truths = [_truth(evaluate(arg, columns, t)) for arg in args]
        if op == "not":
            result = V.kleene_not(truths[0])
        else:
            result = (V.kleene_and if op == "and" else V.kleene_or)(truths[0], truths[1])
        return (False, False) if result is None else (result, True)
    values = [evaluate(arg, columns, t) for arg in args]
    if not all(known for _, known in values):
        return 0, False
    return _strict(op, [value for value, _ in values], [arg.type.kind for arg in args])


def _truth(value: Value) -> V.Truth:
    return bool(value[0]) if value[1] else None


def _strict(op: str, operands: list[Any], kinds: list[str]) -> Value:
    """Ops whose result is unknown whenever an operand is; all operands are known here."""
    if op == "count":
        return len(operands[0]), True
    if op == "has":
        return operands[0] in operands[1], True
    if op in V.COMPARISONS:
        return V.COMPARISONS[op](*operands), True
    # Numbers: a float column's values are Python floats here, an int column's Python ints.
    numbers = [float(x) if kind == "float" else x for x, kind in zip(operands, kinds)]
    result = V.ARITHMETIC[op](*numbers)
    return (0, False) if result is None else (result, True)


def context_word(value: Any, kind: str) -> int:
    """The 64-bit word a known context value contributes (`tracec.compiler.ir`): a float by its bits (-0.0 as 0.0),
    anything else (bools as 0/1, enum indices, entity ids, ints) as itself."""
    if kind == "float":
        return int(struct.unpack("<q", struct.pack("<d", float(value) + 0.0))[0])
    return int(value)


def context_hash(nodes: tuple[Node, ...], columns: Mapping[str, ColumnData], t: int) -> int:
    """The context hash of transition `t`, as defined in `tracec.compiler.ir`."""
    state = CONTEXT_SEED
    for node in nodes:
        value, known = evaluate(node, columns, t)
        if not known:
            state = mix(state, MISSING_TAG)
        elif node.type.kind == "set":
            state = mix(state, len(value))
            for element in value:
                state = mix(state, element)
        else:
            state = mix(state, context_word(value, node.type.kind))
    return to_signed(state)


def check_floats(specs: tuple[ColumnSpec, ...], columns: Mapping[str, ColumnData], n: int) -> None:
    """Every known value of a float column is finite (the fact builder rejects NaN and infinities with their
    location; this guards callers that build columns themselves). Raises ValueError naming the column and row."""
    for spec in specs:
        if spec.type.kind != "float" or spec.name not in columns:
            continue
        values = np.asarray(columns[spec.name].values, dtype=np.float64)[:n]
        if np.isfinite(values).all():
            continue
        bad = np.flatnonzero(~np.isfinite(values) & (np.asarray(columns[spec.name].known)[:n] != 0))
        if bad.size:
            raise ValueError(f"column `{spec.name}` holds {values[bad[0]]} at row {int(bad[0])}; "
                             "a known float must be finite")


def run(program: KernelProgram, columns: Mapping[str, ColumnData], n: int) -> tuple[np.ndarray, ContextKeys | None]:
    """O (n, n_operators) uint8 and the context keys (None without context)."""
    check_floats(program.columns, columns, n)
    fired = np.zeros((n, len(program.operators)), dtype=np.uint8)
    for t in range(n):
        for j, node in enumerate(program.operators):
            value, known = evaluate(node, columns, t)
            fired[t, j] = bool(known and value)
    if not program.context:
        return fired, None
    hashes = np.array([context_hash(program.context, columns, t) for t in range(n)], dtype=np.int64)
    computed = [node for node in program.context if node.op not in ("load", "load_set")]
    words = np.zeros((len(computed), n), dtype=np.int64)
    flags = np.zeros((len(computed), n), dtype=np.uint8)
    for c, node in enumerate(computed):
        for t in range(n):
            value, known = evaluate(node, columns, t)
            flags[c, t], words[c, t] = known, context_word(value, node.type.kind) if known else 0
    return fired, context_keys(context_layout(program), columns, hashes, words, flags)
