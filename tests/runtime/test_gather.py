"""The native gatherer (runtime/_gather.c) against the Python definition: every field it takes equals
`piece_reference`, it takes none that the reference rejects, the set steps equal their numpy versions, and a whole
`build_fact_batch` equals its Python path bit for bit -- the same columns, or the same DataError."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from itertools import chain
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.compiler.ir import FactPlan, FieldSource, LiftSource, Needle, SchemaField, entity_id
from tracec.dsl.errors import DataError
from tracec.dsl.types import BOOL, ENTITY, FLOAT, INT, SET, TEXT, Type, enum
from tracec.runtime.facts import columns
from tracec.runtime.facts.columns import (
    BadValue,
    Column,
    Entities,
    Interned,
    Piece,
    native_pieces,
    piece_reference,
    set_column,
    take,
)
from tracec.runtime.facts.fact_batch import FactBatch, build_fact_batch
from tracec.runtime.facts.trajectories.jsonl import Episode

VERB = enum("go", "take", "look", "é")
FIELDS = {"b": BOOL, "i": INT, "f": FLOAT, "v": VERB, "n": ENTITY, "t": TEXT, "s": SET}


class Name(str):
    """A str subclass: the Python path accepts it where a string goes; the native path declines it."""


def _nested(depth: int) -> list[Any]:
    value: list[Any] = [None]
    for _ in range(depth):
        value = [value]
    return value


_STRINGS = st.sampled_from(["a", "mug", "é", "", "日本", "go", "take", "\U0001f600"]) | st.text(max_size=4)
_ODD = st.one_of(
    # Issue 20: nulls below the top, integers far beyond 64 bits, nesting deeper than any JSON line the reader takes.
    st.sampled_from([10**4000, -(10**4000), [[None]], [None, [None]], {"a": None}, [{"a": [None]}], _nested(10_000)]),
    st.sampled_from([math.nan, math.inf, -math.inf, True, False, 2**63, -(2**63) - 1, 2**53 + 1, "\ud800", "run"]),
    st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, 1, 1.0, 0.0, -0.0, 2**53, 2**53 + 1, 2**63]),
    st.floats(), st.sampled_from(["\ud800", "a\udfff", Name("mug"), "look", "run"]),
    st.lists(st.one_of(_STRINGS, st.none(), st.integers(0, 2), st.just("\udc00"), st.just(Name("a"))), max_size=4),
    st.sampled_from([(), {}, ("a",), b"a"]),
)
_GOOD: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.booleans(),
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53),
    "enum": st.sampled_from(VERB.members),
    "entity": _STRINGS,
    "text": _STRINGS,
    "set": st.lists(_STRINGS, max_size=5) | st.lists(st.sampled_from(["a", "b", "a"]), max_size=6),
}
_ABSENT = object()


@st.composite
def _rows(draw: st.DrawFn, schema: dict[str, Type]) -> list[Any]:
    """Rows of some fields: each field is clean (values of its type, None, absent), clean but for one odd value
    (so that each check is met alone), or dirty (anything at all)."""
    strategies, odd_one = {}, []
    for name, type_ in schema.items():
        values = st.one_of(st.just(_ABSENT), st.none(), _GOOD[type_.kind])
        mode = draw(st.sampled_from(["clean", "one", "dirty"]))
        strategies[name] = values | _ODD if mode == "dirty" else values
        odd_one += [name] if mode == "one" else []
    rows = draw(st.lists(st.fixed_dictionaries(strategies), max_size=12))
    for name in odd_one if rows else ():
        rows[draw(st.integers(0, len(rows) - 1))][name] = draw(_ODD)
    return [{k: v for k, v in row.items() if v is not _ABSENT} for row in rows]


def _groups(draw: st.DrawFn, rows: list[Any]) -> list[list[Any]]:
    cuts = sorted(draw(st.lists(st.integers(0, len(rows)), max_size=4)))
    return [rows[lo:hi] for lo, hi in zip([0, *cuts], [*cuts, len(rows)])]


def _tables(schema: dict[str, Type], shared: bool) -> dict[str, Interned | None]:
    entities = Entities()
    return {name: (Interned() if t.kind == "text" else (entities if shared else Entities()) if t.kind in
                   ("entity", "set") else None) for name, t in schema.items()}


def _reference(raw: list[Any], type_: Type, table: Interned | None) -> Piece | tuple[int, str]:
    try:
        return piece_reference(raw, type_, table)
    except BadValue as bad:
        return bad.index, bad.expected


def _decoded(piece: Piece, type_: Type, table: Interned | None) -> tuple[Any, ...]:
    """A piece with its string codes as strings, for tables whose numbering may differ."""
    codes = piece.codes.tolist()
    if table is not None:
        codes = [table.strings[c] if c >= 0 else None for c in codes]
    lengths = None if piece.lengths is None else piece.lengths.tolist()
    return codes, piece.known.tolist(), lengths, str(piece.codes.dtype), str(piece.known.dtype)


def _beyond_float(value: Any) -> bool:
    return type(value) is int and abs(value) > 2**53


def test_the_extension_is_built() -> None:
    assert columns._gather is not None, "tracec.runtime._gather is not built: reinstall with a C compiler"


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_every_field_taken_equals_the_reference(data: st.DataObject) -> None:
    rows = data.draw(_rows(FIELDS))
    groups = _groups(data.draw, rows)
    native_tables, reference_tables = _tables(FIELDS, shared=False), _tables(FIELDS, shared=False)
    taken = native_pieces(groups, FIELDS, native_tables)
    for name, type_ in FIELDS.items():
        raw = [row.get(name) for row in rows]
        expected = _reference(raw, type_, reference_tables[name])
        bad = isinstance(expected, tuple)
        # It takes exactly the fields whose values the reference accepts, but for what is numpy's (or a str
        # subclass's) to decide.
        undecided = any(type(v) is Name or type(v) is list and any(type(e) is Name for e in v) for v in raw)
        undecided |= type_.kind == "float" and any(map(_beyond_float, raw))
        assert (name in taken) == (not bad and not undecided), name
        if name in taken:
            got, want = taken[name], expected
            assert isinstance(want, Piece)
            assert got.codes.dtype == want.codes.dtype and got.codes.tobytes() == want.codes.tobytes(), name
            assert got.known.dtype == want.known.dtype and got.known.tobytes() == want.known.tobytes(), name
            assert (got.lengths is None) == (want.lengths is None), name
            if got.lengths is not None and want.lengths is not None:
                assert got.lengths.tobytes() == want.lengths.tobytes() and got.lengths.dtype == want.lengths.dtype
            table, reference_table = native_tables[name], reference_tables[name]
            if table is not None and reference_table is not None:
                assert table.strings == reference_table.strings, name


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fields_sharing_a_table_number_each_string_once(data: st.DataObject) -> None:
    schema = {"n": ENTITY, "m": ENTITY, "s": SET, "r": SET}
    rows = data.draw(_rows(schema))
    tables = _tables(schema, shared=True)
    entities = tables["n"]
    assert isinstance(entities, Entities)
    entities.add(data.draw(st.lists(_STRINGS, max_size=3)))  # strings the table had already
    before = set(entities.strings)
    taken = native_pieces(_groups(data.draw, rows), schema, tables)
    assert len(set(entities.strings)) == len(entities.strings) == len(entities.ids()) - 1
    assert entities.ids()[:-1].tolist() == [entity_id(s) for s in entities.strings]
    seen = set(before)
    for name, type_ in schema.items():
        if name in taken:
            values = [row.get(name) for row in rows]
            want = _reference(values, type_, Entities())
            assert isinstance(want, Piece)
            flat = list(chain.from_iterable(v or () for v in values)) if type_.kind == "set" else values
            assert _decoded(taken[name], type_, entities)[0] == [s for s in flat], name
            seen |= {s for s in flat if s is not None}
    assert seen <= set(entities.strings)


@pytest.mark.parametrize("rows", [
    [{"n": "a"}, ["not", "a", "dict"]],
    [{"n": "a"}, None],
    [{"n": "a"}, type("Row", (dict,), {})(n="b")],  # a dict subclass could answer lookups its own way
])
def test_a_row_that_is_not_a_plain_dict_declines_the_call(rows: list[Any]) -> None:
    assert native_pieces([rows], {"n": ENTITY}, {"n": Entities()}) == {}


def test_groups_that_are_not_lists_decline_the_call() -> None:
    assert native_pieces([({"n": "a"},)], {"n": ENTITY}, {"n": Entities()}) == {}


def test_more_fields_than_a_row_has() -> None:
    schema = {f"x{i}": INT for i in range(70)}
    taken = native_pieces([[{"x3": 5}, {"x69": -1}]], schema, dict.fromkeys(schema))
    assert taken["x3"].codes.tolist() == [5, 0] and taken["x3"].known.tolist() == [1, 0]
    assert taken["x69"].codes.tolist() == [0, -1] and taken["x0"].known.tolist() == [0, 0]


# --- the set steps ----------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", "c", "mug", "é", "", "z" * 20]), max_size=20), max_size=12),
       st.data())
def test_set_rows_sort_and_take_as_numpy_does(rows: list[list[str]], data: st.DataObject) -> None:
    entities = Entities()
    entities.add(chain.from_iterable(rows))
    codes = np.array([entities.codes[e] for row in rows for e in row], dtype=np.int64)
    lengths = np.array(list(map(len, rows)), dtype=np.int64)
    known = np.array([len(row) % 2 for row in rows], dtype=np.uint8)
    native, numpy = set_column(codes, lengths, known, entities), set_column(codes, lengths, known, entities, False)
    _same(native, numpy)
    chosen = st.lists(st.integers(0, len(rows) - 1), max_size=15) if rows else st.just([])
    picked = np.array(data.draw(chosen), dtype=np.int64)
    _same(take(native, picked), take(numpy, picked, native=False))


def test_take_rejects_rows_out_of_range() -> None:
    column = Column(np.array([1, 2], dtype=np.int64), np.ones(1, dtype=np.uint8), np.array([0, 2], dtype=np.int64))
    with pytest.raises(IndexError):
        take(column, np.array([1], dtype=np.int64))


def _same(got: Column, want: Column) -> None:
    for part in ("values", "known", "offsets"):
        a, b = getattr(got, part), getattr(want, part)
        assert (a is None) == (b is None), part
        if a is not None:
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), part


# --- whole batches ----------------------------------------------------------------------------------------------

STATE = {"loc": ENTITY, "seen": SET, "lit": BOOL, "temp": FLOAT, "note": TEXT}
ACTION = {"verb": VERB, "obj": ENTITY, "n": INT, "ok": BOOL}


def _plan() -> FactPlan:
    sources = [FieldSource(f"{side}.{name}", side, name, t) for side in ("prev", "next") for name, t in STATE.items()
               if t.kind != "text"]
    sources += [FieldSource(f"act.{name}", "act", name, t) for name, t in ACTION.items()]
    lifts = (LiftSource("lift.0", "contains", "next.note", Needle("const", "a")),
             LiftSource("lift.1", "contains", "prev.note", Needle("fact", "act.obj")))
    declared = tuple(SchemaField(part, name, t) for part, schema in (("state", STATE), ("action", ACTION))
                     for name, t in schema.items())
    return FactPlan(tuple(sources), (), lifts, declared)


@st.composite
def _episodes(draw: st.DrawFn) -> list[Episode]:
    states, actions = draw(_rows(STATE)), draw(_rows(ACTION))
    if draw(st.integers(0, 9)) == 0:  # now and then a state that is not an object
        states.insert(draw(st.integers(0, len(states))), draw(st.sampled_from([[], "s", None, 3])))
    episodes = []
    while states:
        n = min(draw(st.integers(0, 4)), len(states) - 1)
        mine, states = states[:n + 1], states[n + 1:]
        acts = [actions.pop() if actions else {} for _ in range(n)]
        episodes.append(Episode(f"e{len(episodes)}", "t", "put a mug", mine, acts, 0.0, None))
    return episodes


def _outcome(episodes: list[Episode], native: bool) -> FactBatch | str:
    try:
        return build_fact_batch(episodes, _plan(), native=native)
    except DataError as error:
        return str(error)


@settings(max_examples=300, deadline=None)
@given(_episodes())
def test_a_batch_equals_its_python_path_bit_for_bit(episodes: list[Episode]) -> None:
    native, python = _outcome(episodes, native=True), _outcome(episodes, native=False)
    if isinstance(python, str):
        assert native == python
        return
    assert isinstance(native, FactBatch)
    assert native.columns.keys() == python.columns.keys()
    for name in python.columns:
        _same(native.columns[name], python.columns[name])
    assert dict(native.entity_names) == dict(python.entity_names)
    assert native.n_transitions == python.n_transitions
    assert native.episode_offsets.tobytes() == python.episode_offsets.tobytes()


def test_without_the_extension_the_python_path_builds_the_same_batch() -> None:
    """A process in which `_gather` cannot be imported (as where no C compiler built it) builds the same batch."""
    script = textwrap.dedent("""
        import sys
        sys.modules["tracec.runtime._gather"] = None  # what an install without a compiler leaves: no module
        from tracec.runtime.facts import columns
        from tracec.runtime.facts.fact_batch import build_fact_batch
        from tracec.runtime.facts.trajectories.jsonl import Episode
        from tracec.dsl.types import ENTITY, SET, INT
        from tracec.compiler.ir import FactPlan, FieldSource
        assert columns._gather is None
        states = [{"loc": "b", "seen": ["y", "x", "y"], "n": 1}, {"loc": "a", "seen": []}, {"seen": ["x"], "n": 2}]
        plan = FactPlan(tuple(FieldSource(f"{s}.{f}", s, f, t) for s in ("prev", "next")
                              for f, t in (("loc", ENTITY), ("seen", SET), ("n", INT))), (), ())
        batch = build_fact_batch([Episode("e", "t", "", states, [{}, {}], 0.0, None)], plan)
        print(repr({k: (c.values.tolist(), c.known.tolist(), None if c.offsets is None else c.offsets.tolist())
                    for k, c in sorted(batch.columns.items())}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    states = [{"loc": "b", "seen": ["y", "x", "y"], "n": 1}, {"loc": "a", "seen": []}, {"seen": ["x"], "n": 2}]
    plan = FactPlan(tuple(FieldSource(f"{s}.{f}", s, f, t) for s in ("prev", "next")
                          for f, t in (("loc", ENTITY), ("seen", SET), ("n", INT))), (), ())
    batch = build_fact_batch([Episode("e", "t", "", states, [{}, {}], 0.0, None)], plan)
    here = {k: (c.values.tolist(), c.known.tolist(), None if c.offsets is None else c.offsets.tolist())
            for k, c in sorted(batch.columns.items())}
    assert out.strip() == repr(here)
