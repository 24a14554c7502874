"""Trajectories as an Arrow table (Parquet, Arrow IPC): the JSONL schema, one row per episode, read by columns.

Columns (docs/trajectories.md): `episode` string, `task` string, `instruction` string, `states` and `actions` lists
of structs (one struct field per fact: string for entity / enum / text, list of strings for set, bool, integer,
floating), `env_reward` floating, `success` bool. Null means what an absent key means in JSONL: missing for a fact,
the default for `task` / `instruction` / `env_reward` / `success`; `episode`, `states`, `actions` and the states and
actions themselves must not be null.

`TableRows` is the fact builder's `RowSource` over such a table: every fact column is coded from Arrow buffers and
its dictionary of distinct strings (`dictionary_encode`), so no Python object is made per value, only per distinct
string and per episode; the codes go through the same assembly as the JSONL path (`columns`), so a
batch read here is identical to one built from the same episodes as JSON. A column of the wrong type is reported at
its first non-null value, `T.parquet: error: row 3: episode e17: field `visible` of state 2: expected a list of
strings, got 5` (rows 1-based). Reading files into tables and converting episodes to
and from them is `trajectories.arrow`. Left out: reading row groups lazily (a table is read whole),
nested objects inside facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tracec.compiler.ir import FactPlan
from tracec.dsl.errors import DataError, Diagnostic
from tracec.dsl.types import Type
from tracec.runtime.facts.arrow_numpy import to_numpy
from tracec.runtime.facts.columns import (
    MISSING_CODE,
    Column,
    Interned,
    Piece,
    join_pieces,
    member_indices,
)
from tracec.runtime.facts.row_source import EncodedFields, Layout, plan_fields
from tracec.runtime.facts.trajectories.jsonl import Where, shown

SOURCES = {"state": "states", "action": "actions"}


def _error(path: str, message: str, row: int = 0) -> DataError:
    return DataError([Where(path, 0, row).diagnostic(message)])


def _strings(array: pa.Array) -> pa.Array:
    """A string-like array (string, large_string, dictionary of strings) as plain strings."""
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    return array.cast(pa.string()) if pa.types.is_large_string(array.type) else array


def _is_string(type_: pa.DataType) -> bool:
    return (pa.types.is_string(type_) or pa.types.is_large_string(type_)
            or (pa.types.is_dictionary(type_) and _is_string(type_.value_type)))


class TableRows(EncodedFields):
    """A RowSource over an Arrow table of episodes (see the module docstring); raises DataError on a bad layout.
    `validated`: the table's arrays are known well-formed (Arrow's JSON reader built them from bytes checked as
    UTF-8: `arrow.json_table`), so they are not validated again (a tenth of the reading)."""

    def __init__(self, table: pa.Table, path: str, plan: FactPlan, *, validated: bool = False):
        self.path = path
        self.validated = validated
        table = table.combine_chunks()
        self.names: Sequence[str] = []
        self.names = self._episode_ids(table)
        self.tasks: Sequence[str] = self._optional_strings(table, "task", list(self.names))
        self.instructions: Sequence[str] = self._optional_strings(table, "instruction", [""] * len(self.names))
        self.env_reward = self._env_reward(table)
        self.success = self._success(table)
        self._lists = {source: self._lists_of(table, name) for source, name in SOURCES.items()}
        states, actions = (to_numpy(pc.list_value_length(self._lists[source])).astype(np.int64) for source in SOURCES)
        bad = np.flatnonzero(states != actions + 1)
        if bad.size:
            row = int(bad[0])
            raise self._fail(row, f"`states` must have one more element than `actions`, got {states[row]} states "
                                  f"and {actions[row]} actions")
        self.layout = Layout.of(actions)
        self._rows = {source: self._structs(source) for source in SOURCES}
        super().__init__()
        self.diagnostics: list[Diagnostic] = []
        for source, fields in plan_fields(plan).items():
            for field, type_ in fields.items():
                self._columns[(source, field)] = (type_, self._encode(source, field, type_))

    # --- episodes ------------------------------------------------------------------------------------------------

    def _fail(self, row: int, message: str) -> DataError:
        """A DataError at 0-based `row`, naming its episode once the ids are known."""
        prefix = f"episode {self.names[row]}: " if row < len(self.names) else ""
        return _error(self.path, prefix + message, row + 1)

    def _column(self, table: pa.Table, name: str) -> pa.Array | None:
        if name not in table.column_names:
            return None
        column = table.column(name).combine_chunks()
        try:
            if not self.validated:
                column.validate(full=True)  # strings are valid UTF-8, offsets in range
        except pa.ArrowInvalid as error:
            raise _error(self.path, f"column `{name}` is malformed: {error}") from None
        return None if pa.types.is_null(column.type) else column

    def _episode_ids(self, table: pa.Table) -> list[str]:
        column = self._column(table, "episode")
        if column is None or not _is_string(column.type):
            got = "no such column" if column is None else f"a column of {column.type}"
            raise _error(self.path, f"`episode` must be a column of strings (the episode ids), got {got}")
        if column.null_count:
            raise self._fail(_first(to_numpy(column.is_null())), "missing `episode` (a string)")
        names: list[str] = _strings(column).to_pylist()
        if len(set(names)) < len(names):
            first: dict[str, int] = {}
            for row, name in enumerate(names):
                if first.setdefault(name, row) != row:
                    raise _error(self.path, f"episode {name}: this id is already used, row {first[name] + 1}; "
                                            "ids must be unique", row + 1)
        return names

    def _optional_strings(self, table: pa.Table, name: str, defaults: list[str]) -> list[str]:
        column = self._column(table, name)
        if column is None:
            return list(defaults)
        if not _is_string(column.type):
            raise _error(self.path, f"`{name}` must be a column of strings, got a column of {column.type}")
        values = _strings(column).to_pylist()
        return [default if value is None else value for value, default in zip(values, defaults)]

    def _env_reward(self, table: pa.Table) -> np.ndarray:
        column = self._column(table, "env_reward")
        if column is None:
            return np.zeros(len(self.names))
        if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
            raise _error(self.path, f"`env_reward` must be a column of numbers, got a column of {column.type}")
        values = to_numpy(pc.cast(column, pa.float64(), safe=False), fill=0.0)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise self._fail(int(bad[0]), f"`env_reward` must be a finite number, got {values[bad[0]]}")
        return values

    def _success(self, table: pa.Table) -> np.ndarray:
        column = self._column(table, "success")
        if column is None:
            return np.full(len(self.names), -1, dtype=np.int8)
        if not pa.types.is_boolean(column.type):
            raise _error(self.path, f"`success` must be a column of booleans, got a column of {column.type}")
        return to_numpy(column.cast(pa.int8()), fill=-1)

    def _lists_of(self, table: pa.Table, name: str) -> pa.Array:
        column = self._column(table, name)
        if column is None or not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
            got = "no such column" if column is None else f"a column of {column.type}"
            raise _error(self.path, f"`{name}` must be a column of lists of structs, got {got}")
        if column.null_count:
            raise self._fail(_first(to_numpy(column.is_null())), f"missing `{name}` (a list of objects)")
        return column

    def _structs(self, source: str) -> pa.Array:
        """The states (or actions) of every episode end to end: a struct array (or nulls, if none has a field)."""
        lists = self._lists[source]
        rows = pc.list_flatten(lists)
        if not (pa.types.is_struct(rows.type) or pa.types.is_null(rows.type)):
            raise _error(self.path, f"`{SOURCES[source]}` must be a column of lists of structs, got a column of "
                                    f"{lists.type}")
        if pa.types.is_struct(rows.type) and rows.null_count:
            index, position = self.layout.episode_of(source, _first(to_numpy(rows.is_null())))
            raise self._fail(index, f"{source} {position} must be an object, got null")
        return rows

    # --- facts ---------------------------------------------------------------------------------------------------

    def _encode(self, source: str, field: str, type_: Type) -> Column | None:
        rows = self._rows[source]
        has = pa.types.is_struct(rows.type) and rows.type.get_field_index(field) >= 0
        values = rows.field(field) if has else pa.nulls(len(rows))
        if values.null_count == len(values):  # absent, or null everywhere: missing, whatever the column's type
            values = pa.nulls(len(rows))
        table = self._texts.setdefault((source, field), Interned()) if type_.kind == "text" else self.entities
        try:
            piece = _CODERS[type_.kind](values, type_, table)
        except _Bad as bad:
            self._report(source, field, values, bad.index, bad.expected)
            return None
        return join_pieces([piece], type_, table)

    def _report(self, source: str, field: str, values: pa.Array, row: int | None, expected: str) -> None:
        """A diagnostic at the bad value's row, or (a column of the wrong type) at its first non-null value."""
        suffix = ""
        if row is None:
            row, suffix = _first(to_numpy(values.is_valid())), f" (a column of {values.type})"
        index, position = self.layout.episode_of(source, row)
        message = (f"episode {self.names[index]}: field `{field}` of {source} {position}: expected {expected}, "
                   f"got {shown(values[row].as_py())}{suffix}")
        self.diagnostics.append(Where(self.path, 0, index + 1).diagnostic(message))


class _Bad(Exception):
    def __init__(self, index: int | None, expected: str):
        super().__init__(index, expected)
        self.index, self.expected = index, expected


def _known(values: pa.Array) -> np.ndarray:
    return to_numpy(values.is_valid()).view(np.uint8) if values.null_count else np.ones(len(values), np.uint8)


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _code_bool(values: pa.Array, type_: Type, table: Interned) -> Piece:
    if not (pa.types.is_boolean(values.type) or pa.types.is_null(values.type)):
        raise _Bad(None, "true or false")
    known = _known(values)
    return Piece(to_numpy(values.cast(pa.uint8())), known)


def _code_number(values: pa.Array, type_: Type, table: Interned) -> Piece:
    kind, known = type_.kind, _known(values)
    if pa.types.is_null(values.type):
        return Piece(np.zeros(len(values), np.int64 if kind == "int" else np.float64), known)
    if pa.types.is_integer(values.type) and kind == "float":  # rounded as Python's float(int) rounds
        return Piece(to_numpy(pc.cast(values, pa.float64(), safe=False)), known)
    if pa.types.is_integer(values.type):
        if pa.types.is_uint64(values.type):
            big = to_numpy(values) >= np.uint64(2**63)
            if big.any():
                raise _Bad(_first(big), "a 64-bit integer")
        return Piece(to_numpy(values.cast(pa.int64())), known)
    if kind == "int" or not pa.types.is_floating(values.type):
        raise _Bad(None, "an integer" if kind == "int" else "a number")
    floats = to_numpy(values.cast(pa.float64()))
    if not np.isfinite(floats).all():
        raise _Bad(_first(~np.isfinite(floats)), "a finite number")
    return Piece(floats, known)


def _dictionary(values: pa.Array, type_: Type, expected: str) -> tuple[np.ndarray, list[Any]]:
    """(index of each value in the distinct strings, -1 where null; the distinct strings)."""
    if pa.types.is_null(values.type):
        return np.full(len(values), MISSING_CODE, dtype=np.int64), []
    if not _is_string(values.type):
        raise _Bad(None, expected)
    encoded = pc.dictionary_encode(_strings(values))
    indices = to_numpy(encoded.indices.cast(pa.int64()), fill=MISSING_CODE)
    return indices, encoded.dictionary.to_pylist()


def _code_enum(values: pa.Array, type_: Type, table: Interned) -> Piece:
    expected = f"a member of {type_}"
    indices, strings = _dictionary(values, type_, expected)
    members = member_indices(type_)
    unknown = [i for i, text in enumerate(strings) if text not in members]
    if unknown:
        raise _Bad(_first(np.isin(indices, unknown)), expected)
    codes = np.array([members[text] for text in strings] + [0], dtype=np.int64)[indices]
    return Piece(codes, (indices >= 0).view(np.uint8))


def _code_string(values: pa.Array, type_: Type, table: Interned) -> Piece:
    indices, strings = _dictionary(values, type_, "a string")
    table.add(strings)  # Arrow strings are valid UTF-8 (checked on reading), so this never declines
    codes = np.array([table.codes[text] for text in strings] + [MISSING_CODE], dtype=np.int64)[indices]
    return Piece(codes, (indices >= 0).view(np.uint8))


def _code_set(values: pa.Array, type_: Type, table: Interned) -> Piece:
    if pa.types.is_null(values.type):
        return Piece(np.zeros(0, np.int64), _known(values), np.zeros(len(values), np.int64))
    if not (pa.types.is_list(values.type) or pa.types.is_large_list(values.type)):
        raise _Bad(None, "a list of strings")
    elements = pc.list_flatten(values)
    lengths = to_numpy(pc.list_value_length(values)).astype(np.int64)
    if elements.null_count or not (_is_string(elements.type)
                                   or (pa.types.is_null(elements.type) and not len(elements))):
        bad = np.zeros(len(elements), bool) if not elements.null_count else to_numpy(elements.is_null())
        element = _first(bad) if bad.any() else 0
        raise _Bad(int(np.searchsorted(np.cumsum(lengths), element, side="right")), "a list of strings")
    indices, strings = _dictionary(elements, type_, "a list of strings")
    table.add(strings)
    codes = np.array([table.codes[text] for text in strings] + [MISSING_CODE], dtype=np.int64)[indices]
    return Piece(codes, _known(values), lengths)


_CODERS = {"bool": _code_bool, "int": _code_number, "float": _code_number, "enum": _code_enum,
           "entity": _code_string, "text": _code_string, "set": _code_set}
