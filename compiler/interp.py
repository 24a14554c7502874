"""The reference interpreter: the living definition of the kernel ops, one transition at a time.

Slow on purpose and obviously right: every backend is tested against it. It walks the lowered IR
(`tracec.compiler.ir`) with the three-valued semantics spelled out case by case.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
from tracec.compiler.ir import CONTEXT_SEED, MISSING_TAG, KernelProgram, Node, mix, to_signed

Value = tuple[Any, bool]  # (value, known); the value means nothing when known is False


class ColumnData(Protocol):
    """A fact column as the kernels see it (see `tracec.runtime.facts.Column`); read-only, so a frozen dataclass
    fits it."""

    @property
    def values(self) -> np.ndarray: ...  # scalars: (n,); sets: (n_elements,) int64, sorted within each transition

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
        return column.values[t].item(), bool(column.known[t])
    if op == "load_set":
        column = columns[node.value]
        assert column.offsets is not None
        start, stop = column.offsets[t], column.offsets[t + 1]
        return tuple(column.values[start:stop].tolist()), bool(column.known[t])
    if op == "not":
        value, known = evaluate(args[0], columns, t)
        return (not value) if known else False, known
    if op in ("and", "or"):
        (a, ka), (b, kb) = (evaluate(arg, columns, t) for arg in args)
        # The dominant value decides even when the other side is unknown: false for `and`, true for `or`.
        dominant = op == "or"
        if (ka and bool(a) == dominant) or (kb and bool(b) == dominant):
            return dominant, True
        if ka and kb:
            return (not dominant), True
        return False, False
    values = [evaluate(arg, columns, t) for arg in args]
    if not all(known for _, known in values):
        return 0, False
    operands = [value for value, _ in values]
    return _strict(op, operands)


def _strict(op: str, operands: list[Any]) -> Value:
    """Ops whose result is unknown whenever an operand is; all operands are known here."""
    if op == "neg":
        return -operands[0], True
    if op == "abs":
        return abs(operands[0]), True
    a = operands[0]
    if op == "count":
        return len(a), True
    b = operands[1]
    if op == "add":
        return a + b, True
    if op == "sub":
        return a - b, True
    if op == "mul":
        return a * b, True
    if op == "div":
        return (a / b, True) if b != 0 else (0.0, False)
    if op == "min":
        return min(a, b), True
    if op == "max":
        return max(a, b), True
    if op == "has":
        return a in b, True
    comparisons = {
        "eq": lambda: a == b,
        "ne": lambda: a != b,
        "lt": lambda: a < b,
        "le": lambda: a <= b,
        "gt": lambda: a > b,
        "ge": lambda: a >= b,
    }
    return comparisons[op](), True


def context_key(nodes: tuple[Node, ...], columns: Mapping[str, ColumnData], t: int) -> int:
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
        elif node.type.kind == "float":
            state = mix(state, _float_bits(float(value)))
        else:
            state = mix(state, int(value))
    return to_signed(state)


def _float_bits(value: float) -> int:
    if math.isnan(value):
        value = math.nan
    return struct.unpack("<q", struct.pack("<d", value + 0.0))[0]


def run(program: KernelProgram, columns: Mapping[str, ColumnData], n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """O (n, n_operators) uint8 and the context keys (n,) int64 (None without context)."""
    fired = np.zeros((n, len(program.operators)), dtype=np.uint8)
    keys = np.zeros(n, dtype=np.int64) if program.context else None
    for t in range(n):
        for j, node in enumerate(program.operators):
            value, known = evaluate(node, columns, t)
            fired[t, j] = bool(known and value)
        if keys is not None:
            keys[t] = context_key(program.context, columns, t)
    return fired, keys
