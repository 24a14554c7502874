"""The benchmark's column and snapshot measures, its ROUGE-L, stemmer and fuzzy scores, on hand-checked cases."""

from __future__ import annotations

import math

import pytest
from tracec.trace_rl.envs.toolsandbox.fuzzy import default_process, extract, partial_ratio, ratio, weighted_ratio
from tracec.trace_rl.envs.toolsandbox.porter import stem
from tracec.trace_rl.envs.toolsandbox.rouge import rouge_l, tokens
from tracec.trace_rl.envs.toolsandbox.similarity import (
    DEFAULT_MEASURES,
    ColumnMeasure,
    addition_similarity,
    guardrail_similarity,
    removal_similarity,
    snapshot_similarity,
    tool_trace_dependant_similarity,
    update_similarity,
)

CONTACTS = DEFAULT_MEASURES["contact"]
EXACT = {"a": ColumnMeasure(kind="exact"), "b": ColumnMeasure(kind="exact")}


def test_porter_stems_the_papers_examples():
    words = "caresses ponies cats feed agreed plastered motoring hopping filing happy relational generalizations"
    assert [stem(w) for w in words.split()] == ["caress", "poni", "cat", "feed", "agre", "plaster", "motor", "hop",
                                                "file", "happi", "relat", "gener"]


def test_rouge_l_is_the_lcs_f_measure_of_stemmed_tokens():
    assert tokens("Wifi is turned ON!") == ["wifi", "is", "turn", "on"]
    assert rouge_l("Wifi is on", "wifi is on") == 1.0
    # lcs("cellular service is turned off", "i turned off the cellular service") = 2 of 5 and 6 tokens
    assert rouge_l("Cellular service is turned off", "I turned off the cellular service") == pytest.approx(
        2 * (2 / 6) * (2 / 5) / (2 / 6 + 2 / 5))
    assert rouge_l("anything", "") == 0.0


def test_fuzzy_scores_as_rapidfuzz():
    assert ratio("abcd", "abce") == 75.0
    assert partial_ratio("thanksgiving", "thanksgiving day") == 100.0
    assert weighted_ratio("homer", "homer s") == 95.0  # token set: a subset, scaled by 0.95
    assert weighted_ratio("fredrik", "fredrik thordendal") == 90.0  # partial 100, scaled by 0.9
    assert default_process("Homer S.!") == "homer s"
    assert extract("Homer", ["Tomas Haake", "Homer S", None, "Homer Simpson"], 90) == [1, 3]


def test_snapshot_pairs_rows_for_the_best_geometric_mean():
    rows = [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    assert snapshot_similarity(rows, [{"a": 2}, {"a": 1}], EXACT) == 1.0
    assert snapshot_similarity(rows, [{"a": 2}], EXACT) == 0.0  # row counts differ
    assert snapshot_similarity(rows, [{"a": 2}, {"a": 2}], EXACT) == 0.0  # no pairing avoids a zero
    half = {"a": ColumnMeasure(kind="exact"), "b": ColumnMeasure(kind="rouge_l")}
    got = snapshot_similarity([{"a": 1, "b": "red blue"}], [{"a": 1, "b": "red"}], half)
    assert got == pytest.approx(math.sqrt(1.0 * rouge_l("red", "red blue")))


def test_addition_removal_update_measure_the_changed_rows():
    before = [{"person_id": "p1", "name": "A", "phone_number": "+1", "relationship": "friend", "is_self": False}]
    added = [*before, {"person_id": "p2", "name": "B", "phone_number": "+2", "relationship": None, "is_self": False}]
    target = [{"name": "B", "relationship": None}]
    measures = {**CONTACTS, "relationship": ColumnMeasure(kind="exact")}
    assert addition_similarity(added, target, measures, before) == 1.0
    assert addition_similarity(added[1:], target, measures, before) == 0.0  # a reference row is gone
    assert removal_similarity(before, [{"person_id": "p2"}], CONTACTS, added) == 1.0
    changed = [{**before[0], "phone_number": "+9"}]
    assert update_similarity(changed, [{"person_id": "p1", "phone_number": "+9"}], CONTACTS, before) == 1.0
    assert update_similarity(added, [{"person_id": "p1"}], CONTACTS, before) == 0.0  # row count changed
    assert guardrail_similarity(before, list(before)) == 1.0 and guardrail_similarity(added, before) == 0.0


def test_trace_match_with_tolerances_alternatives_and_free_arguments():
    cell = [{"tool_name": "shift", "arguments": {"t": 100.4, "days": 1}, "result": 0}]
    strict, loose = ColumnMeasure(kind="tool_trace"), ColumnMeasure(kind="tool_trace", atol={"t": 1.0})
    assert strict("tool_trace", cell, {"tool_name": "shift", "arguments": {}}) == 1.0
    assert strict("tool_trace", cell, {"tool_name": "shift", "arguments": {"t": 100}}) == 0.0
    assert loose("tool_trace", cell, {"tool_name": "shift", "arguments": {"t": 100}}) == 1.0
    assert strict("tool_trace", cell, {"tool_name": "shift", "arguments": {"weeks": 0}}) == 0.0  # not given
    either = [{"tool_name": "other", "arguments": {}}, {"tool_name": "shift", "arguments": {"days": 1}}]
    assert strict("tool_trace", cell, either) == 1.0
    assert strict("tool_trace", None, either) == 0.0


def test_tool_trace_dependant_fills_the_target_from_the_reference_trace():
    measures = DEFAULT_MEASURES["sandbox"]
    reference = [{"tool_trace": [{"tool_name": "timestamp_diff", "arguments": {}, "result": {"days": 3}}]}]
    message = [{"sender": "agent", "recipient": "user", "content": "It is 3 days till Christmas Day"}]
    target = [{"sender": "agent", "recipient": "user", "content": "It is {days} days till Christmas Day"}]
    assert tool_trace_dependant_similarity(message, target, measures, reference, fill_to="content",
                                           extractor="days") == 1.0
    assert tool_trace_dependant_similarity(message, target, measures, [{"tool_trace": None}], fill_to="content",
                                           extractor="days") == 0.0
