"""The fact builder: episodes + a `FactPlan` -> `FactBatch`, the numeric columns a compiled rubric reads.

Every column has one row per transition (episodes end to end, delimited by `episode_offsets`) and a `known` mask:
a fact that is absent or null is missing (LANGUAGE.md, "Missing facts"); `tracec.runtime.columns` says how each type
is encoded. Text never becomes a column: the compiler lifts `contains` / `matches` to bool columns "lift.K" that are
computed here, and bindings ("bind.NAME") are evaluated once per episode from its instruction and broadcast to its
transitions.

Speed: a field is gathered once over all states (prev and next share it) into a Python list and encoded as one
array. Every bad field is reported, each at its first bad value, in one DataError.
A field or binding of type text makes no column (a lift reads it). Errors read
`file:line:1: error: episode ID: field `f` of state 2: expected a list of strings, got 5` (0-based positions in
`states` / `actions`). Left out: fields that are not in the plan (never read), nested objects, sets of anything but
entities, and entity-id collisions (64-bit hashes; not checked).
"""

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
from tracec.runtime.columns import INT64_RANGE, BadValue, Column, encode, known_mask, take
from tracec.runtime.trajectories import Episode, check_shape, shown


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
    for declared in plan.declared:  # a wrongly typed field is an error whether or not a kernel reads it
        reader.encoded(declared.part, declared.field, declared.type)
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
