"""Raw values (one per row, None where missing) to the typed numeric columns the kernels read.

Encodings by type: bool -> uint8 0/1, int -> int64, float -> float64 (ints accepted), enum -> int64 member index,
entity -> int64 `entity_id`, set(entity) -> CSR (ids sorted ascending and unique within each row, `offsets`
(n + 1,)); every column has a `known` mask. A list is checked with one `set(map(type, ...))` and turned into one
array; only when that fast path fails does a per-value scan find the first offending value, raised as `BadValue`
for the fact builder to name (`tracec.runtime.facts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
from tracec.compiler.ir import entity_id
from tracec.dsl.types import Type

INT64_RANGE = (-(1 << 63), 1 << 63)


@dataclass(frozen=True)
class Column:
    values: np.ndarray  # scalars (n,); sets (n_elements,) int64, sorted and unique within each row
    known: np.ndarray  # (n,) uint8
    offsets: np.ndarray | None = None  # sets only: (n + 1,) int64


class BadValue(Exception):
    """The first value of a raw list that does not fit its type: its index and what was expected."""

    def __init__(self, index: int, expected: str):
        super().__init__(index, expected)
        self.index, self.expected = index, expected


# List comprehensions and one np.array per column: measured faster than np.fromiter over a map.


def known_mask(raw: list[Any]) -> np.ndarray:
    return np.array([value is not None for value in raw], dtype=np.uint8)


def _expected(value: Any, type_: Type) -> str | None:
    """What `value` (not None) should have been for `type_`, or None if it fits: the per-value definition that the
    fast path in `encode` must agree with."""
    kind = type_.kind
    if kind == "bool":
        return None if type(value) is bool else "true or false"
    if kind == "int":
        if type(value) is not int:
            return "an integer"
        return None if INT64_RANGE[0] <= value < INT64_RANGE[1] else "a 64-bit integer"
    if kind == "float":
        if type(value) is int:
            try:
                float(value)
            except OverflowError:
                return "a number"
        if type(value) is float and not math.isfinite(value):
            return "a finite number"  # NaN and infinities are no values of the language
        return None if type(value) in (int, float) else "a number"
    if kind == "enum":
        return None if type(value) is str and value in type_.members else f"a member of {type_}"
    if kind == "set":
        return None if type(value) is list and all(type(e) is str for e in value) else "a list of strings"
    return None if type(value) is str else "a string"


_ALLOWED: dict[str, set[type]] = {
    "bool": {bool},
    "int": {int},
    "float": {int, float},
    "enum": {str},
    "entity": {str},
    "text": {str},
    "set": {list},
}


def encode(raw: list[Any], type_: Type, interned: dict[str, int]) -> Column:
    """Encode a raw list (None = missing); raises BadValue at the first value that does not fit."""
    kind = type_.kind
    try:
        if not set(map(type, raw)) <= _ALLOWED[kind] | {type(None)}:
            raise ValueError
        known = known_mask(raw)
        if kind == "set":
            return _encode_set(raw, known, interned)
        if kind == "text":
            return Column(np.zeros(0, dtype=np.uint8), known)  # checked only: text is read by lifts
        if kind in ("int", "float"):
            filled = raw if known.all() else [0 if v is None else v for v in raw]
            values = np.array(filled, dtype=np.int64 if kind == "int" else np.float64)
            if kind == "float" and not np.isfinite(values).all():
                raise ValueError  # the per-value check below names the first NaN or infinity
            return Column(values, known)
        if kind == "bool":
            table: dict[Any, int] = {True: 1, False: 0}
        elif kind == "enum":
            table = {member: index for index, member in enumerate(type_.members)}
        else:
            table = _intern(set(raw), interned)
        table[None] = 0
        return Column(np.array([table[v] for v in raw], dtype=np.uint8 if kind == "bool" else np.int64), known)
    except (ValueError, KeyError, OverflowError, TypeError):
        pass
    for index, value in enumerate(raw):
        expected = None if value is None else _expected(value, type_)
        if expected is not None:
            raise BadValue(index, expected)
    raise AssertionError(f"the fast path rejected a {type_} column that the per-value check accepts")


def _intern(strings: set[Any], interned: dict[str, int]) -> dict[Any, int]:
    """entity_id of each string (None skipped), computed once per distinct string of the batch."""
    for text in strings:
        if text is not None and text not in interned:
            interned[text] = entity_id(text)
    return {text: interned[text] for text in strings if text is not None}


def _encode_set(raw: list[Any], known: np.ndarray, interned: dict[str, int]) -> Column:
    rows = [() if v is None else v for v in raw]
    flat = list(chain.from_iterable(rows))
    if not set(map(type, flat)) <= {str}:
        raise ValueError
    ids = _intern(set(flat), interned)
    # Sort and de-duplicate every row at once: key = row * K + rank of the id among the K distinct ids. The keys
    # are sorted across rows already, so a stable (run-detecting) sort only has the short rows to order.
    by_id = sorted(ids, key=ids.__getitem__)
    rank = {name: position for position, name in enumerate(by_id)}
    width = max(len(by_id), 1)
    lengths = np.array([len(row) for row in rows], dtype=np.int64)
    keys = np.repeat(np.arange(len(rows), dtype=np.int64) * width, lengths)
    keys += np.array([rank[name] for name in flat], dtype=np.int64)
    keys = np.sort(keys, kind="stable")
    unique = np.ones(len(keys), dtype=bool)
    unique[1:] = keys[1:] != keys[:-1]
    keys = keys[unique]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // width, minlength=len(rows)), out=offsets[1:])
    sorted_ids = np.array([ids[name] for name in by_id], dtype=np.int64)
    return Column(sorted_ids[keys % width], known, offsets)


def take(column: Column, rows: np.ndarray) -> Column:
    """The given rows of a column, in order (a gather over CSR for sets)."""
    if column.offsets is None:
        return Column(column.values[rows], column.known[rows])
    starts = column.offsets[rows]
    lengths = column.offsets[rows + 1] - starts
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    elements = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return Column(column.values[elements], column.known[rows], offsets)
