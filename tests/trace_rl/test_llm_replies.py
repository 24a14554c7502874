"""JSON found in prose and code fences, schema errors worded for the model, the bounded repair loop and its log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scripted_llm import ScriptedLLM
from tracec.trace_rl.llm.calls import CallLog, log_path_beside
from tracec.trace_rl.llm.chat import Sampling
from tracec.trace_rl.llm.repair import RepairFailed, ask_json
from tracec.trace_rl.llm.replies import ReplyProblem, find_json

SCHEMA = {
    "type": "object", "required": ["labels"], "additionalProperties": False,
    "properties": {"labels": {"type": "object", "additionalProperties": {"enum": ["NA", "PRESENT", "LACKING"]}}},
}


@pytest.mark.parametrize("reply", [
    '{"labels": {"a": "NA"}}',
    'Sure! Here are the labels:\n{"labels": {"a": "NA"}}\nLet me know if you need more.',
    'Here you go:\n```json\n{"labels": {"a": "NA"}}\n```\nDone.',
    '```\n{"labels": {"a": "NA"}}\n```',
    '```json\n{"labels": {"a": "NA"}}',  # a fence the model never closed
    'I think [this] matters. {"note": 1} and then {"labels": {"a": "NA"}}',  # the first valid candidate wins
])
def test_json_is_found_around_prose_and_fences(reply: str) -> None:
    assert find_json(reply, SCHEMA) == {"labels": {"a": "NA"}}


@pytest.mark.parametrize(("reply", "says"), [
    ("I cannot label these.", "holds no JSON object"),
    ('{"labels": {"a": "NA",}}', "does not parse: Expecting property name enclosed in double quotes at line 1"),
    ('{"labels": {"a": "MAYBE"}}', "at $.labels.a: 'MAYBE' is not one of ['NA', 'PRESENT', 'LACKING']"),
    ('{"label": {}}', "'labels' is a required property"),
])
def test_a_bad_reply_says_what_is_wrong_in_words_for_the_model(reply: str, says: str) -> None:
    with pytest.raises(ReplyProblem) as raised:
        find_json(reply, SCHEMA)
    assert says in str(raised.value)


_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                       lambda inner: (st.lists(inner, max_size=3)
                                      | st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                       max_leaves=10)


@settings(max_examples=100, deadline=None)
@given(value=st.dictionaries(st.text(max_size=5), _VALUES, max_size=4),
       before=st.text(alphabet="abc .:!\n", max_size=30), after=st.text(alphabet="abc .:!\n", max_size=30),
       fenced=st.booleans())
def test_any_object_survives_any_prose_around_it(value: dict, before: str, after: str, fenced: bool) -> None:
    body = json.dumps(value, indent=1)
    reply = f"{before}\n```json\n{body}\n```\n{after}" if fenced else f"{before} {body} {after}"
    assert find_json(reply) == value


def test_the_repair_loop_feeds_the_problem_back_and_logs_every_attempt(tmp_path: Path) -> None:
    llm = ScriptedLLM(['{"labels": {"a": "MAYBE"', 'Labels: {"labels": {"a": "MAYBE"}}', '{"labels": {"a": "NA"}}'])
    log = CallLog(tmp_path / "calls.jsonl", command="test")
    messages = [{"role": "user", "content": "label it"}]
    accepted = ask_json(llm, messages, SCHEMA, log=log, purpose="label e1", tries=3, sampling=Sampling(seed=5))
    assert accepted.value == {"labels": {"a": "NA"}} and accepted.attempts == 3
    # Each retry carries the original request, the rejected reply and the problem; only the latest failure.
    assert llm.calls[0] == messages
    assert [m["role"] for m in llm.calls[2]] == ["user", "assistant", "user"]
    assert llm.calls[2][1]["content"] == 'Labels: {"labels": {"a": "MAYBE"}}'
    assert "'MAYBE' is not one of" in llm.calls[2][2]["content"]
    assert [s.seed for s in llm.samplings] == [5, 6, 7]
    records = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    calls = [r for r in records if r["event"] == "call"]
    verdicts = [r["verdict"] for r in records if r["event"] == "verdict"]
    assert [c["attempt"] for c in calls] == [1, 2, 3] and all(c["purpose"] == "label e1" for c in calls)
    assert all(c["latency_s"] >= 0 and c["backend"] == "scripted" for c in calls)
    assert calls[1]["messages"][-1]["content"].startswith("That reply cannot be used: the JSON does not parse")
    assert verdicts[0].startswith("rejected: the JSON does not parse") and verdicts[-1] == "accepted"


def test_a_model_that_never_answers_right_fails_after_the_bound(tmp_path: Path) -> None:
    llm = ScriptedLLM(lambda messages: "I would rather not.")
    log = CallLog(tmp_path / "calls.jsonl", command="test")
    with pytest.raises(RepairFailed, match=r"label e9: no acceptable reply in 4 tries; the last one: the reply holds "
                                           r"no JSON object \(every attempt is in .*calls.jsonl\)"):
        ask_json(llm, [{"role": "user", "content": "x"}], SCHEMA, log=log, purpose="label e9", tries=4)
    assert len(llm.calls) == 4
    assert sum('"event": "call"' in line for line in (tmp_path / "calls.jsonl").read_text().splitlines()) == 4


def test_call_logs_sit_beside_their_outputs(tmp_path: Path) -> None:
    assert log_path_beside(tmp_path / "candidates.json") == tmp_path / "candidates.llm_calls.jsonl"
    assert log_path_beside(tmp_path / "runs") == tmp_path / "runs" / "llm_calls.jsonl"


def test_a_reply_cut_short_in_a_code_fence_names_the_broken_object() -> None:
    reply = '```python\ndef get_order(order):\n    return {\n        "labels": {\n            "a": "NA",\n            "'
    with pytest.raises(ReplyProblem, match="the JSON does not parse: Unterminated string"):
        find_json(reply, SCHEMA)
