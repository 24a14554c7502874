"""Raw values (one per row, None where missing) to the typed numeric columns the kernels read.

Encodings by type: bool -> uint8 0/1, int -> int64, float -> float64 (ints accepted), enum -> int64 member index,
entity -> int64 `entity_id`, set(entity) -> CSR (ids sorted ascending and unique within each row, `offsets`
(n + 1,)); every column has a `known` mask (uint8) and holds 0 where a value is missing. Text makes no kernel column:
its column holds codes into the field's table of distinct strings (`Interned`), for the lifts to test each once.

`valid(value, type_)` is the definition of a value that fits its type. `encode` has a fast path per type that works on
whole lists with C-level passes (`map`, `dict.fromkeys`, `np.fromiter`) and checks types on the distinct values
only; whenever it declines a list, for whatever reason, `encode_reference` takes over: value by value, the first
value that `valid` rejects is raised as `BadValue`, and a list with none is encoded one value at a time. So the fast
path can only be slower, never disagree (a property test holds them equal). Strings must be valid Unicode: a lone
surrogate (JSON allows `"\\ud800"`) cannot be hashed, matched or written to Parquet, so it is rejected here.

Entities are interned per batch (`Entities`): each distinct string is hashed once, and sets are sorted by the rank
of their ids, so no string is compared or hashed twice. Lists may come a chunk at a time: the tables carry over.
`set_column` (codes and row lengths -> CSR) is shared with the Arrow reader (`trajectories.table`).

The native path (`native_pieces`, the C extension `tracec.runtime._gather`, built at install where a C compiler
is found) reads every field of many rows in one pass over their dicts and checks each value as `valid` does; it
declines a field (or, for a row that is not a dict, every field) at the first value it is not sure of, and
`encode_piece` then decides that field as if the native path did not exist, so errors and their locations never
change. It leaves to Python what Python defines: new strings are numbered by `Interned.add` (once per distinct
string, in order of first appearance), ints beyond 2**53 in a float column are converted by numpy, and str
subclasses are judged by `valid`. `set_column` and `take` of sets run in C too (one pass a row instead of numpy's
several passes over all elements), bit for bit the numpy result; `native=False` keeps numpy, which is what runs
where the extension is not built.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import is_not
from typing import Any

import numpy as np
from tracec.compiler.ir import entity_id
from tracec.dsl.types import Type

try:
    from tracec.runtime import _gather
except ImportError:  # built without a C compiler: the Python paths below do all the work
    _gather = None  # type: ignore[assignment]

INT64_RANGE = (-(1 << 63), 1 << 63)
MISSING_CODE = -1  # the entity code of a missing value


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


class _Declined(Exception):
    """The fast path does not take this list; the reference path decides."""


def is_unicode(text: str) -> bool:
    """Whether a str is valid Unicode, i.e. encodes to UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def valid(value: Any, type_: Type) -> str | None:
    """None if `value` (not None) fits `type_`, else what it should have been: the definition both paths follow."""
    kind = type_.kind
    if kind == "bool":
        return None if type(value) is bool else "true or false"
    if kind == "int":
        if type(value) is not int:
            return "an integer"
        return None if INT64_RANGE[0] <= value < INT64_RANGE[1] else "a 64-bit integer"
    if kind == "float":
        if type(value) not in (int, float):
            return "a number"
        try:
            return None if math.isfinite(value) else "a finite number"
        except OverflowError:  # an int beyond the float range
            return "a finite number"
    if kind == "enum":
        return None if isinstance(value, str) and value in type_.members else f"a member of {type_}"
    if kind == "set":
        if type(value) is not list or not all(isinstance(e, str) for e in value):
            return "a list of strings"
        return None if all(map(is_unicode, value)) else "a list of valid Unicode strings (no lone surrogates)"
    if not isinstance(value, str):
        return "a string"
    return None if is_unicode(value) else "a valid Unicode string (no lone surrogates)"


class Interned:
    """Distinct strings numbered in order of first appearance (None is MISSING_CODE): the texts of one field."""

    def __init__(self) -> None:
        self.codes: dict[Any, int] = {None: MISSING_CODE}
        self.strings: list[str] = []

    def add(self, strings: Iterable[Any]) -> list[str]:
        """Number the strings not seen yet and return them; declines (numbering none) if one is not a valid
        Unicode str."""
        fresh = [s for s in dict.fromkeys(strings) if s not in self.codes]
        if not all(isinstance(s, str) for s in fresh) or not is_unicode("".join(fresh)):
            raise _Declined
        for text in fresh:
            self.codes[text] = len(self.strings)
            self.strings.append(text)
        return fresh

    def decode(self, column: Column) -> list[str | None]:
        """The strings of a column of codes, None where missing."""
        strings = self.strings + [None]  # type: ignore[list-item]
        return list(map(strings.__getitem__, column.values.tolist()))


class Entities(Interned):
    """The entities of one batch, each string hashed to its `entity_id` once."""

    def __init__(self) -> None:
        super().__init__()
        self._ids: list[int] = []
        self._array: np.ndarray | None = None

    def add(self, strings: Iterable[Any]) -> list[str]:
        fresh = super().add(strings)
        if fresh:
            self._ids += map(entity_id, fresh)
            self._array = None
        return fresh

    def ids(self) -> np.ndarray:
        """(n_codes + 1,) int64: entity_id by code, then 0, so that MISSING_CODE (-1) reads 0."""
        if self._array is None:
            self._array = np.array(self._ids + [0], dtype=np.int64)
        return self._array

    def names(self) -> dict[int, str]:
        return dict(zip(self._ids, self.strings))


@dataclass(frozen=True)
class Piece:
    """Some rows of a column, checked and coded but not yet assembled: what a reader makes a chunk at a time.

    `codes` holds numbers (int, float; 0 where missing), 0/1 (bool), member indices (enum; 0 where missing), or
    string codes of the field's table (entity, text: MISSING_CODE where missing; set: one code per element, rows end
    to end with `lengths` elements each)."""

    codes: np.ndarray
    known: np.ndarray  # (n,) uint8
    lengths: np.ndarray | None = None  # sets only: (n,) int64


def encode(raw: Sequence[Any], type_: Type, entities: Entities, texts: Interned | None = None) -> Column:
    """Encode a raw list (None = missing); raises BadValue at the first value that does not fit.

    A text column holds the codes of its strings in `texts` (its field's table), which the lifts read."""
    table = (texts or Interned()) if type_.kind == "text" else entities
    return join_pieces([encode_piece(raw, type_, table)], type_, table)


def encode_piece(raw: Sequence[Any], type_: Type, table: Interned | None) -> Piece:
    """`raw` checked and coded (the fast path, else `piece_reference`); raises BadValue at the first bad value."""
    try:
        return _FAST[type_.kind](raw, type_, table)
    except (_Declined, TypeError, ValueError, OverflowError, KeyError):
        return piece_reference(raw, type_, table)


def piece_reference(raw: Sequence[Any], type_: Type, table: Interned | None) -> Piece:
    """The same piece as `encode_piece`, one value at a time: the definition, and the path for lists the fast path
    declines."""
    for index, value in enumerate(raw):
        if value is not None and (expected := valid(value, type_)) is not None:
            raise BadValue(index, expected)
    known = np.array([value is not None for value in raw], dtype=np.uint8)
    kind = type_.kind
    if kind == "set":
        rows = [[] if value is None else value for value in raw]
        assert table is not None
        table.add(chain.from_iterable(rows))
        codes = np.array([table.codes[e] for row in rows for e in row], dtype=np.int64)
        return Piece(codes, known, np.array([len(row) for row in rows], dtype=np.int64))
    if kind in ("entity", "text"):
        assert table is not None
        table.add(raw)
        values: list[Any] = [table.codes[value] for value in raw]
    elif kind == "enum":
        values = [0 if value is None else type_.members.index(value) for value in raw]
    else:
        values = [0 if value is None else value for value in raw]
    return Piece(np.array(values, dtype=_DTYPES.get(kind, np.int64)), known)


_DTYPES = {"bool": np.uint8, "float": np.float64}


def join_pieces(pieces: list[Piece], type_: Type, table: Interned | None, native: bool = True) -> Column:
    """The column of some pieces laid end to end (at least one); `native=False` sorts sets in numpy alone."""
    codes = pieces[0].codes if len(pieces) == 1 else np.concatenate([piece.codes for piece in pieces])
    known = pieces[0].known if len(pieces) == 1 else np.concatenate([piece.known for piece in pieces])
    if type_.kind == "set":
        assert isinstance(table, Entities)
        lengths = np.concatenate([piece.lengths for piece in pieces])  # type: ignore[misc]
        return set_column(codes, lengths, known, table, native)
    if type_.kind == "entity":
        assert isinstance(table, Entities)
        return Column(table.ids()[codes], known)
    return Column(codes, known)


# --- the fast paths: each declines (raises) rather than guess ---------------------------------------------------

_NONE = type(None)
_UNSEEN = -2  # the code `dict.get` gives a string not numbered yet


def _known(raw: Sequence[Any], kinds: set[type]) -> np.ndarray:
    if _NONE not in kinds:
        return np.ones(len(raw), dtype=np.uint8)
    return np.fromiter(map(is_not, raw, repeat(None)), dtype=np.uint8, count=len(raw))


def _checked_kinds(raw: Sequence[Any], allowed: set[type]) -> set[type]:
    kinds = set(map(type, raw))
    if not kinds <= allowed | {_NONE}:
        raise _Declined
    return kinds


def _string_codes(raw: Sequence[Any], table: Interned) -> np.ndarray:
    """The code of every value, numbering new strings (one hash lookup a value when all are known already)."""
    codes = np.fromiter(map(table.codes.get, raw, repeat(_UNSEEN)), dtype=np.int64, count=len(raw))
    unseen = np.flatnonzero(codes == _UNSEEN)
    if unseen.size:
        table.add([raw[i] for i in unseen.tolist()])  # declines unless they are valid strings
        codes[unseen] = [table.codes[raw[i]] for i in unseen.tolist()]
    return codes


def _fast_number(raw: Sequence[Any], type_: Type, table: Interned | None) -> Piece:
    kinds = _checked_kinds(raw, {int} if type_.kind == "int" else {int, float})
    filled = [0 if v is None else v for v in raw] if _NONE in kinds else raw
    values = np.array(filled, dtype=np.int64 if type_.kind == "int" else np.float64)  # OverflowError: declined
    if values.dtype == np.float64 and not np.isfinite(values).all():
        raise _Declined
    return Piece(values, _known(raw, kinds))


_BOOL_CODES = {True: 1, False: 0, None: 2}  # exact once the types are checked: 1 and 1.0 never get here


def _fast_bool(raw: Sequence[Any], type_: Type, table: Interned | None) -> Piece:
    _checked_kinds(raw, {bool})
    codes = np.fromiter(map(_BOOL_CODES.__getitem__, raw), dtype=np.uint8, count=len(raw))
    known = (codes != 2).view(np.uint8)
    return Piece(codes & known, known)


def _fast_enum(raw: Sequence[Any], type_: Type, table: Interned | None) -> Piece:
    members = {**member_indices(type_), None: MISSING_CODE}
    # KeyError for anything else: a str never equals a non-str, so no wrong type passes as a member.
    codes = np.fromiter(map(members.__getitem__, raw), dtype=np.int64, count=len(raw))
    known = (codes >= 0).view(np.uint8)
    return Piece(np.maximum(codes, 0), known)


def _fast_string(raw: Sequence[Any], type_: Type, table: Interned | None) -> Piece:
    codes = _string_codes(raw, table if table is not None else Interned())
    return Piece(codes, (codes >= 0).view(np.uint8))


def _fast_set(raw: Sequence[Any], type_: Type, table: Interned | None) -> Piece:
    assert table is not None
    kinds = _checked_kinds(raw, {list})
    rows = [() if v is None else v for v in raw] if _NONE in kinds else raw
    flat = list(chain.from_iterable(rows))
    codes = _string_codes(flat, table)
    if codes.size and codes.min() < 0:  # a null element
        raise _Declined
    return Piece(codes, _known(raw, kinds), np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)))


_FAST = {"bool": _fast_bool, "int": _fast_number, "float": _fast_number, "enum": _fast_enum,
         "entity": _fast_string, "text": _fast_string, "set": _fast_set}


# --- the native path: every field of many rows read in one pass (runtime/_gather.c) -----------------------------

_NATIVE_KINDS = {"bool": 0, "int": 1, "float": 2, "enum": 3, "entity": 4, "text": 4, "set": 5}


def native_pieces(groups: list[Any], fields: Mapping[str, Type],
                  tables: Mapping[str, Interned | None]) -> dict[str, Piece]:
    """The pieces over the rows of all `groups` (lists of dicts, laid end to end) of the fields that the native
    gatherer takes, numbering their new strings in `tables`; a field it declines is left out (`encode_piece`
    decides it), and all are when the extension is not built, a group is not a list or a row not a dict."""
    if _gather is None:
        return {}
    slots: dict[int, int] = {}  # id of a table -> its slot: fields sharing a table share the slot's fresh strings
    distinct: list[Interned] = []
    spec: list[tuple[str, int, dict[Any, int] | None, int]] = []
    for field, type_ in fields.items():
        table = tables[field]
        if table is not None and id(table) not in slots:
            slots[id(table)] = len(distinct)
            distinct.append(table)
        lookup = table.codes if table is not None else member_indices(type_) if type_.kind == "enum" else None
        spec.append((field, _NATIVE_KINDS[type_.kind], lookup, slots.get(id(table), -1)))
    gathered = _gather.gather(groups, spec, [len(table.strings) for table in distinct])
    if gathered is None:
        return {}
    coded, fresh = gathered
    for table, strings in zip(distinct, fresh):
        table.add(strings)  # exact, valid strings not in the table: numbered as the codes already say
    pieces = {}
    for (field, type_), result in zip(fields.items(), coded):
        if result is not None:
            codes, known, lengths = result
            pieces[field] = Piece(np.frombuffer(codes, dtype=_DTYPES.get(type_.kind, np.int64)),
                                  np.frombuffer(known, dtype=np.uint8),
                                  None if lengths is None else np.frombuffer(lengths, dtype=np.int64))
    return pieces


def member_indices(type_: Type) -> dict[Any, int]:
    """Each member's index in the enum, the first where one repeats (as `tuple.index` says)."""
    indices: dict[Any, int] = {}
    for index, member in enumerate(type_.members):
        indices.setdefault(member, index)
    return indices


def set_column(codes: np.ndarray, lengths: np.ndarray, known: np.ndarray, entities: Entities,
               native: bool = True) -> Column:
    """A set column from the entity codes of every element, rows laid end to end with `lengths` (n,) elements.

    Every row is sorted by id and de-duplicated at once: key = row * K + rank of the element's id among the K codes;
    the keys are already sorted across rows, so the stable (run-detecting) sort only orders within short rows."""
    if native and _gather is not None:  # the same, a row at a time in C
        by_row, ends = _gather.sorted_sets(_int64s(codes), _int64s(lengths), entities.ids()[:-1])
        return Column(np.frombuffer(by_row, dtype=np.int64), known, np.frombuffer(ends, dtype=np.int64))
    ids = entities.ids()[:-1]
    width = max(ids.size, 1)
    rank = np.empty(ids.size, dtype=np.int64)
    rank[np.argsort(ids, kind="stable")] = np.arange(ids.size)
    keys = np.repeat(np.arange(lengths.size, dtype=np.int64) * width, lengths)
    keys += rank[codes]
    keys.sort(kind="stable")
    if keys.size > 1:
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // width, minlength=lengths.size), out=offsets[1:])
    by_rank = np.sort(ids)
    return Column(by_rank[keys % width], known, offsets)


def take(column: Column, rows: np.ndarray, native: bool = True) -> Column:
    """The given rows of a column, in order (a gather over CSR for sets; in C unless `native=False`)."""
    if column.offsets is None:
        return Column(column.values[rows], column.known[rows])
    if native and _gather is not None:
        taken, ends = _gather.take_sets(_int64s(column.values), _int64s(column.offsets), _int64s(rows))
        return Column(np.frombuffer(taken, dtype=np.int64), column.known[rows], np.frombuffer(ends, dtype=np.int64))
    starts = column.offsets[rows]
    lengths = column.offsets[rows + 1] - starts
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    elements = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return Column(column.values[elements], column.known[rows], offsets)


def _int64s(array: np.ndarray) -> np.ndarray:
    """`array` as the contiguous int64 buffer the native functions read (no copy when it is one already)."""
    return np.ascontiguousarray(array, dtype=np.int64)
