"""ToolSandbox scenarios as the one environment protocol: gold turns score 1, bad turns are answered, not raised."""

from __future__ import annotations

import pytest
from tracec.trace_rl.envs.toolcall import format_native_call, format_tool_call
from tracec.trace_rl.envs.toolsandbox.environment import ToolSandboxEnvironment


def test_a_gold_episode_through_the_protocol(scenarios):
    env = ToolSandboxEnvironment(scenarios, names=["send_message_with_contact_content_cellular_off_multiple_user_turn"])
    assert env.reset(7).text == "Send a message"
    assert {tool["function"]["name"] for tool in env.tools} == {
        "search_contacts", "send_message_with_phone_number", "set_cellular_service_status",
        "get_cellular_service_status"}
    turns = ["Who should I send it to?", "What should it say?",
             format_native_call("search_contacts", {"name": "Fredrik Thordendal"}),
             format_native_call("set_cellular_service_status", {"on": True}),
             format_native_call("send_message_with_phone_number",
                                {"phone_number": "+12453344098", "content": "How's the new album coming along"}),
             "Your message to Fredrik Thordendal has been sent saying: How's the new album coming along"]
    results = [env.step(turn) for turn in turns]
    assert [r.observation.role for r in results] == ["user", "user", "tool", "tool", "tool", "user"]
    assert results[0].observation.text == "Fredrik Thordendal"
    assert results[-1].done and results[-1].reward == 1.0
    assert not any(r.done for r in results[:-1])
    record = env.trajectory("e0")
    assert record["success"] and record["end"] == "stop" and record["task"].startswith("toolsandbox/")
    assert len(record["states"]) == len(record["actions"]) + 1
    assert record["actions"][4]["kind"] == "mutate" and record["actions"][2]["kind"] == "query"
    with pytest.raises(RuntimeError):
        env.step("more")


def test_bad_turns_are_errors_for_the_agent(scenarios):
    env = ToolSandboxEnvironment(scenarios, names=["get_wifi"], call_format="text", max_steps=4)
    env.reset(0)
    assert env.tools == [] and "get_wifi_status" in env.system_prompt
    first = env.step(format_tool_call("set_wifi_status", {"on": False}))
    assert first.observation.text.startswith("KeyError: Agent tool call 'set_wifi_status' is not a known allowed")
    assert env.step("<tool_call>{oops").observation.text.startswith("SyntaxError:")
    assert env.step(format_tool_call("get_wifi_status", {"verbose": True})).observation.text == \
        "TypeError: got an unexpected keyword argument 'verbose'"
    last = env.step(format_tool_call("get_wifi_status", {}))
    assert last.done and last.reward == 0.5  # the trace milestone, not the message one
    assert env.trajectory("e1")["end"] == "max_steps" and env.actions[0]["accepted"] is False


def test_unknown_scenarios_and_bad_settings_are_refused(scenarios):
    with pytest.raises(KeyError, match="unknown ToolSandbox scenario"):
        ToolSandboxEnvironment(scenarios, names=["nope"])
    with pytest.raises(ValueError, match="max_steps"):
        ToolSandboxEnvironment(scenarios, max_steps=0)
    with pytest.raises(ValueError, match="call_format"):
        ToolSandboxEnvironment(scenarios, call_format="xml")
