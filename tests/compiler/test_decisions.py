"""The decisions docs/language.md records where the specification is silent, each from source text to what the fact
builder and every backend make of it: what a binding gives for matched text that is no value of its type, what a set
literal holding facts gives when one is unknown, and which fact values are refused (NaN and infinities, a wrongly
typed field that no operator reads)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tracec.compiler import interp, numba_backend
from tracec.compiler.backends import compile_kernel
from tracec.compiler.load import load_rubric
from tracec.dsl.errors import DataError
from tracec.runtime.facts.fact_batch import build_fact_batch
from tracec.runtime.facts.trajectories.jsonl import read_trajectories

SCHEMA = """schema s {
  state { g: int  x: float  room: entity  note: text }
  action { a: bool  obj: entity  other: entity }
}
"""


def episode(name: str, instruction: str = "", state: dict | None = None, action: dict | None = None) -> dict:
    state = {"g": 1, "x": 0.5, "room": "hall"} if state is None else state
    return {"episode": name, "instruction": instruction, "states": [state, state],
            "actions": [action or {"a": True, "obj": "mug", "other": "cup"}], "env_reward": 0.0}


def write(tmp_path, episodes: list[dict]) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    return str(path)


# --- bindings ---------------------------------------------------------------------------------------------------

BINDINGS = SCHEMA + """rubric r for s {
  bind n: int = match(instruction, /n=(\\S+)/, 1)
  bind f: float = match(instruction, /n=(\\S+)/, 1)
  evidence known_n "": n == n
  evidence known_f "": f == f
}
"""


@pytest.mark.parametrize("text, n_known, f_known", [
    ("n=12", True, True), ("n=-3", True, True), ("n=2.5", False, True),
    ("n=inf", False, False), ("n=-inf", False, False), ("n=nan", False, False), ("n=NaN", False, False),
    ("n=1e999", False, False), ("n=9223372036854775807", True, True), ("n=9223372036854775808", False, True),
    ("n=-9223372036854775809", False, True), ("n=" + "9" * 5000, False, False), ("no number", False, False),
])
def test_a_binding_whose_text_is_no_value_of_its_type_is_missing(tmp_path, text, n_known, f_known):
    compiled = load_rubric(BINDINGS, "b.rubric")
    batch = build_fact_batch(read_trajectories(write(tmp_path, [episode("e", text)])), compiled.plan)
    assert (bool(batch.columns["bind.n"].known[0]), bool(batch.columns["bind.f"].known[0])) == (n_known, f_known)
    fired, _ = interp.run(compiled.program, batch.columns, batch.n_transitions)
    assert fired.tolist() == [[int(n_known), int(f_known)]]
    if f_known:
        assert np.isfinite(batch.columns["bind.f"].values[0])


# --- set literals holding facts ---------------------------------------------------------------------------------

SETS = SCHEMA + """rubric r for s {
  evidence hit "": act.obj in {"mug", act.other}
  evidence miss "": not (act.obj in {"lamp", act.other})
  evidence empty "": not (act.obj in {})
  evidence facts "": next.room in {prev.room, act.other}
}
"""


def test_a_set_literal_holding_facts_is_an_or_of_equalities(tmp_path):
    """`x in {a, act.b}` is `x == a or x == act.b` (Kleene): an unknown item makes it unknown only where no other
    item matches; `x in {}` is false."""
    compiled = load_rubric(SETS, "s.rubric")
    rows = [
        {"a": True, "obj": "mug"},  # other missing: "mug" matches anyway -> hit; miss is unknown
        {"a": True, "obj": "cup", "other": "cup"},  # the fact matches: hit true, miss false
        {"a": True, "obj": "pen", "other": "cup"},  # neither matches: hit false, miss true
    ]
    episodes = [episode(f"e{i}", action=row) for i, row in enumerate(rows)]
    # room missing: `facts` unknown; other missing and no match: `miss` unknown
    episodes.append(episode("e3", state={"g": 1}, action={"a": True, "obj": "x"}))
    batch = build_fact_batch(read_trajectories(write(tmp_path, episodes)), compiled.plan)
    expected = [[1, 0, 1, 1], [1, 0, 1, 1], [0, 1, 1, 1], [0, 0, 1, 0]]
    for backend in ("interp", "numba", "c"):
        fired, _ = compile_kernel(compiled.program, backend, None).run(batch.columns, batch.n_transitions)
        assert fired.tolist() == expected, backend
    np.testing.assert_array_equal(numba_backend.run_unjitted(compiled.program, batch.columns, 4)[0], expected)


# --- fact values that are refused --------------------------------------------------------------------------------

READS_X = SCHEMA + 'rubric r for s {\n  evidence e "": next.x > 0.0\n}\n'
READS_NOTHING = SCHEMA + 'rubric r for s {\n  evidence e "": act.a\n}\n'


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_nan_or_infinite_fact_is_refused_with_its_location(tmp_path, value):
    lines = [json.dumps(episode("e0")), json.dumps(episode("e1")).replace('"x": 0.5', f'"x": {value}')]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for text in (READS_X, READS_NOTHING):  # whether or not an operator reads it
        with pytest.raises(DataError) as caught:
            build_fact_batch(read_trajectories(path), load_rubric(text, "r.rubric").plan)
        (diagnostic,) = caught.value.diagnostics
        assert diagnostic.loc.line == 2 and diagnostic.path == str(path)
        assert "episode e1: field `x` of state 0: expected a finite number" in diagnostic.message


@pytest.mark.parametrize("field, value, expected", [
    ("g", "3", "an integer"), ("g", 2**64, "a 64-bit integer"), ("room", 5, "a string"), ("note", ["a"], "a string"),
])
def test_a_wrongly_typed_field_is_an_error_even_where_no_operator_reads_it(tmp_path, field, value, expected):
    bad = episode("e0", state={"g": 1, "x": 0.5, "room": "hall", "note": "ok", field: value})
    compiled = load_rubric(READS_NOTHING, "r.rubric")
    assert {f.field for f in compiled.plan.fields} == {"a"}
    with pytest.raises(DataError) as caught:
        build_fact_batch(read_trajectories(write(tmp_path, [bad])), compiled.plan)
    assert f"field `{field}` of state 0: expected {expected}" in caught.value.diagnostics[0].message


def test_fields_outside_the_schema_are_still_ignored(tmp_path):
    compiled = load_rubric(READS_NOTHING, "r.rubric")
    odd = episode("e0", state={"g": 1, "unknown": [1, {"deep": None}]})
    batch = build_fact_batch(read_trajectories(write(tmp_path, [odd])), compiled.plan)
    assert set(batch.columns) == {"act.a"}


# --- three-valued logic: one definition, every evaluator -------------------------------------------------------

LOGIC = SCHEMA.replace("action { a: bool", "action { a: bool  b: bool") + """rubric r for s {
  evidence and_t "": act.a and act.b
  evidence and_f "": not (act.a and act.b)
  evidence or_t "": act.a or act.b
  evidence or_f "": not (act.a or act.b)
  evidence not_t "": not act.a
  evidence not_f "": not (not act.a)
}
"""
TRUTHS = [True, False, None]


def test_kleene_logic_has_one_definition_that_every_evaluator_follows():
    """`compiler/values.py` defines and / or / not over true, false and unknown; the interpreter, the generated
    kernels (two flags per bool) and the environment evaluator give its table on all nine pairs."""
    from tracec.compiler import values as V
    from tracec.dsl.parse import parse_expr
    from tracec.runtime.facts.fact_batch import Column
    from tracec.trace_rl.envs.capability.expr import Names, compile_expr

    pairs = [(a, b) for a in TRUTHS for b in TRUTHS]
    program = load_rubric(LOGIC, "logic.rubric").program
    columns = {name: Column(np.array([bool(p[i]) for p in pairs], np.uint8),
                            np.array([p[i] is not None for p in pairs], np.uint8))
               for i, name in ((0, "act.a"), (1, "act.b"))}
    definition = [(V.kleene_and(a, b), V.kleene_or(a, b), V.kleene_not(a)) for a, b in pairs]
    expected = [[int(x is True), int(x is False)] for row in definition for x in row]
    expected = np.array(expected, dtype=np.uint8).reshape(len(pairs), 6)
    for backend in ("interp", "numba", "c"):
        fired, _ = compile_kernel(program, backend, None).run(columns, len(pairs))
        np.testing.assert_array_equal(fired, expected, err_msg=backend)
    np.testing.assert_array_equal(numba_backend.run_unjitted(program, columns, len(pairs))[0], expected)
    names = Names(columns=frozenset({"a", "b"}))
    for (a, b), (conj, disj, neg) in zip(pairs, definition):
        row = {"a": a, "b": b}
        got = [compile_expr(parse_expr(text), names)(row, None) for text in ("a and b", "a or b", "not a")]
        assert got == [conj, disj, neg], (a, b)
