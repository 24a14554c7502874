"""`tracec env FILE --seed N`: the description, and the `--play` loop over a stream of agent turns."""

from __future__ import annotations

import io
from pathlib import Path

from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.envs.capability.shell import describe, play

REPO = Path(__file__).resolve().parents[3]
PROGRAM = load_environment(str(REPO / "tests" / "data" / "cancel_trip.rubric"))


def test_describe_shows_task_tools_and_gold_solution() -> None:
    scenario = PROGRAM.scenario(2)
    text = describe(PROGRAM, 2)
    lines = text.splitlines()
    assert lines[:3] == ["environment cancel_trip: structured data reasoning: find the one right record",
                         "capability  structured_data_reasoning", "seed        2"]
    assert f"  {scenario.task}" in lines
    assert "  cancel(trip: key) changes trips" in lines and "  find_user(name: name) -> rows of users" in lines
    target = scenario.lets["target"]["id"]
    assert f'  {{"name": "cancel", "arguments": {{"trip": "{target}"}}}}' in lines  # training's default: native calls
    assert lines[-1] == f"report: {scenario.report[0]}"
    assert f'  <action>cancel(trip="{target}")</action>' in describe(PROGRAM, 2, "text").splitlines()


def test_play_runs_typed_turns_to_the_end() -> None:
    scenario = PROGRAM.scenario(2)
    turns = [f'<action>cancel(trip="{scenario.lets["target"]["id"]}")</action>', "", f"done, {scenario.report[0]}"]
    out = io.StringIO()
    scores = play(PROGRAM, 2, io.StringIO("\n".join(turns) + "\n"), out)
    assert (scores.state, scores.report, scores.reward) == (1.0, 1.0, 1.0)
    text = out.getvalue()
    assert f"user: {scenario.task}" in text and '"status":"cancelled"' in text
    assert text.splitlines()[-1] == "steps 2  state 1  report 1  reward 1.000"


def test_play_stops_at_end_of_input() -> None:
    out = io.StringIO()
    scores = play(PROGRAM, 2, io.StringIO("<action>nope()</action>\n"), out)
    assert scores.reward == 0.0
    assert "unknown tool `nope`" in out.getvalue() and "(end of input)" in out.getvalue()
