"""Every transcribed scenario's gold calls and messages reach similarity 1; the counts add up to the benchmark's."""

from __future__ import annotations

import collections

import pytest
from tracec.trace_rl.envs.toolsandbox.replay import replay_gold
from tracec.trace_rl.envs.toolsandbox.scenarios import BASE_SCENARIO_COUNT, CATEGORIES, load_scenarios

NAMES = list(load_scenarios().scenarios)


@pytest.mark.parametrize("name", NAMES)
def test_gold_replay_is_perfect(scenarios, name):
    replay = replay_gold(scenarios.get(name))
    assert replay.evaluation.similarity == 1.0, replay.evaluation
    assert replay.evaluation.perfect
    assert replay.evaluation.minefield_similarity == 0.0


def test_transcribed_and_left_out_make_the_benchmark(scenarios):
    assert len(scenarios.scenarios) + len(scenarios.left_out) == BASE_SCENARIO_COUNT
    assert not set(scenarios.scenarios) & set(scenarios.left_out)
    web_tools = {"search_lat_lon", "search_location_around_lat_lon", "search_weather_around_lat_lon", "search_stock",
                 "convert_currency"}
    assert set(scenarios.left_out.values()) <= web_tools


def test_every_category_is_covered(scenarios):
    counts = collections.Counter(c for scenario in scenarios.scenarios.values() for c in scenario.categories)
    assert set(counts) == set(CATEGORIES)


def test_a_replay_does_not_depend_on_the_seed(scenarios):
    scenario = scenarios.get("add_contact_with_name_and_phone_number")
    assert replay_gold(scenario, seed=1).evaluation == replay_gold(scenario, seed=2).evaluation
