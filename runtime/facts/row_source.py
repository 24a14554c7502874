"""What the fact builder reads trajectories through: the `RowSource` protocol, the `Layout` of a batch's
transitions and states, and what every row source shares (`plan_fields`: the fields a plan reads; `test_texts`).

`fact_batch.assemble` builds a `FactBatch` from any `RowSource`; there are two, over in-memory episodes
(`episode_rows`) and over Arrow tables (`trajectories.table`), both keeping what
they encoded in an `EncodedFields` (one rule for reading a field back, testing a text field, and its raw strings).
A row source gives each
field encoded over all states (or all actions) of the batch, episodes end to end; `Layout` says where each
episode's rows lie and which state row each transition reads (`SIDES`: `prev` and `next` read states, `act` the
action).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from tracec.compiler.ir import FactPlan
from tracec.dsl.errors import Diagnostic
from tracec.dsl.types import ENTITY, TEXT, Type
from tracec.runtime.facts.columns import Column, Entities, Interned

SIDES = {"prev": "state", "next": "state", "act": "action"}


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


class EncodedFields:
    """The fields a row source encoded, by (source, field), and what `RowSource` reads of them."""

    def __init__(self) -> None:
        self.entities = Entities()
        self._texts: dict[tuple[str, str], Interned] = {}  # a text field's strings, by code
        self._columns: dict[tuple[str, str], tuple[Type, Column | None]] = {}

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


def plan_fields(plan: FactPlan) -> dict[str, dict[str, Type]]:
    """The fields the plan reads and their types, by source ("state", "action"): fields, lifted texts, needles,
    and every other field the schema declares (checked, never read)."""
    needed: dict[str, dict[str, Type]] = {"state": {}, "action": {}}
    for source in plan.fields:
        needed[SIDES[source.side]][source.field] = source.type
    facts = [(lift.text, TEXT) for lift in plan.lifts]
    facts += [(lift.needle.value, ENTITY) for lift in plan.lifts
              if lift.needle is not None and lift.needle.kind == "fact"]
    for fact, type_ in facts:
        if fact != "instruction":
            side, field = fact.split(".", 1)
            needed[SIDES[side]].setdefault(field, type_)
    for declared in plan.declared:  # a wrongly typed field is an error whether or not a kernel reads it
        needed[declared.part].setdefault(declared.field, declared.type)
    return needed


def test_texts(column: Column, texts: Interned, test: Callable[[str], bool]) -> Column:
    """`test` of each row of a text column (codes into `texts`), run once per distinct string."""
    results = np.array([test(text) for text in texts.strings] + [False], dtype=np.uint8)
    return Column(results[column.values], column.known)
