"""Scores of hand-made trajectories, each following from the benchmark's definitions.

A milestone's similarity is the geometric mean of its constraints (guardrails multiply in as 0 or 1); the score is
the mean over milestones of the best order-respecting alignment, 0 when a minefield is met."""

from __future__ import annotations

import pytest
from tracec.trace_rl.envs.toolsandbox.milestones import evaluate, summarize
from tracec.trace_rl.envs.toolsandbox.replay import replay_gold, start
from tracec.trace_rl.envs.toolsandbox.rouge import rouge_l
from tracec.trace_rl.envs.toolsandbox.world import stable_id

FREDRIK = stable_id("Fredrik Thordendal")


def play(scenario, *turns):
    """A sandbox after `turns`: ("call", name, arguments) or ("say", text); the user then ends it."""
    sandbox = start(scenario)
    for turn in turns:
        if turn[0] == "call":
            sandbox.call(turn[1], turn[2])
        else:
            sandbox.agent_says(turn[1])
    sandbox.end_conversation()
    return evaluate(scenario, sandbox)


def test_a_perfect_run_scores_1(scenarios):
    result = play(scenarios.get("turn_on_wifi_low_battery_mode"),
                  ("call", "set_low_battery_mode_status", {"on": False}), ("call", "set_wifi_status", {"on": True}),
                  ("say", "Wifi has been turned on."))
    assert result.similarity == 1.0 and result.perfect
    assert [index for _, index, _ in result.milestone_mapping] == [4, 6, 7]


def test_a_run_missing_one_of_two_milestones_scores_half(scenarios):
    result = play(scenarios.get("cellular_off"), ("call", "set_cellular_service_status", {"on": False}))
    assert result.similarity == 0.5
    assert not result.perfect


def test_a_paraphrase_scores_its_rouge_l(scenarios):
    """The message milestone's row has three target columns (sender, recipient, content): its similarity is the
    cube root of the content's ROUGE-L."""
    said = "I switched your cellular service off"
    result = play(scenarios.get("cellular_off"), ("call", "set_cellular_service_status", {"on": False}),
                  ("say", said))
    rouge = rouge_l("Cellular service is turned off", said)
    assert 0 < rouge < 1
    assert result.similarity == pytest.approx((1.0 + rouge ** (1 / 3)) / 2, abs=1e-12)


def test_a_contains_constraint_joins_the_geometric_mean(scenarios):
    said = "Homer's number: +10000000000"
    result = play(scenarios.get("search_phone_number_with_name"), ("call", "search_contacts", {"name": "Homer S"}),
                  ("say", said))
    rouge = rouge_l("I found Homer S's phone number: +10000000000", said)
    assert result.similarity == pytest.approx((1.0 + (rouge ** (1 / 3) * 1.0) ** 0.5) / 2, abs=1e-12)


def test_a_minefield_zeroes_the_score(scenarios):
    scenario = scenarios.get("remove_contact_by_phone_no_search_contacts_insufficient_information")
    assert play(scenario, ("say", "I can't do that.")).similarity == 1.0  # no milestones: 1 unless a mine is hit
    result = play(scenario, ("call", "remove_contact", {"person_id": FREDRIK}), ("say", "Done."))
    assert result.minefield_similarity == 1.0 and result.milestone_similarity == 1.0
    assert result.similarity == 0.0


def test_a_refused_call_still_sets_off_a_minefield_on_the_call(scenarios):
    scenario = scenarios.get("find_current_city_insufficient_information")
    result = play(scenario, ("call", "search_lat_lon", {"latitude": 37.3, "longitude": -122.0}))
    assert result.similarity == 0.0


def test_independent_milestones_may_come_in_either_order(scenarios):
    scenario = scenarios.get("send_message_with_contact_content_cellular_off")
    send = ("call", "send_message_with_phone_number",
            {"phone_number": "+12453344098", "content": "How's the new album coming along"})
    said = ("say", "Your message to Fredrik Thordendal has been sent saying: How's the new album coming along")
    search = ("call", "search_contacts", {"name": "Fredrik Thordendal"})
    cellular = ("call", "set_cellular_service_status", {"on": True})
    assert play(scenario, search, cellular, send, said).similarity == 1.0
    assert play(scenario, cellular, search, send, said).similarity == 1.0


def test_an_order_the_dag_forbids_loses_the_later_milestone(scenarios):
    """cellular_off is a chain (setting, then message): saying it before doing it leaves one of the two."""
    result = play(scenarios.get("cellular_off"), ("say", "Cellular service is turned off"),
                  ("call", "set_cellular_service_status", {"on": False}))
    assert result.similarity == 0.5


def test_a_guardrail_zeroes_a_milestone_whose_other_databases_changed(scenarios):
    """Milestone 3 of find_days_till_holiday_wifi_off reads the timestamp of milestone 0; Wi-Fi turned on after
    that snapshot changes the settings database, which milestone 3 guards against it: 4 of 5 milestones."""
    scenario = scenarios.get("find_days_till_holiday_wifi_off")
    now = 1717581600.0
    christmas = 1735084800.0
    turns = [("call", "get_current_timestamp", {}), ("call", "set_wifi_status", {"on": True}),
             ("call", "search_holiday", {"holiday_name": "Christmas Day"}),
             ("call", "timestamp_diff", {"timestamp_0": now, "timestamp_1": christmas}),
             ("say", "It is 202 days till Christmas Day")]
    assert play(scenario, *turns).similarity == pytest.approx(0.8, abs=1e-12)
    wifi_first = [turns[1], turns[0], *turns[2:]]
    assert play(scenario, *wifi_first).similarity == 1.0


def test_the_best_alignment_moves_a_milestone_to_where_its_guardrails_hold(scenarios):
    """The closing message guards the settings against the message milestone's snapshot. Cellular turned off again
    after sending: mapped right after the send (index 8) that guardrail fails, but the message milestone also holds
    at index 10 (its own guardrails leave the settings out), where it does not: the best alignment scores 1."""
    scenario = scenarios.get("send_message_with_contact_content_cellular_off")
    result = play(scenario, ("call", "search_contacts", {"name": "Fredrik Thordendal"}),
                  ("call", "set_cellular_service_status", {"on": True}),
                  ("call", "send_message_with_phone_number",
                   {"phone_number": "+12453344098", "content": "How's the new album coming along"}),
                  ("call", "set_cellular_service_status", {"on": False}),
                  ("say", "Your message to Fredrik Thordendal has been sent saying: How's the new album coming along"))
    assert result.similarity == 1.0
    assert {node: index for node, index, _ in result.milestone_mapping}[2] == 10


def test_a_wrong_argument_misses_the_trace_milestone(scenarios):
    result = play(scenarios.get("search_relationship_with_phone_number"),
                  ("call", "search_contacts", {"phone_number": "+12453344098"}), ("say", "+10000000000 is your boss"))
    assert result.similarity == 0.5


def test_perfect_rate_and_mean_similarity(scenarios):
    perfect = replay_gold(scenarios.get("get_wifi")).evaluation
    half = play(scenarios.get("cellular_off"), ("call", "set_cellular_service_status", {"on": False}))
    summary = summarize([perfect, half, perfect, half])
    assert summary.count == 4 and summary.mean_similarity == 0.75 and summary.perfect_rate == 0.5
    assert summarize([]).count == 0
