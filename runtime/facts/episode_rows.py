"""The fact builder's `RowSource` over in-memory `Episode`s (the trainer's path): `EpisodeRows`.

Reading is one pass of the C extension over the states (then the actions), every field of a dict at once
(`columns.native_pieces`); a field it declines, and every field where it is not built (or
`native=False`), is read the Python way: the states a thousand at a time, every field of the chunk while its dicts
are in cache. Both give the same batch, bit for bit.

Errors: a bad field value is a diagnostic at its first bad value (collected in `diagnostics`, raised by
`fact_batch.assemble` with the rest); a state or action that is not an object, and episode ids, tasks and
instructions that are not valid Unicode strings, raise DataError at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from tracec.compiler.ir import FactPlan
from tracec.dsl.errors import DataError, Diagnostic
from tracec.dsl.types import Type
from tracec.runtime.facts.columns import (
    BadValue,
    Interned,
    Piece,
    encode_piece,
    is_unicode,
    join_pieces,
    native_pieces,
)
from tracec.runtime.facts.row_source import EncodedFields, Layout, plan_fields
from tracec.runtime.facts.trajectories.jsonl import Episode, check_shape, shown

_CHUNK = 1024  # states (or actions) read per pass: their dicts stay in cache while every field is taken


class EpisodeRows(EncodedFields):
    """A RowSource over in-memory episodes. The states (then the actions) are read in one native pass, every field
    of a dict at once; the fields it declines are read a chunk at a time, each taken from the chunk's dicts and
    encoded while they are in cache: a pass per field over all of them would fetch every dict from memory once per
    field. `native=False` reads every field the second way."""

    def __init__(self, episodes: Sequence[Episode], plan: FactPlan, native: bool = True):
        self._native = native
        self._states = list(map(attrgetter("states"), episodes))
        self._actions = list(map(attrgetter("actions"), episodes))
        try:
            n_states = np.fromiter(map(len, self._states), dtype=np.int64, count=len(episodes))
            actions = np.fromiter(map(len, self._actions), dtype=np.int64, count=len(episodes))
        except TypeError:  # a states or actions that is not a list: check_shape below names it
            n_states = actions = np.zeros(len(episodes), dtype=np.int64)
        for index in np.flatnonzero(n_states != actions + 1).tolist():
            check_shape(episodes[index])
        self.episodes = episodes
        self.names: Sequence[str] = list(map(attrgetter("episode"), episodes))
        self.tasks: Sequence[str] = list(map(attrgetter("task"), episodes))
        self.instructions: Sequence[str] = list(map(attrgetter("instruction"), episodes))
        for key, values in (("episode", self.names), ("task", self.tasks), ("instruction", self.instructions)):
            _check_strings(episodes, key, values)
        self.layout = Layout.of(actions)
        self.env_reward = np.array([episode.env_reward for episode in episodes], dtype=np.float64)
        self.success = np.array([-1 if e.success is None else int(e.success) for e in episodes], dtype=np.int8)
        super().__init__()
        self.diagnostics: list[Diagnostic] = []
        for source, fields in plan_fields(plan).items():
            if fields:
                self._read(source, fields)

    def _read(self, source: str, fields: dict[str, Type]) -> None:
        groups = self._states if source == "state" else self._actions
        tables = {field: self._table(source, field, type_) for field, type_ in fields.items()}
        native = native_pieces(groups, fields, tables) if self._native else {}
        pieces: dict[str, list[Piece] | None] = {field: [piece] for field, piece in native.items()}
        declined = {field: type_ for field, type_ in fields.items() if field not in native}
        if declined:
            pieces.update(self._read_python(source, list(chain.from_iterable(groups)), declined, tables))
        for field, type_ in fields.items():
            done = pieces[field]
            joined = None if done is None else join_pieces(done, type_, tables[field], self._native)
            self._columns[(source, field)] = (type_, joined)

    def _read_python(self, source: str, rows: list[Any], fields: dict[str, Type],
                     tables: dict[str, Interned | None]) -> dict[str, list[Piece] | None]:
        """The pieces of each field a chunk at a time (None for a field found bad, with its diagnostic)."""
        pieces: dict[str, list[Piece] | None] = {field: [] for field in fields}
        gather = _Gather(list(fields))
        for lo in range(0, max(len(rows), 1), _CHUNK):
            try:
                values = gather.chunk(rows[lo:lo + _CHUNK])
            except TypeError:  # a row that is not a dict
                raise self._not_an_object(source, rows, lo) from None
            for field, type_ in fields.items():
                done, raw = pieces[field], values[field]
                if done is None:
                    continue  # already reported
                try:
                    done.append(encode_piece(raw, type_, tables[field]))
                except BadValue as bad:
                    self.diagnostics.append(self._located(source, field, lo + bad.index, bad, raw[bad.index]))
                    pieces[field] = None
        return pieces

    def _table(self, source: str, field: str, type_: Type) -> Interned | None:
        if type_.kind == "text":
            return self._texts.setdefault((source, field), Interned())
        return self.entities if type_.kind in ("entity", "set") else None

    def _not_an_object(self, source: str, rows: list[Any], lo: int) -> DataError:
        row = next(i for i in range(lo, len(rows)) if not isinstance(rows[i], dict))
        index, position = self.layout.episode_of(source, row)
        episode = self.episodes[index]
        return DataError([episode.where.diagnostic(
            f"episode {episode.episode}: {source} {position} must be an object, got {shown(rows[row])}")])

    def _located(self, source: str, field: str, row: int, bad: BadValue, value: Any) -> Diagnostic:
        index, position = self.layout.episode_of(source, row)
        episode = self.episodes[index]
        return episode.where.diagnostic(f"episode {episode.episode}: field `{field}` of {source} {position}: "
                                        f"expected {bad.expected}, got {shown(value)}")


class _Gather:
    """Fields of dicts, a chunk of rows at a time: the fields every row has so far with one `itemgetter` a row (a
    row's dict is read once, for all of them), a field found missing somewhere with `dict.get` from then on."""

    def __init__(self, fields: list[str]):
        self.everywhere = list(fields)
        self.somewhere: list[str] = []

    def chunk(self, rows: list[Any]) -> dict[str, Sequence[Any]]:
        """{field: its value in each row (None where absent)}; TypeError if a row is not a dict."""
        while True:
            try:
                values = self._rowwise(rows)
                break
            except KeyError as missing:
                self.everywhere.remove(missing.args[0])
                self.somewhere.append(missing.args[0])
        for field in self.somewhere:
            values[field] = list(map(dict.get, rows, repeat(field)))
        return values

    def _rowwise(self, rows: list[Any]) -> dict[str, Sequence[Any]]:
        fields = self.everywhere
        if len(fields) == 1:
            return {fields[0]: list(map(itemgetter(fields[0]), rows))}
        if not fields or not rows:
            return dict.fromkeys(fields, ())  # type: ignore[arg-type]
        return dict(zip(fields, zip(*map(itemgetter(*fields), rows))))


def _check_strings(episodes: Sequence[Episode], key: str, values: Sequence[Any]) -> None:
    """Episode ids, tasks and instructions are valid Unicode strings (they are written out, hashed, matched)."""
    if set(map(type, values)) <= {str} and is_unicode("".join(values)):
        return
    for episode, value in zip(episodes, values):
        if not isinstance(value, str) or not is_unicode(value):
            expected = "a string" if not isinstance(value, str) else "a valid Unicode string (no lone surrogates)"
            prefix = "" if key == "episode" else f"episode {episode.episode}: "
            raise DataError([episode.where.diagnostic(f"{prefix}`{key}` must be {expected}, got {shown(value)}")])
