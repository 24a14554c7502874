"""The fact builder: trajectories + a `FactPlan` -> `FactBatch`, the numeric columns a compiled rubric reads.

Every column has one row per transition (episodes end to end, delimited by `episode_offsets`) and a `known` mask:
a fact that is absent or null is missing (LANGUAGE.md, "Missing facts"); `tracec.runtime.columns` says how each type
is encoded. Text never becomes a column: the compiler lifts `contains` / `matches` to bool columns "lift.K" that are
computed here, and bindings ("bind.NAME", `tracec.runtime.bindings`) are evaluated once per episode from its
instruction and broadcast to its transitions.

`assemble` builds a batch from a `RowSource`, which gives each field encoded over all states (or all actions) of the
batch: `EpisodeRows` here, over in-memory `Episode`s, and `tracec.runtime.trajectories.table` over Arrow columns, so
both paths share everything else. Work is per field and per distinct value, not per step: a field is read from
every state once (prev and next share it; `take` gathers the transitions), a lifted predicate is computed once per
distinct text, a binding once per distinct instruction. Reading from episodes is one pass of the C extension over
the states (then the actions), every field of a dict at once (`tracec.runtime.columns.native_pieces`); a field it
declines, and every field where it is not built (or `native=False`), is read the Python way: the states a thousand
at a time, every field of the chunk while its dicts are in cache. Both give the same batch, bit for bit.

Errors: every bad field is reported, each at its first bad value, in one DataError, as `file:line:1: error: episode
ID: field `f` of state 2: expected a list of strings, got 5` (0-based positions in `states` / `actions`). Episode ids,
tasks and instructions must be valid Unicode strings. Left out: fields that are not in the plan (never read), nested
objects, sets of anything but entities, entity-id collisions (64-bit hashes; not checked).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any, Protocol

import numpy as np
from tracec.compiler.ir import FactPlan, LiftSource, Needle, Node
from tracec.dsl.errors import DataError, Diagnostic
from tracec.dsl.types import ENTITY, TEXT, Type
from tracec.runtime.bindings import MISSING, Regexes, convert, evaluate_binding
from tracec.runtime.columns import (
    BadValue,
    Column,
    Entities,
    Interned,
    Piece,
    encode_piece,
    is_unicode,
    join_pieces,
    native_pieces,
    take,
)
from tracec.runtime.trajectories.jsonl import Episode, check_shape, shown

SIDES = {"prev": "state", "next": "state", "act": "action"}
_CHUNK = 1024  # states (or actions) read per pass: their dicts stay in cache while every field is taken


@dataclass(frozen=True)
class FactBatch:
    columns: Mapping[str, Column]  # every column has n_transitions rows
    n_transitions: int
    episode_offsets: np.ndarray  # (n_episodes + 1,) int64
    episodes: tuple[str, ...]  # episode ids
    tasks: tuple[str, ...]  # task id per episode
    task_group: np.ndarray  # (n_episodes,) int64: index of the episode's task among distinct tasks, first seen first
    env_reward: np.ndarray  # (n_episodes,) float64
    success: np.ndarray  # (n_episodes,) int8: 1, 0, or -1 when absent
    entity_names: Mapping[int, str]  # entity_id -> the string, for every entity in a column


@dataclass(frozen=True)
class Layout:
    """Where each episode's transitions and states lie once episodes are laid end to end."""

    trans_offsets: np.ndarray  # (n_episodes + 1,) int64
    lengths: np.ndarray  # (n_episodes,) int64: transitions per episode
    state_offsets: np.ndarray  # (n_episodes + 1,): episode i's states are rows trans_offsets[i] + i ...
    prev_rows: np.ndarray  # (n_transitions,): the state row of s_t (s_t+1 is the next row)

    @staticmethod
    def of(lengths: np.ndarray) -> Layout:
        lengths = np.asarray(lengths, dtype=np.int64)
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        prev_rows = np.arange(offsets[-1]) + np.repeat(np.arange(lengths.size), lengths)
        return Layout(offsets, lengths, offsets + np.arange(lengths.size + 1), prev_rows)

    def rows(self, side: str) -> np.ndarray | None:
        """The source row of each transition for `side`; None for actions (one row a transition)."""
        return None if side == "act" else self.prev_rows + (side == "next")

    def episode_of(self, source: str, row: int) -> tuple[int, int]:
        """(episode index, position in its states or actions) of a source row."""
        offsets = self.state_offsets if source == "state" else self.trans_offsets
        index = int(np.searchsorted(offsets, row, side="right")) - 1
        return index, row - int(offsets[index])


class RowSource(Protocol):
    """The trajectories of a batch, field by field: what `assemble` needs from JSONL, Parquet or memory."""

    layout: Layout
    names: Sequence[str]  # episode ids
    tasks: Sequence[str]
    instructions: Sequence[str]
    env_reward: np.ndarray  # (n_episodes,) float64
    success: np.ndarray  # (n_episodes,) int8
    entities: Entities
    diagnostics: list[Diagnostic]

    def encoded(self, source: str, field: str, type_: Type) -> Column | None:
        """The field over every row of `source` ("state" / "action"); None (and a diagnostic) if a value is bad."""

    def text_test(self, source: str, field: str, test: Callable[[str], bool]) -> Column | None:
        """`test` of a text field per row (uint8, unknown where the text is missing); None if the field is bad."""

    def texts(self, source: str, field: str) -> list[str | None] | None:
        """The raw strings of a text or entity field per row; None if the field is bad."""


def build_fact_batch(episodes: Sequence[Episode], plan: FactPlan, native: bool = True) -> FactBatch:
    """The plan's columns over `episodes`; raises DataError naming every field whose values do not fit its type.

    `native=False` takes the Python path even where the C extension is built (the same batch, slower)."""
    return assemble(EpisodeRows(episodes, plan, native), plan, native)


def assemble(rows: RowSource, plan: FactPlan, native: bool = True) -> FactBatch:
    """The FactBatch of a row source: fields, bindings and lifts; raises DataError with every bad field.
    `native=False` gathers set rows in numpy even where the C extension is built."""
    layout, columns = rows.layout, {}
    for source in plan.fields:
        if source.type.kind != "text":
            column = rows.encoded(SIDES[source.side], source.field, source.type)
            if column is not None:
                picked = layout.rows(source.side)
                columns[source.column] = column if picked is None else take(column, picked, native)
    regexes = Regexes()
    bound = {bind.name: _bind_values(rows, bind.expr, bind.type, regexes) for bind in plan.binds}
    for bind in plan.binds:
        if bind.type.kind != "text":
            columns[bind.column] = _bind_column(rows, bound[bind.name], bind.type)
    for lift in plan.lifts:
        column = _lift(rows, lift, bound, regexes)
        if column is not None:
            columns[lift.column] = column
    if rows.diagnostics:
        raise DataError(sorted(set(rows.diagnostics)))
    distinct: dict[str, int] = {}
    return FactBatch(
        columns=columns,
        n_transitions=int(layout.trans_offsets[-1]),
        episode_offsets=layout.trans_offsets,
        episodes=tuple(rows.names),
        tasks=tuple(rows.tasks),
        task_group=np.array([distinct.setdefault(task, len(distinct)) for task in rows.tasks], dtype=np.int64),
        env_reward=rows.env_reward,
        success=rows.success,
        entity_names=rows.entities.names(),
    )


def _bind_values(rows: RowSource, expr: Node, type_: Type, regexes: Regexes) -> list[Any]:
    """The binding of every episode, in its type (or MISSING); episodes that share an instruction share work."""
    memo: dict[str, Any] = {}
    for instruction in dict.fromkeys(rows.instructions):
        memo[instruction] = value = convert(evaluate_binding(expr, instruction, regexes), type_)
        if type_.kind == "entity" and value is not MISSING:
            rows.entities.add((value,))
    return [memo[instruction] for instruction in rows.instructions]


def _bind_column(rows: RowSource, values: list[Any], type_: Type) -> Column:
    if type_.kind == "entity":
        ids, codes = rows.entities.ids(), rows.entities.codes
        values = [MISSING if v is MISSING else int(ids[codes[v]]) for v in values]
    known = np.array([v is not MISSING for v in values], dtype=np.uint8)
    dtype = {"bool": np.uint8, "float": np.float64}.get(type_.kind, np.int64)
    codes_ = np.array([0 if v is MISSING else v for v in values], dtype=dtype)
    lengths = rows.layout.lengths
    return Column(np.repeat(codes_, lengths), np.repeat(known, lengths))


def _lift(rows: RowSource, lift: LiftSource, bound: Mapping[str, list[Any]], regexes: Regexes) -> Column | None:
    """A lifted text predicate per transition; unknown where the text or the needle is missing."""
    test: Callable[[str], bool] | None = None
    if lift.kind == "matches":
        regex = regexes.get(lift.pattern, lift.ignore_case)
        # Searching UTF-8 bytes gives the same answer and skips the wrapper's character-offset bookkeeping.
        test = lambda text: regex.search(text.encode("utf-8")) is not None
    elif lift.needle is not None and lift.needle.kind == "const":
        needle = lift.needle.value
        test = lambda text: needle in text
    if test is not None:
        if lift.text == "instruction":
            memo = {text: test(text) for text in dict.fromkeys(rows.instructions)}
            hits = np.array([memo[text] for text in rows.instructions], dtype=np.uint8)
            lengths = rows.layout.lengths
            return Column(np.repeat(hits, lengths), np.ones(int(lengths.sum()), dtype=np.uint8))
        side, field = lift.text.split(".", 1)
        column = rows.text_test(SIDES[side], field, test)
        picked = rows.layout.rows(side)
        return column if column is None or picked is None else take(column, picked)
    assert lift.needle is not None, f"`contains` lift {lift.column} has no needle"
    texts = _transition_strings(rows, lift.text, TEXT)
    needles = _needles(rows, lift.needle, bound)
    if texts is None or needles is None:
        return None
    found = [text is not None and needle is not None and needle in text for text, needle in zip(texts, needles)]
    known = [text is not None and needle is not None for text, needle in zip(texts, needles)]
    return Column(np.array(found, dtype=np.uint8), np.array(known, dtype=np.uint8))


def _transition_strings(rows: RowSource, fact: str, type_: Type) -> list[str | None] | None:
    """The strings of a text or entity fact ("side.field", or "instruction") per transition."""
    if fact == "instruction":
        return list(chain.from_iterable(map(repeat, rows.instructions, rows.layout.lengths.tolist())))
    side, field = fact.split(".", 1)
    if rows.encoded(SIDES[side], field, type_) is None:
        return None
    raw = rows.texts(SIDES[side], field)
    picked = rows.layout.rows(side)
    if raw is None or picked is None:
        return raw
    return list(map(raw.__getitem__, picked.tolist()))


def _needles(rows: RowSource, needle: Needle, bound: Mapping[str, list[Any]]) -> list[str | None] | None:
    if needle.kind == "fact":
        return _transition_strings(rows, needle.value, ENTITY)
    if needle.value not in bound:
        raise ValueError(f"a `contains` needle names binding `{needle.value}`, which the plan does not bind")
    per_episode = [None if v is MISSING else v for v in bound[needle.value]]
    return list(chain.from_iterable(map(repeat, per_episode, rows.layout.lengths.tolist())))


# --- in-memory episodes ----------------------------------------------------------------------------------------


def plan_fields(plan: FactPlan) -> dict[str, dict[str, Type]]:
    """The fields the plan reads and their types, by source ("state", "action"): fields, lifted texts, needles,
    and every other field the schema declares (checked, never read)."""
    needed: dict[str, dict[str, Type]] = {"state": {}, "action": {}}
    for source in plan.fields:
        needed[SIDES[source.side]][source.field] = source.type
    facts = [(lift.text, TEXT) for lift in plan.lifts]
    facts += [(lift.needle.value, ENTITY) for lift in plan.lifts if lift.needle is not None and lift.needle.kind == "fact"]
    for fact, type_ in facts:
        if fact != "instruction":
            side, field = fact.split(".", 1)
            needed[SIDES[side]].setdefault(field, type_)
    for declared in plan.declared:  # a wrongly typed field is an error whether or not a kernel reads it
        needed[declared.part].setdefault(declared.field, declared.type)
    return needed


class EpisodeRows:
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
        self.entities = Entities()
        self.diagnostics: list[Diagnostic] = []
        self._texts: dict[tuple[str, str], Interned] = {}
        self._columns: dict[tuple[str, str], tuple[Type, Column | None]] = {}
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

    def encoded(self, source: str, field: str, type_: Type) -> Column | None:
        read_as, column = self._columns[(source, field)]
        assert read_as == type_, f"{source} field `{field}` read as {read_as} and as {type_}"
        return column

    def text_test(self, source: str, field: str, test: Callable[[str], bool]) -> Column | None:
        column = self.encoded(source, field, TEXT)
        return None if column is None else test_texts(column, self._texts[(source, field)], test)

    def texts(self, source: str, field: str) -> list[str | None] | None:
        type_, column = self._columns[(source, field)]
        if column is None:
            return None
        if type_.kind == "text":
            return self._texts[(source, field)].decode(column)
        names = self.entities.names()
        return [names[v] if k else None for v, k in zip(column.values.tolist(), column.known.tolist())]

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


def test_texts(column: Column, texts: Interned, test: Callable[[str], bool]) -> Column:
    """`test` of each row of a text column (codes into `texts`), run once per distinct string."""
    results = np.array([test(text) for text in texts.strings] + [False], dtype=np.uint8)
    return Column(results[column.values], column.known)


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
