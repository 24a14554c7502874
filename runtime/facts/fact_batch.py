"""The fact builder: trajectories + a `FactPlan` -> `FactBatch`, the numeric columns a compiled rubric reads.

Every column has one row per transition (episodes end to end, delimited by `episode_offsets`) and a `known` mask:
a fact that is absent or null is missing (LANGUAGE.md, "Missing facts"); `columns` says how each type
is encoded. Text never becomes a column: the compiler lifts `contains` / `matches` to bool columns "lift.K" that are
computed here, and bindings ("bind.NAME", `bindings`) are evaluated once per episode from its
instruction and broadcast to its transitions.

`assemble` builds a batch from a `RowSource` (`row_source`), which gives each field encoded over all
states (or all actions) of the batch: `episode_rows.EpisodeRows` over in-memory `Episode`s
(`build_fact_batch`), and `trajectories.table` over Arrow columns, so both paths share everything
else. Work is per field and per distinct value, not per step: a field is read from every state once (prev and next
share it; `take` gathers the transitions), a lifted predicate is computed once per distinct text, a binding once per
distinct instruction.

Errors: every bad field is reported, each at its first bad value, in one DataError, as `file:line:1: error: episode
ID: field `f` of state 2: expected a list of strings, got 5` (0-based positions in `states` / `actions`). Left out:
fields that are not in the plan (never read), nested objects, sets of anything but entities, entity-id collisions
(64-bit hashes; not checked).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any

import numpy as np
from tracec.compiler.ir import FactPlan, LiftSource, Needle, Node
from tracec.dsl.errors import DataError
from tracec.dsl.types import ENTITY, TEXT, Type
from tracec.runtime.facts.bindings import MISSING, Regexes, convert, evaluate_binding
from tracec.runtime.facts.columns import Column, take
from tracec.runtime.facts.episode_rows import EpisodeRows
from tracec.runtime.facts.row_source import SIDES, RowSource
from tracec.runtime.facts.trajectories.jsonl import Episode


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
