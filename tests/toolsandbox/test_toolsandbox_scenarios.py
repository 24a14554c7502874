"""Reading the scenarios file: placeholders resolved against the clock, errors located, unknown names refused."""

from __future__ import annotations

import json

import pytest
from tracec.trace_rl.envs.toolsandbox.clock import Clock
from tracec.trace_rl.envs.toolsandbox.scenarios import SCENARIOS_FILE, ScenarioError, load_scenarios


def test_an_unknown_scenario_names_some_known_ones(scenarios):
    with pytest.raises(KeyError, match="unknown ToolSandbox scenario 'nope'"):
        scenarios.get("nope")


def test_placeholders_follow_the_clock():
    clock = Clock(now=Clock().timestamp(2030, 1, 7, 9))  # a Monday
    scenario = load_scenarios(clock=clock).get("add_reminder_content_and_weekday_delta_and_time")
    target = scenario.milestones[1].constraints[0].target[0]
    assert target["reminder_timestamp"] == clock.timestamp(2030, 1, 11, 17)  # that week's Friday, 5PM
    task = load_scenarios(clock=clock).get("find_days_till_holiday_multiple_user_turn").user_task
    assert "12/25/2030" in task


def test_a_malformed_scenario_is_located(tmp_path):
    raw = json.loads(SCENARIOS_FILE.read_text(encoding="utf-8"))
    first = raw["scenarios"][0]
    cases = [
        ({"tools": ["no_such_tool"]}, "scenario 'cellular_off': tools: unknown tool 'no_such_tool'"),
        ({"base": "base_sunroof_open"}, "scenario 'cellular_off': base: unknown base state"),
        ({"milestone_edges": [[0, 1], [1, 0]]}, "milestone_edges: the edges form a cycle"),
        ({"gold": [{"say": "done"}, {"say": "again"}]}, "gold: must end with a message"),
        ({"milestones": [{"constraints": [{"db": "setting", "measure": "snapshot", "target": [{"volume": 3}]}]}]},
         r"milestones\[0\].constraints\[0\]: setting has no column\(s\) volume"),
    ]
    for change, message in cases:
        path = tmp_path / "scenarios.json"
        path.write_text(json.dumps({"scenarios": [{**first, **change}]}), encoding="utf-8")
        with pytest.raises(ScenarioError, match=message):
            load_scenarios(path)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ScenarioError, match="cannot read scenarios"):
        load_scenarios(path)
