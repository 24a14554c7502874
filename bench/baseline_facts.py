"""The fact builder as it was before the columnar rewrite (runtime/facts.py + runtime/columns.py at e68f46d), kept
verbatim, but for its imports, as the baseline of bench/test_trajectories_bench.py. Not part of the package."""

# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any

import numpy as np
import re2
from tracec.compiler.ir import FactPlan, LiftSource, Needle, Node, entity_id
from tracec.dsl.errors import DataError, Diagnostic
from tracec.dsl.types import ENTITY, TEXT, Type
from tracec.runtime.facts.trajectories.jsonl import Episode, check_shape, shown

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
            return Column(np.array(filled, dtype=np.int64 if kind == "int" else np.float64), known)
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


class _Missing(enum.Enum):
    MISSING = "missing"


MISSING = _Missing.MISSING  # a binding that did not match, or whose text did not convert to its type

_SIDES = {"prev": "state", "next": "state", "act": "action"}


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


class Regexes:
    """Compiled RE2 patterns by (pattern, ignore_case), so that a batch compiles each pattern once."""

    def __init__(self) -> None:
        self._compiled: dict[tuple[str, bool], Any] = {}

    def get(self, pattern: str, ignore_case: bool) -> Any:
        key = (pattern, ignore_case)
        if key not in self._compiled:
            options = re2.Options()
            options.case_sensitive = not ignore_case
            options.log_errors = False  # the checker has already validated the pattern
            self._compiled[key] = re2.compile(pattern, options)
        return self._compiled[key]


def evaluate_binding(expr: Node, instruction: str, regexes: Regexes | None = None) -> Any:
    """The value of a binding expression (ops `instruction`, `const`, `match`, `lower`), or MISSING."""
    op = expr.op
    if op == "instruction":
        return instruction
    if op == "const":
        return expr.value
    inner = evaluate_binding(expr.args[0], instruction, regexes)
    if inner is MISSING:
        return MISSING
    if op == "lower":
        return str.lower(inner)
    if op == "match":
        pattern, ignore_case, group = expr.value
        found = (regexes or Regexes()).get(pattern, ignore_case).search(inner)
        text = found.group(group) if found is not None else None
        return MISSING if text is None else text
    raise ValueError(f"`{op}` is not a binding op")


def convert(value: Any, type_: Type) -> Any:
    """A bound value in the binding's type (entities stay strings, enums become member indices), or MISSING."""
    kind = type_.kind
    if value is MISSING or (kind in ("entity", "text") and not isinstance(value, str)):
        return MISSING
    if kind in ("entity", "text"):
        return value
    if kind == "enum":
        return type_.members.index(value) if value in type_.members else MISSING
    if kind == "bool":
        return value if isinstance(value, bool) else {"true": True, "false": False}.get(value, MISSING)
    # Numbers: a constant of the right kind, or text parsed with Python's int() / float() syntax.
    if not isinstance(value, str) and type(value) not in ((int,) if kind == "int" else (int, float)):
        return MISSING
    try:
        number = int(value) if kind == "int" else float(value)
    except (ValueError, OverflowError):
        return MISSING
    if kind == "int":
        return number if INT64_RANGE[0] <= number < INT64_RANGE[1] else MISSING
    return number if math.isfinite(number) else MISSING


def build_fact_batch(episodes: Sequence[Episode], plan: FactPlan) -> FactBatch:
    """The plan's columns over `episodes`; raises DataError naming every field whose values do not fit its type."""
    for episode in episodes:
        check_shape(episode)
    reader = _Reader(episodes)
    columns: dict[str, Column] = {}
    for source in plan.fields:
        if source.type.kind != "text":
            column = reader.column(source.side, source.field, source.type)
            if column is not None:
                columns[source.column] = column
    bound = {bind.name: reader.bind_values(bind.expr, bind.type) for bind in plan.binds}
    for bind in plan.binds:
        if bind.type.kind != "text":
            columns[bind.column] = reader.bind_column(bound[bind.name], bind.type)
    for lift in plan.lifts:
        column = reader.lift(lift, bound)
        if column is not None:
            columns[lift.column] = column
    if reader.diagnostics:
        raise DataError(sorted(set(reader.diagnostics)))

    distinct: dict[str, int] = {}
    tasks = tuple(episode.task for episode in episodes)
    return FactBatch(
        columns=columns,
        n_transitions=reader.n_transitions,
        episode_offsets=reader.trans_offsets,
        episodes=tuple(episode.episode for episode in episodes),
        tasks=tasks,
        task_group=np.array([distinct.setdefault(task, len(distinct)) for task in tasks], dtype=np.int64),
        env_reward=np.array([episode.env_reward for episode in episodes], dtype=np.float64),
        success=np.array([-1 if e.success is None else int(e.success) for e in episodes], dtype=np.int8),
        entity_names={code: name for name, code in reader.interned.items()},
    )


class _Reader:
    """One batch being built: raw field lists, encoded columns and interned entities, each computed once."""

    def __init__(self, episodes: Sequence[Episode]):
        self.episodes = episodes
        actions = np.array([len(episode.actions) for episode in episodes], dtype=np.int64)
        self.trans_offsets = np.zeros(len(episodes) + 1, dtype=np.int64)
        np.cumsum(actions, out=self.trans_offsets[1:])
        self.n_transitions = int(self.trans_offsets[-1])
        # State rows: episode i's states start at trans_offsets[i] + i, so transition t of episode i has
        # prev row t + i and next row t + i + 1.
        self.state_offsets = self.trans_offsets + np.arange(len(episodes) + 1)
        self.lengths = actions  # transitions per episode
        self.prev_rows = np.arange(self.n_transitions) + np.repeat(np.arange(len(episodes)), actions)
        self.interned: dict[str, int] = {}
        self.diagnostics: list[Diagnostic] = []
        self.regexes = Regexes()
        self._raw: dict[tuple[str, str], list[Any]] = {}
        self._encoded: dict[tuple[str, str, Type], Column | None] = {}

    def raw(self, source: str, field: str) -> list[Any]:
        """The field of every state (or action) of the batch, in order; None where absent."""
        key = (source, field)
        if key not in self._raw:
            rows = (e.states if source == "state" else e.actions for e in self.episodes)
            self._raw[key] = [row.get(field) for row in chain.from_iterable(rows)]
        return self._raw[key]

    def encoded(self, source: str, field: str, type_: Type) -> Column | None:
        """The field encoded over all states (or actions); None (and a diagnostic) if a value does not fit."""
        key = (source, field, type_)
        if key not in self._encoded:
            raw = self.raw(source, field)
            try:
                self._encoded[key] = encode(raw, type_, self.interned)
            except BadValue as bad:
                self.diagnostics.append(self._located(source, field, bad, raw[bad.index]))
                self._encoded[key] = None
        return self._encoded[key]

    def column(self, side: str, field: str, type_: Type) -> Column | None:
        """`side.field` per transition."""
        column = self.encoded(_SIDES[side], field, type_)
        if column is None or side == "act":
            return column
        return take(column, self.prev_rows + (side == "next"))

    def strings(self, fact: str, type_: Type) -> list[str | None] | None:
        """The strings of a text or entity fact "side.field" per transition; None if a value is not a string."""
        side, field = fact.split(".", 1)
        if self.encoded(_SIDES[side], field, type_) is None:
            return None
        raw = self.raw(_SIDES[side], field)
        if side == "act":
            return raw
        return list(map(raw.__getitem__, (self.prev_rows + (side == "next")).tolist()))

    def broadcast(self, per_episode: list[Any]) -> list[Any]:
        """Per-episode values repeated over each episode's transitions."""
        return list(chain.from_iterable(map(repeat, per_episode, self.lengths.tolist())))

    def bind_values(self, expr: Node, type_: Type) -> list[Any]:
        """The binding of every episode, in its type (or MISSING); episodes that share an instruction share work."""
        memo: dict[str, Any] = {}
        for episode in self.episodes:
            if episode.instruction not in memo:
                value = convert(evaluate_binding(expr, episode.instruction, self.regexes), type_)
                if type_.kind == "entity" and value is not MISSING:
                    self.interned.setdefault(value, entity_id(value))
                memo[episode.instruction] = value
        return [memo[episode.instruction] for episode in self.episodes]

    def bind_column(self, values: list[Any], type_: Type) -> Column:
        if type_.kind == "entity":
            values = [MISSING if v is MISSING else self.interned[v] for v in values]
        known = np.array([v is not MISSING for v in values], dtype=np.uint8)
        dtype = {"bool": np.uint8, "float": np.float64}.get(type_.kind, np.int64)
        codes = np.array([0 if v is MISSING else v for v in values], dtype=dtype)
        return Column(np.repeat(codes, self.lengths), np.repeat(known, self.lengths))

    def lift(self, lift: LiftSource, bound: Mapping[str, list[Any]]) -> Column | None:
        """A lifted text predicate per transition; unknown where the text or the needle is missing."""
        if lift.text == "instruction":
            texts: list[str | None] | None = self.broadcast([e.instruction for e in self.episodes])
        else:
            texts = self.strings(lift.text, TEXT)
        if lift.kind == "matches":
            return None if texts is None else _matches(texts, self.regexes.get(lift.pattern, lift.ignore_case))
        assert lift.needle is not None, f"`contains` lift {lift.column} has no needle"
        needles = self._needles(lift.needle, bound)
        if texts is None or needles is None:
            return None
        if isinstance(needles, str):
            hits = [text is not None and needles in text for text in texts]
            return Column(np.array(hits, dtype=np.uint8), known_mask(texts))
        hits = [text is not None and needle is not None and needle in text for text, needle in zip(texts, needles)]
        return Column(np.array(hits, dtype=np.uint8), known_mask(texts) & known_mask(needles))

    def _needles(self, needle: Needle, bound: Mapping[str, list[Any]]) -> str | list[str | None] | None:
        if needle.kind == "const":
            return needle.value
        if needle.kind == "fact":
            return self.strings(needle.value, ENTITY)
        if needle.value not in bound:
            raise ValueError(f"a `contains` needle names binding `{needle.value}`, which the plan does not bind")
        return self.broadcast([None if v is MISSING else v for v in bound[needle.value]])

    def _located(self, source: str, field: str, bad: BadValue, value: Any) -> Diagnostic:
        offsets = self.state_offsets if source == "state" else self.trans_offsets
        index = int(np.searchsorted(offsets, bad.index, side="right")) - 1
        episode = self.episodes[index]
        message = (f"episode {episode.episode}: field `{field}` of {source} {bad.index - int(offsets[index])}: "
                   f"expected {bad.expected}, got {shown(value)}")
        return episode.where.diagnostic(message)


def _matches(texts: list[str | None], regex: Any) -> Column:
    memo: dict[str, bool] = {}  # texts repeat a lot ("Nothing happens."); search each distinct one once
    hits = []
    for text in texts:
        if text is None:
            hits.append(False)
        elif text in memo:
            hits.append(memo[text])
        else:
            # Searching UTF-8 bytes gives the same answer and skips the wrapper's character-offset bookkeeping.
            hits.append(memo.setdefault(text, regex.search(text.encode("utf-8")) is not None))
    return Column(np.array(hits, dtype=np.uint8), known_mask(texts))
