"""The fact builder: JSONL trajectories + a hand-built FactPlan -> FactBatch columns, checked value by value; every
data error with its exact message; a random round trip; and the reference interpreter run on a built batch."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.compiler.interp import run
from tracec.compiler.ir import (
    BindSource,
    ColumnSpec,
    FactPlan,
    FieldSource,
    KernelProgram,
    LiftSource,
    Needle,
    Node,
    entity_id,
)
from tracec.dsl.errors import DataError
from tracec.dsl.types import BOOL, ENTITY, FLOAT, INT, SET, TEXT, Type, enum
from tracec.runtime.facts.bindings import MISSING, convert, evaluate_binding
from tracec.runtime.facts.fact_batch import Column, FactBatch, build_fact_batch
from tracec.runtime.facts.trajectories.jsonl import Episode, read_trajectories

VERB = enum("go", "take", "put", "open", "look")
DOOR = enum("open", "closed")
STATE = {"location": ENTITY, "visible": SET, "door": DOOR, "temp": FLOAT, "steps": INT, "lit": BOOL}
ACTION = {"verb": VERB, "obj": ENTITY, "parsed": BOOL, "n": INT, "cost": FLOAT}
INSTRUCTION = Node("instruction", (), TEXT)


# --- helpers ---------------------------------------------------------------------------------------------------


def write(tmp_path: Path, *lines: dict[str, Any] | str) -> Path:
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def record(name: str, states: list[Any], actions: list[Any], **extra: Any) -> dict[str, Any]:
    return {"episode": name, "instruction": "", "states": states, "actions": actions, **extra}


def fields(**schema: Type) -> tuple[FieldSource, ...]:
    """FieldSources for "side_field=type" keywords, e.g. prev_location=ENTITY, act_verb=VERB."""
    out = []
    for key, type_ in schema.items():
        side, name = key.split("_", 1)
        out.append(FieldSource(f"{side}.{name}", side, name, type_))
    return tuple(out)


def plan(fields: tuple[FieldSource, ...] = (), binds: tuple[BindSource, ...] = (),
         lifts: tuple[LiftSource, ...] = ()) -> FactPlan:
    return FactPlan(fields, binds, lifts)


def load(path: Path, fact_plan: FactPlan) -> FactBatch:
    return build_fact_batch(read_trajectories(path), fact_plan)


def scalars(column: Column) -> list[Any]:
    """Values where known, None where missing."""
    return [v if k else None for v, k in zip(column.values.tolist(), column.known.tolist())]


def rows(column: Column) -> list[list[int] | None]:
    assert column.offsets is not None
    return [column.values[a:b].tolist() if k else None
            for a, b, k in zip(column.offsets[:-1], column.offsets[1:], column.known)]


def match(pattern: str, group: int = 1, ignore_case: bool = False, text: Node = INSTRUCTION) -> Node:
    return Node("match", (text,), ENTITY, (pattern, ignore_case, group))


def data_error(path: Path, fact_plan: FactPlan | None = None) -> str:
    with pytest.raises(DataError) as caught:
        load(path, fact_plan or plan())
    return str(caught.value)


# --- encodings -------------------------------------------------------------------------------------------------


def test_every_type_is_encoded_per_transition(tmp_path: Path) -> None:
    states = [
        {"location": "kitchen", "visible": ["mug"], "door": "closed", "temp": 1.5, "steps": 3, "lit": True},
        {"location": "hall", "visible": [], "door": "open", "temp": 2, "steps": -4, "lit": False},
        {"location": "kitchen", "visible": ["cup", "mug"], "door": "open", "temp": -0.25, "steps": 0, "lit": True},
    ]
    actions = [{"verb": "go", "obj": "hall", "parsed": True, "n": 7, "cost": 0.5},
               {"verb": "look", "obj": "mug", "parsed": False, "n": 2**62, "cost": 3}]
    state_plan = {f"{side}_{name}": t for side in ("prev", "next") for name, t in STATE.items()}
    batch = load(write(tmp_path, record("e1", states, actions)),
                 plan(fields(**state_plan, **{f"act_{name}": t for name, t in ACTION.items()})))
    c = batch.columns
    assert batch.n_transitions == 2
    assert c["prev.location"].values.tolist() == [entity_id("kitchen"), entity_id("hall")]
    assert c["next.location"].values.tolist() == [entity_id("hall"), entity_id("kitchen")]
    assert rows(c["prev.visible"]) == [[entity_id("mug")], []]
    assert rows(c["next.visible"]) == [[], sorted([entity_id("cup"), entity_id("mug")])]
    assert c["prev.door"].values.tolist() == [1, 0] and c["next.door"].values.tolist() == [0, 0]
    assert c["prev.temp"].values.tolist() == [1.5, 2.0] and c["next.temp"].values.tolist() == [2.0, -0.25]
    assert c["prev.steps"].values.tolist() == [3, -4] and c["next.lit"].values.tolist() == [0, 1]
    assert c["act.verb"].values.tolist() == [0, 4]
    assert c["act.obj"].values.tolist() == [entity_id("hall"), entity_id("mug")]
    assert c["act.parsed"].values.tolist() == [1, 0]
    assert c["act.n"].values.tolist() == [7, 2**62]
    assert c["act.cost"].values.tolist() == [0.5, 3.0]
    expected = {"bool": np.uint8, "int": np.int64, "float": np.float64, "enum": np.int64, "entity": np.int64,
                "set": np.int64}
    for source in state_plan:
        side, name = source.split("_", 1)
        column = c[f"{side}.{name}"]
        assert column.values.dtype == expected[STATE[name].kind] and column.known.dtype == np.uint8
        assert column.known.tolist() == [1, 1]
    assert c["prev.visible"].offsets is not None and c["prev.visible"].offsets.dtype == np.int64
    assert c["prev.location"].offsets is None
    assert batch.entity_names[entity_id("cup")] == "cup" and batch.entity_names[entity_id("hall")] == "hall"


def test_absent_and_null_fields_are_missing(tmp_path: Path) -> None:
    states = [{"location": None, "visible": None, "steps": 1}, {"temp": None, "steps": None}, {"lit": True}]
    actions = [{"verb": None}, {"obj": "mug"}]
    batch = load(write(tmp_path, record("e1", states, actions)),
                 plan(fields(prev_location=ENTITY, prev_visible=SET, next_temp=FLOAT, prev_steps=INT,
                             next_lit=BOOL, act_verb=VERB, act_obj=ENTITY)))
    c = batch.columns
    assert scalars(c["prev.location"]) == [None, None]
    assert rows(c["prev.visible"]) == [None, None]
    assert c["prev.visible"].offsets.tolist() == [0, 0, 0]  # type: ignore[union-attr]
    assert scalars(c["next.temp"]) == [None, None]
    assert scalars(c["prev.steps"]) == [1, None]
    assert scalars(c["next.lit"]) == [None, 1]
    assert scalars(c["act.verb"]) == [None, None]
    assert scalars(c["act.obj"]) == [None, entity_id("mug")]


def test_sets_are_sorted_and_deduplicated_per_transition(tmp_path: Path) -> None:
    names = ["mug", "apple", "cabinet", "zebra", "desk"]
    states = [{"visible": ["mug", "apple", "mug", "cabinet"]}, {"visible": ["zebra", "zebra"]},
              {"visible": names + names[::-1]}]
    batch = load(write(tmp_path, record("e1", states, [{}, {}])), plan(fields(prev_visible=SET, next_visible=SET)))
    assert rows(batch.columns["prev.visible"]) == [sorted({entity_id(n) for n in ("mug", "apple", "cabinet")}),
                                                    [entity_id("zebra")]]
    assert rows(batch.columns["next.visible"]) == [[entity_id("zebra")], sorted(entity_id(n) for n in names)]


def test_fields_outside_the_plan_are_ignored(tmp_path: Path) -> None:
    states = [{"location": "a", "visible": 5, "junk": {"x": [1]}}, {"location": "b", "visible": "oops"}]
    batch = load(write(tmp_path, record("e1", states, [{"verb": 3}])), plan(fields(next_location=ENTITY)))
    assert set(batch.columns) == {"next.location"}
    assert batch.columns["next.location"].values.tolist() == [entity_id("b")]


def test_episode_layout_tasks_rewards_and_success(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        record("e1", [{}, {}, {}], [{}, {}], task="t1", env_reward=1, success=True),
        "",  # blank lines are skipped
        record("e2", [{}], [], task="t2", success=False),
        record("e3", [{}, {}], [{}], task="t1", env_reward=0.25, success=None),
        record("e4", [{}, {}], [{}]),
    )
    batch = load(path, plan())
    assert batch.n_transitions == 4
    assert batch.episode_offsets.tolist() == [0, 2, 2, 3, 4] and batch.episode_offsets.dtype == np.int64
    assert batch.episodes == ("e1", "e2", "e3", "e4")
    assert batch.tasks == ("t1", "t2", "t1", "e4")  # no task: the episode is its own
    assert batch.task_group.tolist() == [0, 1, 0, 2] and batch.task_group.dtype == np.int64
    assert batch.env_reward.tolist() == [1.0, 0.0, 0.25, 0.0] and batch.env_reward.dtype == np.float64
    assert batch.success.tolist() == [1, 0, -1, -1] and batch.success.dtype == np.int8
    episodes = read_trajectories(path)
    assert [e.where.line for e in episodes] == [1, 3, 4, 5]
    assert episodes[0].instruction == "" and episodes[0].success is True


def test_an_empty_file_gives_an_empty_batch(tmp_path: Path) -> None:
    batch = load(write(tmp_path), plan(fields(prev_visible=SET, act_verb=VERB)))
    assert batch.n_transitions == 0 and batch.episode_offsets.tolist() == [0]
    assert rows(batch.columns["prev.visible"]) == [] and batch.columns["act.verb"].values.shape == (0,)


# --- bindings --------------------------------------------------------------------------------------------------


def test_binding_ops() -> None:
    assert evaluate_binding(match(r"put (?:a|an) (\w+)"), "put a mug in the cabinet") == "mug"
    assert evaluate_binding(match(r"put (?:a|an) (\w+)"), "look around") is MISSING
    assert evaluate_binding(match(r"PUT A (\w+)", ignore_case=True), "put a Mug") == "Mug"
    assert evaluate_binding(match(r"PUT A (\w+)"), "put a Mug") is MISSING
    assert evaluate_binding(match(r"(a)|(b)", group=1), "b") is MISSING  # the group did not take part
    assert evaluate_binding(match(r"(a)|(b)", group=2), "b") == "b"
    assert evaluate_binding(match(r"x\d+", group=0), "see x42!") == "x42"
    assert evaluate_binding(Node("lower", (match(r"to (\w+)"),), ENTITY), "go to Kitchen") == "kitchen"
    assert evaluate_binding(Node("lower", (match(r"to (\w+)"),), ENTITY), "stay") is MISSING
    assert evaluate_binding(Node("const", (), INT, 3), "anything") == 3
    assert evaluate_binding(INSTRUCTION, "the text") == "the text"
    nested = match(r"(\d+)", text=Node("lower", (INSTRUCTION,), TEXT))
    assert evaluate_binding(nested, "Buy 12") == "12"


def test_bound_values_convert_to_the_binding_type() -> None:
    assert convert("12", INT) == 12 and convert("-3", INT) == -3 and convert(7, INT) == 7
    assert convert("12.5", INT) is MISSING and convert("twelve", INT) is MISSING
    assert convert(str(2**63), INT) is MISSING and convert(2.0, INT) is MISSING
    assert convert("2.5", FLOAT) == 2.5 and convert(2, FLOAT) == 2.0 and convert("nan", FLOAT) is MISSING
    assert convert("x", FLOAT) is MISSING
    assert convert("take", VERB) == 1 and convert("tke", VERB) is MISSING
    assert convert("true", BOOL) is True and convert("false", BOOL) is False and convert("yes", BOOL) is MISSING
    assert convert("mug", ENTITY) == "mug" and convert(MISSING, ENTITY) is MISSING


def test_bindings_are_broadcast_per_episode(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        record("e1", [{}, {}, {}], [{}, {}], instruction="put a Mug in 12 cabinets, open it"),
        record("e2", [{}, {}], [{}], instruction="look around"),
        record("e3", [{}], [], instruction="put a cup in 3"),
    )
    binds = (
        BindSource("bind.target", "target", ENTITY, Node("lower", (match(r"put (?:a|an) (\w+)"),), ENTITY)),
        BindSource("bind.n", "n", INT, match(r"in (\d+)")),
        BindSource("bind.verb", "verb", VERB, match(r", (\w+) it")),
        BindSource("bind.scale", "scale", FLOAT, Node("const", (), FLOAT, 0.5)),
    )
    batch = load(path, plan(binds=binds))
    c = batch.columns
    assert scalars(c["bind.target"]) == [entity_id("mug"), entity_id("mug"), None]
    assert scalars(c["bind.n"]) == [12, 12, None]
    assert scalars(c["bind.verb"]) == [3, 3, None]
    assert scalars(c["bind.scale"]) == [0.5, 0.5, 0.5]
    assert c["bind.n"].values.dtype == np.int64 and c["bind.scale"].values.dtype == np.float64
    assert batch.entity_names[entity_id("mug")] == "mug"


# --- lifts -----------------------------------------------------------------------------------------------------


def test_lifts_contains_and_matches(tmp_path: Path) -> None:
    states = [{"feedback": "start", "location": "mug"},
              {"feedback": "Nothing happens. You see a mug.", "location": "desk"},
              {"location": "desk"},
              {"feedback": "you SEE a cup", "location": None}]
    actions = [{"text": "take mug"}, {"text": None}, {"text": "look desk"}]
    path = write(tmp_path, record("e1", states, actions, instruction="put a mug on the desk"),
                 record("e2", [{"feedback": "x"}, {"feedback": "mug"}], [{"text": "mug"}], instruction="look"))
    lifts = (
        LiftSource("lift.0", "contains", "next.feedback", Needle("const", "Nothing happens")),
        LiftSource("lift.1", "contains", "next.feedback", Needle("bind", "target")),
        LiftSource("lift.2", "contains", "act.text", Needle("fact", "prev.location")),
        LiftSource("lift.3", "matches", "next.feedback", pattern=r"you see a (mug|cup)", ignore_case=True),
        LiftSource("lift.4", "matches", "next.feedback", pattern=r"you see"),
        LiftSource("lift.5", "contains", "instruction", Needle("const", "desk")),
        LiftSource("lift.6", "matches", "instruction", pattern=r"^put"),
        LiftSource("lift.7", "contains", "prev.feedback", Needle("const", "nothing happens")),
    )
    binds = (BindSource("bind.target", "target", ENTITY, match(r"put a (\w+)")),)
    c = load(path, plan(binds=binds, lifts=lifts)).columns
    assert scalars(c["lift.0"]) == [1, None, 0, 0]
    assert scalars(c["lift.1"]) == [1, None, 0, None]  # e2 has no target: unknown
    assert scalars(c["lift.2"]) == [1, None, 1, None]  # act.text null; e2: the needle prev.location is absent
    assert scalars(c["lift.3"]) == [1, None, 1, 0]
    assert scalars(c["lift.4"]) == [0, None, 0, 0]
    assert scalars(c["lift.5"]) == [1, 1, 1, 0]
    assert scalars(c["lift.6"]) == [1, 1, 1, 0]
    assert scalars(c["lift.7"]) == [0, 0, None, 0]  # case-sensitive
    assert all(c[f"lift.{k}"].values.dtype == np.uint8 for k in range(8))


# --- errors ----------------------------------------------------------------------------------------------------


def test_a_field_of_the_wrong_type_names_file_line_episode_and_field(tmp_path: Path) -> None:
    good = [record(name, [{"visible": []}, {"visible": ["a"]}], [{}]) for name in ("e1", "e2")]
    bad = record("e17", [{"visible": []}, {"visible": ["a"]}, {"visible": 5}], [{}, {}])
    path = write(tmp_path, *good, bad)
    message = data_error(path, plan(fields(prev_visible=SET, next_visible=SET)))
    assert message == f"{path}:3:1: error: episode e17: field `visible` of state 2: expected a list of strings, got 5"


@pytest.mark.parametrize(
    ("type_", "value", "expected"),
    [
        (SET, ["a", 1], 'expected a list of strings, got ["a", 1]'),
        (ENTITY, 5, "expected a string, got 5"),
        (BOOL, 1, "expected true or false, got 1"),
        (BOOL, "true", 'expected true or false, got "true"'),
        (INT, 1.5, "expected an integer, got 1.5"),
        (INT, True, "expected an integer, got true"),
        (INT, 2**63, f"expected a 64-bit integer, got {2**63}"),
        (FLOAT, "1.0", 'expected a number, got "1.0"'),
        (DOOR, "ajar", 'expected a member of enum(open, closed), got "ajar"'),
        (DOOR, 0, "expected a member of enum(open, closed), got 0"),
    ],
)
def test_wrong_values_per_type(tmp_path: Path, type_: Type, value: Any, expected: str) -> None:
    path = write(tmp_path, record("e1", [{"f": None}, {"f": value}], [{"f": value}]))
    assert data_error(path, plan(fields(next_f=type_))) == (
        f"{path}:1:1: error: episode e1: field `f` of state 1: {expected}")
    assert data_error(path, plan(fields(act_f=type_))) == (
        f"{path}:1:1: error: episode e1: field `f` of action 0: {expected}")


def test_every_bad_field_is_reported_once(tmp_path: Path) -> None:
    path = write(tmp_path, record("e1", [{}, {"door": "ajar"}], [{}]),
                 record("e2", [{"location": 3}, {"location": 4}], [{"text": 9}]))
    fact_plan = plan(fields(prev_location=ENTITY, next_location=ENTITY, next_door=DOOR),
                     lifts=(LiftSource("lift.0", "contains", "act.text", Needle("fact", "next.location")),))
    assert data_error(path, fact_plan).splitlines() == [
        f'{path}:1:1: error: episode e1: field `door` of state 1: expected a member of enum(open, closed), got "ajar"',
        f"{path}:2:1: error: episode e2: field `location` of state 0: expected a string, got 3",
        f"{path}:2:1: error: episode e2: field `text` of action 0: expected a string, got 9",
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"episode": "e1", "states": [{}, {}], "actions": [{}, {}]}',
         "1:1: error: episode e1: `states` must have one more element than `actions`, got 2 states and 2 actions"),
        ('{"episode": "e1", "states": [{}, {}, {}], "actions": [{}]}',
         "1:1: error: episode e1: `states` must have one more element than `actions`, got 3 states and 1 actions"),
        ('{"episode": "e1", "states": [{}], "actions": []', "1:48: error: malformed JSON: Expecting ',' delimiter"),
        ("[1, 2]", "1:1: error: expected a JSON object (one episode a line), got [1, 2]"),
        ('{"states": [{}], "actions": []}', "1:1: error: missing `episode` (a string)"),
        ('{"episode": 7, "states": [{}], "actions": []}', "1:1: error: `episode` must be a string, got 7"),
        ('{"episode": "e1", "actions": []}', "1:1: error: episode e1: missing `states` (a list of objects)"),
        ('{"episode": "e1", "states": [{}, 3], "actions": [{}]}',
         "1:1: error: episode e1: state 1 must be an object, got 3"),
        ('{"episode": "e1", "states": [{}], "actions": {}}',
         "1:1: error: episode e1: `actions` must be a list of objects, got {}"),
        ('{"episode": "e1", "task": 3, "states": [{}], "actions": []}',
         "1:1: error: episode e1: `task` must be a string, got 3"),
        ('{"episode": "e1", "env_reward": "1", "states": [{}], "actions": []}',
         '1:1: error: episode e1: `env_reward` must be a number, got "1"'),
        ('{"episode": "e1", "env_reward": NaN, "states": [{}], "actions": []}',
         "1:1: error: episode e1: `env_reward` must be a finite number, got NaN"),
        ('{"episode": "e1", "success": 1, "states": [{}], "actions": []}',
         "1:1: error: episode e1: `success` must be true or false, got 1"),
    ],
)
def test_malformed_episodes(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, line)
    assert data_error(path) == f"{path}:{message}"


def test_a_malformed_line_stops_reading_with_its_line_number(tmp_path: Path) -> None:
    good = [json.dumps(record(f"e{i}", [{}, {}], [{}])) for i in range(5)]
    path = write(tmp_path, *good[:3], '{"episode": "e4", "states": [{}], oops}', good[4])
    with pytest.raises(DataError) as caught:
        read_trajectories(path)
    assert str(caught.value) == (f"{path}:4:35: error: malformed JSON: "
                                 "Expecting property name enclosed in double quotes")


def test_invalid_utf8_is_located(tmp_path: Path) -> None:
    path = tmp_path / "trajectories.jsonl"
    path.write_bytes(b'{"episode": "e1", "states": [{}], "actions": []}\n{"episode": "\xff"}\n')
    with pytest.raises(DataError) as caught:
        read_trajectories(path)
    assert str(caught.value) == f"{path}:2:14: error: line is not valid UTF-8"


def test_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    with pytest.raises(DataError) as caught:
        read_trajectories(path)
    assert str(caught.value) == f"{path}: error: cannot read trajectories: No such file or directory"


def test_an_episode_built_in_memory_is_checked_too() -> None:
    episode = Episode("m1", "t", "", [{}], [{}], 0.0, None)
    with pytest.raises(DataError) as caught:
        build_fact_batch([episode], plan())
    assert str(caught.value) == ("<memory>: error: episode m1: `states` must have one more element than "
                                 "`actions`, got 1 states and 1 actions")


# --- round trip ------------------------------------------------------------------------------------------------

_NAMES = st.text(max_size=6)
_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.booleans(),
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53),
    "entity": _NAMES,
    "set": st.lists(st.sampled_from(["a", "b", "mug", "é", ""]) | _NAMES, max_size=5),
}
_ABSENT = object()


def _fact(type_: Type) -> st.SearchStrategy[Any]:
    values = st.sampled_from(type_.members) if type_.kind == "enum" else _VALUES[type_.kind]
    return st.one_of(st.just(_ABSENT), st.none(), values)


def _row(schema: dict[str, Type]) -> st.SearchStrategy[dict[str, Any]]:
    facts = st.fixed_dictionaries({name: _fact(type_) for name, type_ in schema.items()})
    return facts.map(lambda row: {k: v for k, v in row.items() if v is not _ABSENT})


@st.composite
def _episodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 4))
        out.append(record(f"e{i}", draw(st.lists(_row(STATE), min_size=n + 1, max_size=n + 1)),
                          draw(st.lists(_row(ACTION), min_size=n, max_size=n))))
    return out


def _decode(column: Column, t: int, type_: Type, names: dict[int, str]) -> Any:
    if not column.known[t]:
        return None
    if type_.kind == "set":
        assert column.offsets is not None
        ids = column.values[column.offsets[t]:column.offsets[t + 1]].tolist()
        assert ids == sorted(set(ids))
        return sorted(names[i] for i in ids)
    value = column.values[t].item()
    return {"bool": bool, "int": int, "float": float, "enum": type_.members.__getitem__,
            "entity": names.__getitem__}[type_.kind](value)


def _expected_value(value: Any, type_: Type) -> Any:
    if value is None or type_.kind != "set":
        return float(value) if type_.kind == "float" and value is not None else value
    return sorted(set(value))


@settings(max_examples=30, deadline=None)
@given(_episodes())
def test_random_episodes_round_trip(episodes: list[dict[str, Any]]) -> None:
    schema = {f"{side}_{name}": t for side in ("prev", "next") for name, t in STATE.items()}
    schema |= {f"act_{name}": t for name, t in ACTION.items()}
    with tempfile.TemporaryDirectory() as folder:
        batch = load(write(Path(folder), *episodes), plan(fields(**schema)))
    names = dict(batch.entity_names)
    for i, episode in enumerate(episodes):
        for t in range(len(episode["actions"])):
            g = int(batch.episode_offsets[i]) + t
            rows_of = {"prev": episode["states"][t], "next": episode["states"][t + 1], "act": episode["actions"][t]}
            for key, type_ in schema.items():
                side, name = key.split("_", 1)
                decoded = _decode(batch.columns[f"{side}.{name}"], g, type_, names)
                assert decoded == _expected_value(rows_of[side].get(name), type_), (key, t)
                if type_.kind == "float" and decoded is not None:
                    assert math.isfinite(decoded)


# --- with the reference interpreter ----------------------------------------------------------------------------


def _load(column: str, type_: Type) -> Node:
    return Node("load_set" if type_.kind == "set" else "load", (), type_, column)


def test_the_interpreter_runs_on_a_built_batch(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        record("e1", [{"location": "kitchen", "visible": ["cabinet"]},
                      {"visible": ["mug", "cabinet"], "feedback": "You see a mug"},
                      {"location": "kitchen", "visible": ["mug"], "feedback": "Nothing happens."}],
               [{"verb": "go", "obj": "cabinet", "parsed": True}, {"verb": "take", "obj": "mug"}],
               instruction="put a mug in the cabinet"),
        record("e2", [{"visible": ["mug"]}, {"visible": None}], [{"verb": "take", "obj": "mug", "parsed": False}],
               instruction="look around"),
    )
    target = _load("bind.target", ENTITY)
    fact_plan = plan(
        fields(prev_visible=SET, next_visible=SET, prev_location=ENTITY, act_verb=VERB, act_obj=ENTITY,
               act_parsed=BOOL),
        binds=(BindSource("bind.target", "target", ENTITY, match(r"put (?:a|an) (\w+)")),),
        lifts=(LiftSource("lift.0", "contains", "next.feedback", Needle("const", "Nothing happens")),),
    )
    batch = build_fact_batch(read_trajectories(path), fact_plan)
    take = Node("eq", (_load("act.verb", VERB), Node("const", (), VERB, 1)), BOOL)
    unparsed = Node("not", (_load("act.parsed", BOOL),), BOOL)
    operators = (
        # target in next.visible and not (target in prev.visible)
        Node("and", (Node("has", (target, _load("next.visible", SET)), BOOL),
                     Node("not", (Node("has", (target, _load("prev.visible", SET)), BOOL),), BOOL)), BOOL),
        Node("and", (take, Node("eq", (_load("act.obj", ENTITY), target), BOOL)), BOOL),
        unparsed,
        _load("lift.0", BOOL),
        Node("or", (unparsed, take), BOOL),
        Node("ge", (Node("count", (_load("next.visible", SET),), INT), Node("const", (), INT, 2)), BOOL),
    )
    columns = tuple(sorted({ColumnSpec(name, BOOL) for name in batch.columns}, key=lambda c: c.name))
    program = KernelProgram(operators, (_load("prev.location", ENTITY),), columns)
    fired, keys = run(program, batch.columns, batch.n_transitions)
    assert fired.tolist() == [
        [1, 0, 0, 0, 0, 1],  # mug comes into view; the agent goes; feedback has no "Nothing happens"
        [0, 1, 0, 1, 1, 0],  # takes the target; parsed is missing so `unparsed` is unknown, but `or take` is true
        [0, 0, 1, 0, 1, 0],  # no target binding and next.visible null: unknown -> 0
    ]
    assert keys is not None and keys[1] == keys[2] != keys[0]  # prev.location missing twice, kitchen once


# --- hostile input -------------------------------------------------------------------------------------------

_DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"episode": "e1", "env_reward": 1' + "0" * 400 + ', "states": [{}], "actions": []}',
         "1:1: error: episode e1: `env_reward` must be a finite number, got an integer of 401 digits"),
        ('{"episode": "e1", "states": [{"n": ' + "9" * 5000 + '}], "actions": []}',
         "1:36: error: episode e1: field `n` of state 0 is a number of 5,000 digits; a number may have at most 4,300"),
        ('{"episode": "e1", "states": [{"x": ' + _DEEP + '}], "actions": []}',
         "1:1: error: JSON nested too deeply to read"),
        ('{"episode": "\\ud800", "states": [{}, {}], "actions": [{}]}',
         '1:1: error: `episode` must be a valid Unicode string (no lone surrogates), got "\\ud800"'),
        ('{"episode": "e1", "task": "t\\udfff", "states": [{}], "actions": []}',
         '1:1: error: episode e1: `task` must be a valid Unicode string (no lone surrogates), got "t\\udfff"'),
        ('{"episode": "e1", "instruction": "put a \\ud800", "states": [{}], "actions": []}',
         ("1:1: error: episode e1: `instruction` must be a valid Unicode string (no lone surrogates), got "
          '"put a \\ud800"')),
    ],
)
def test_hostile_lines_are_located_errors(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, line)
    assert data_error(path, plan(fields(next_n=INT))) == f"{path}:{message}"


@pytest.mark.parametrize(
    ("type_", "value", "expected"),
    [
        (ENTITY, "mu\ud800g", 'expected a valid Unicode string (no lone surrogates), got "mu\\ud800g"'),
        (SET, ["a", "\udc00"], 'expected a list of valid Unicode strings (no lone surrogates), got ["a", "\\udc00"]'),
        (TEXT, "\ud800", 'expected a valid Unicode string (no lone surrogates), got "\\ud800"'),
        (FLOAT, math.nan, "expected a finite number, got NaN"),
        (FLOAT, -math.inf, "expected a finite number, got -Infinity"),
        (FLOAT, 10**400, "expected a finite number, got an integer of 401 digits"),
    ],
)
def test_values_no_output_could_hold_are_located(tmp_path: Path, type_: Type, value: Any, expected: str) -> None:
    path = write(tmp_path, json.dumps(record("e1", [{}, {"f": value}], [{}])))
    lifts = (LiftSource("lift.0", "matches", "next.f", pattern="x"),) if type_ == TEXT else ()
    fact_plan = plan(() if type_ == TEXT else fields(next_f=type_), lifts=lifts)
    assert data_error(path, fact_plan) == f"{path}:1:1: error: episode e1: field `f` of state 1: {expected}"


def test_a_reused_episode_id_is_an_error_naming_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, record("e1", [{}], []), record("e2", [{}], []), record("e1", [{}], []))
    with pytest.raises(DataError) as caught:
        read_trajectories(path)
    assert str(caught.value) == f"{path}:3:1: error: episode e1: this id is already used, line 1; ids must be unique"


def test_a_state_in_memory_that_is_not_an_object_is_located() -> None:
    episode = Episode("m1", "t", "", [{}, ["not", "a", "dict"]], [{}], 0.0, None)
    with pytest.raises(DataError) as caught:
        build_fact_batch([episode], plan(fields(next_location=ENTITY)))
    assert str(caught.value) == '<memory>: error: episode m1: state 1 must be an object, got ["not", "a", "dict"]'


# --- the fast column path agrees with the per-value definition -------------------------------------------------

_ODD = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(),
    st.sampled_from(["a", "mug", "é", "", "\ud800"]),
    st.lists(st.one_of(st.sampled_from(["a", "mug", "\udc00"]), st.none(), st.integers(0, 2)), max_size=3),
    st.sampled_from(["go", "take", "look", 1.0, 0, (), {}]),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([BOOL, INT, FLOAT, ENTITY, TEXT, SET, VERB]), st.lists(_ODD, max_size=8), st.integers(1, 8))
def test_the_fast_path_equals_the_reference_value_by_value(type_: Type, raw: list[Any], chunk: int) -> None:
    from tracec.runtime.facts.columns import (
        BadValue,
        Entities,
        Interned,
        encode_piece,
        join_pieces,
        piece_reference,
    )

    def column(code: Any) -> tuple[Any, ...]:
        entities, texts = Entities(), Interned()
        table = texts if type_.kind == "text" else entities
        pieces = []
        for lo in range(0, max(len(raw), 1), chunk):
            try:
                pieces.append(code(raw[lo:lo + chunk], type_, table))
            except BadValue as bad:
                return ("bad", lo + bad.index, bad.expected)
        got = join_pieces(pieces, type_, table)
        decoded = texts.decode(got) if type_.kind == "text" else got.values.tolist()
        return ("ok", decoded, got.known.tolist(), None if got.offsets is None else got.offsets.tolist(),
                str(got.values.dtype), sorted(entities.names().items()))

    assert column(encode_piece) == column(piece_reference)
