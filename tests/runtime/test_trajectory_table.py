"""Every input path gives the same results bit for bit: trajectories as JSONL, as Parquet, as Arrow IPC, as episodes
in memory, and as a FactBatch; and malformed tables are located errors that write nothing."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.cli import main
from tracec.dsl.errors import DataError
from tracec.runtime.facts.trajectories.files import convert_trajectories, read_facts
from tracec.runtime.facts.trajectories.jsonl import read_trajectories
from tracec.runtime.output import write_scores
from tracec.runtime.scoring import RubricScorer

RUBRIC = """
schema room {
  state  { place: entity  items: set(entity)  door: enum(open, closed)  lit: bool  n: int  heat: float  note: text }
  action { verb: enum(go, take, look)  obj: entity  ok: bool  cost: float }
}
rubric tidy for room {
  bind target: entity = match(instruction, /get (\\S+)/, 1)
  evidence   sees    "target comes into view":   target in next.items and not (target in prev.items)
  evidence   moves   "changes place":            changed(place) and count(next.items) >= 1
  execution  takes   "takes the target":         act.verb == take and act.obj == target
  execution  warm    "warm and busy":            next.heat > 1.5 and next.n >= 2 and next.door == open
  invalidity broken  "a failed action":          not act.ok or act.cost > 2.5
  invalidity noop    "the game says nothing":    contains(next.note, "nothing") or matches(next.note, /dark/i)
  invalidity unlit   "acts in the dark":         not prev.lit and act.verb != look
  context prev.place, prev.items
}
"""

ENTITIES = ["mug", "Mug", "café", "日本", "a b", "", "x" * 40, "🙂"]
_ABSENT = object()


def _maybe(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(_ABSENT), st.none(), values)


_STATE = {
    "place": st.sampled_from(ENTITIES),
    "items": st.lists(st.sampled_from(ENTITIES), max_size=4),  # empty sets, repeats
    "door": st.sampled_from(["open", "closed"]),
    "lit": st.booleans(),
    "n": st.integers(-(2**63), 2**63 - 1),
    "heat": st.floats(-1e300, 1e300, allow_nan=False) | st.integers(-(2**60), 2**60),
    "note": st.sampled_from(["nothing here", "It is DARK.", "ok", "", "naïve"]),
}
_ACTION = {
    "verb": st.sampled_from(["go", "take", "look"]),
    "obj": st.sampled_from(ENTITIES),
    "ok": st.booleans(),
    "cost": st.floats(0, 5, allow_nan=False),
}


def _row(schema: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    facts = st.fixed_dictionaries({name: _maybe(values) for name, values in schema.items()})
    return facts.map(lambda row: {k: v for k, v in row.items() if v is not _ABSENT})


@st.composite
def episodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    # One fact known somewhere, or a file is refused for sharing no field with the rubric (tested below).
    out: list[dict[str, Any]] = [{"episode": "base", "states": [{"place": "hall"}, {}], "actions": [{}]}]
    for i in range(draw(st.integers(0, 5))):
        n = draw(st.integers(0, 4))  # 0: an empty episode (one state, no action)
        record: dict[str, Any] = {
            "episode": f"e{i}-{draw(st.sampled_from(ENTITIES))}",
            "states": draw(st.lists(_row(_STATE), min_size=n + 1, max_size=n + 1)),
            "actions": draw(st.lists(_row(_ACTION), min_size=n, max_size=n)),
        }
        if draw(st.booleans()):
            record["task"] = draw(st.sampled_from(["t1", "t2"]))
        if draw(st.booleans()):
            record["instruction"] = f"get {draw(st.sampled_from(ENTITIES))}"
        if draw(st.booleans()):
            record["env_reward"] = draw(st.sampled_from([0, 1, 0.5, -2.25]))
        if draw(st.booleans()):
            record["success"] = draw(st.booleans())
        out.append(record)
    return out


@pytest.fixture(scope="module")
def scorer() -> RubricScorer:
    return RubricScorer.from_source(RUBRIC, backend="numba")


def _same(a: Any, b: Any) -> None:
    np.testing.assert_array_equal(a.fired, b.fired)
    assert (a.context_key is None) == (b.context_key is None)
    if a.context_key is not None:
        np.testing.assert_array_equal(a.context_key, b.context_key)
    for name in ("r_F", "r_B", "r_TRCA", "R", "A_E", "A_S", "A"):
        x, y = getattr(a.rewards, name), getattr(b.rewards, name)
        assert x.tobytes() == y.tobytes(), name  # bit for bit, -0.0 included
    assert a.batch.episodes == b.batch.episodes and a.batch.tasks == b.batch.tasks


@settings(max_examples=40, deadline=None)
@given(episodes())
def test_every_input_path_gives_identical_results(scorer: RubricScorer, records: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        jsonl = Path(folder) / "t.jsonl"
        jsonl.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        reference = scorer.score(jsonl)
        in_memory = read_trajectories(jsonl)
        results = [scorer.score(in_memory), scorer.score(scorer.fact_batch(in_memory))]
        for suffix in (".parquet", ".arrow"):
            table = Path(folder) / f"t{suffix}"
            convert_trajectories(jsonl, table)
            results.append(scorer.score(table))
            back = Path(folder) / f"back{suffix}.jsonl"
            convert_trajectories(table, back)
            results.append(scorer.score(back))
        for result in results:
            _same(reference, result)
        outputs = []
        for i, result in enumerate([reference, *results]):
            for suffix in (".jsonl", ".parquet"):
                out = Path(folder) / f"out{i}{suffix}"
                write_scores(result, out)
                outputs.append(out)
        jsonl_text = outputs[0].read_bytes()
        parquet_rows = pq.read_table(outputs[1]).to_pylist()
        assert [json.loads(line) for line in jsonl_text.splitlines()] == parquet_rows
        for out in outputs[2:]:
            if out.suffix == ".jsonl":
                assert out.read_bytes() == jsonl_text
            else:
                assert pq.read_table(out).equals(pq.read_table(outputs[1]))


# --- malformed tables ------------------------------------------------------------------------------------------


def _table(**overrides: Any) -> pa.Table:
    columns: dict[str, Any] = {
        "episode": pa.array(["a", "b"]),
        "task": pa.array(["t", "t"]),
        "states": pa.array([[{"place": "hall", "items": ["mug"]}, {"place": "yard", "items": []}],
                            [{"place": "hall", "items": None}]]),
        "actions": pa.array([[{"verb": "go", "obj": "yard", "ok": True}], []]),
        "env_reward": pa.array([1.0, 0.0]),
    }
    columns.update(overrides)
    return pa.table({k: v for k, v in columns.items() if v is not None})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"episode": None}, "error: `episode` must be a column of strings (the episode ids), got no such column"),
        ({"states": None}, "error: `states` must be a column of lists of structs, got no such column"),
        ({"episode": pa.array([1, 2])},
         "error: `episode` must be a column of strings (the episode ids), got a column of int64"),
        ({"episode": pa.array(["a", None])}, "error: row 2: missing `episode` (a string)"),
        ({"episode": pa.array(["a", "a"])},
         "error: row 2: episode a: this id is already used, row 1; ids must be unique"),
        ({"actions": pa.array([[{"verb": "go"}], None])},
         "error: row 2: episode b: missing `actions` (a list of objects)"),
        ({"states": pa.array([[{"place": "hall"}, None], [{"place": "x"}]])},
         "error: row 1: episode a: state 1 must be an object, got null"),
        ({"actions": pa.array([[], []])},
         "error: row 1: episode a: `states` must have one more element than `actions`, got 2 states and 0 actions"),
        ({"states": pa.array([[{"place": 3}, {"place": 7}], [{"place": None}]])},
         "error: row 1: episode a: field `place` of state 0: expected a string, got 3 (a column of int64)"),
        ({"actions": pa.array([[{"verb": "fly"}], []])},
         'error: row 1: episode a: field `verb` of action 0: expected a member of enum(go, take, look), got "fly"'),
        ({"actions": pa.array([[{"ok": 1}], []])},
         "error: row 1: episode a: field `ok` of action 0: expected true or false, got 1 (a column of int64)"),
        ({"states": pa.array([[{"items": ["mug"]}, {"items": ["a", None]}], [{}]])},
         "error: row 1: episode a: field `items` of state 1: expected a list of strings, got [\"a\", null]"),
        ({"states": pa.array([[{"heat": 1.0}, {"heat": float("nan")}], [{}]])},
         "error: row 1: episode a: field `heat` of state 1: expected a finite number, got NaN"),
        ({"env_reward": pa.array(["1", "0"])},
         "error: `env_reward` must be a column of numbers, got a column of string"),
    ],
)
def test_a_malformed_table_is_a_located_error_and_eval_writes_nothing(tmp_path: Path, overrides: dict[str, Any],
                                                                      message: str, capsys: pytest.CaptureFixture[str]
                                                                      ) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(_table(**overrides), path)
    rubric = tmp_path / "r.rubric"
    rubric.write_text(RUBRIC)
    with pytest.raises(DataError) as caught:
        RubricScorer.from_file(rubric).score(path)
    assert str(caught.value) == f"{path}: {message}"
    out = tmp_path / "out.parquet"
    assert main(["score", str(rubric), "--trajectories", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_well_formed_table_scores_like_its_jsonl(tmp_path: Path, scorer: RubricScorer) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(_table(), path)
    jsonl = tmp_path / "t.jsonl"
    assert convert_trajectories(path, jsonl) == 2
    assert [json.loads(line)["states"][1] for line in jsonl.read_text().splitlines()[:1]] == [
        {"place": "yard", "items": []}]  # nulls left out, empty sets kept
    _same(scorer.score(path), scorer.score(jsonl))


def test_a_table_sharing_no_field_with_the_rubric_is_an_error(tmp_path: Path, scorer: RubricScorer) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(_table(states=pa.array([[{"where": "x"}, {"where": "y"}], [{"where": "z"}]]),
                          actions=pa.array([[{"do": "go"}], []])), path)
    with pytest.raises(DataError) as caught:
        read_facts(path, scorer.compiled.plan)
    assert str(caught.value) == (
        f"{path}: error: no state or action has a value for any field the rubric reads (states: door, heat, items, "
        "lit, n, note, place; actions: cost, obj, ok, verb); this file's states have: where; its actions: do")


def test_convert_refuses_a_field_of_two_types_with_its_line(tmp_path: Path) -> None:
    jsonl = tmp_path / "t.jsonl"
    lines = [{"episode": "a", "states": [{"n": 1}], "actions": []},
             {"episode": "b", "states": [{"n": "x"}], "actions": []}]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(DataError) as caught:
        convert_trajectories(jsonl, tmp_path / "t.parquet")
    assert str(caught.value) == (f"{jsonl}:2:1: error: episode b: cannot convert field `n` of state 0: a Parquet "
                                 'column has one type, and this value is string where earlier ones are int64 (got "x")')
    assert not (tmp_path / "t.parquet").exists()


def test_convert_cli_by_suffix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(json.dumps({"episode": "a", "states": [{"place": "日本"}, {}], "actions": [{}]}) + "\n")
    assert main(["convert", str(jsonl), "-o", str(tmp_path / "t.arrow")]) == 0
    assert main(["convert", str(tmp_path / "t.arrow"), "-o", str(tmp_path / "t.parquet")]) == 0
    assert main(["convert", str(tmp_path / "t.parquet"), "-o", str(tmp_path / "back.jsonl")]) == 0
    assert json.loads((tmp_path / "back.jsonl").read_text()) == {
        "episode": "a", "task": "a", "instruction": "", "states": [{"place": "日本"}, {}], "actions": [{}],
        "env_reward": 0.0}
    assert main(["convert", str(jsonl), "-o", str(tmp_path / "t.csv")]) == 2
    assert "must end in .jsonl or .parquet or .arrow" in capsys.readouterr().err
