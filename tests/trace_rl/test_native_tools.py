"""The native tool-calling format: tools as JSON schemas through the chat template, calls as `<tool_call>{...}`.

Schemas of a capability environment and of tau2's domains, the Hermes block a template without tools gets, a
tools-aware template given `tools=`, a native episode played to success, located errors for malformed calls, the
action tokens of a native turn, the config switch, and a tiny-model training run in the native format."""

from __future__ import annotations

import copy
import io
import json
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from toy_env import bare_letter_env, letter_env
from tracec.cli import main as cli_main
from tracec.trace_rl.envs.agent import ChatAgent, run_episode
from tracec.trace_rl.envs.capability import CapabilityEnvironment, compile_environment
from tracec.trace_rl.envs.capability.expr import show
from tracec.trace_rl.envs.capability.shell import play
from tracec.trace_rl.envs.config import EnvSection
from tracec.trace_rl.envs.protocol import Observation, agent_tools
from tracec.trace_rl.envs.tau2 import Tau2Environment
from tracec.trace_rl.envs.tau2.environment import scripted_user
from tracec.trace_rl.envs.tau2.gold import gold_user
from tracec.trace_rl.envs.textworld.env import TextWorldEnvironment
from tracec.trace_rl.envs.toolcall import format_native_call, format_tool_call, parse_tool_call
from tracec.trace_rl.envs.user_factory import made_environment
from tracec.trace_rl.grpo.config import ConfigError, load_config
from tracec.trace_rl.grpo.train import train
from tracec.trace_rl.llm import conversation
from tracec.trace_rl.llm.chat import Sampling
from tracec.trace_rl.llm.http import HTTPConfig, OpenAIChatBackend
from tracec.trace_rl.llm.local import TransformersBackend
from tracec.trace_rl.policy.catalog import resolve_model
from tracec.trace_rl.policy.tiny import build_tiny_model, build_tokenizer
from tracec.trace_rl.rollouts.engine import GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.sampler import SampledTurn, TurnRequest
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate
from tracec.trace_rl.targeting.peft_adapters import PeftAdapters
from tracec.trace_rl.targeting.pipeline.config import TargetSection
from transformers import AutoTokenizer

from tracec.config_io import FieldError

DESK = """\
environment desk "book a free room and say its floor" {
  table rooms(id: key, floor: int 1..5, kind: enum(single, double), free: bool) rows 4..8
  let room = pick(rooms where free == true)
  task "Please book room {room.id} for 2 nights and tell me its floor."
  tool find_room(id: key) -> rooms where id == $id
  tool list_rooms(kind: enum(single, double), floor: int) -> rooms where kind == $kind and floor == $floor
  tool book(room: key, nights: int, note: text, rate: float, day: date, vip: bool)
    require rooms[$room].free == true else "room {$room} is taken"
    require $nights >= 1 else "book at least one night"
    set rooms[$room].free = false
  solution find_room(room.id); book(room.id, 2, "late arrival", 1.5, "2024-03-01", false)
  report room.floor
  reward 0.5 * state + 0.5 * report
}
"""
PROGRAM = compile_environment(DESK, "desk.rubric")
# A Qwen-style template that writes tools its own way (not the Hermes block), then plain ChatML.
TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{{ messages[0]['content'] }}\nFunctions:{% for tool in tools %}"
    "{{ '\\n* ' + tool.function.name }} {{ tool.function.parameters | tojson }}{% endfor %}<|im_end|>\n"
    "{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif %}"
    "{%- for message in rest %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def smollm2() -> Any:
    return AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"), local_files_only=True)


@pytest.fixture(scope="module")
def tools_aware(smollm2: Any) -> Any:
    tokenizer = copy.deepcopy(smollm2)
    tokenizer.chat_template = TOOLS_TEMPLATE
    return tokenizer


def _string(description: str | None = None) -> dict[str, Any]:
    return {"type": "string", **({"description": description} if description else {})}


def test_a_capability_environment_gives_its_tools_as_exact_schemas() -> None:
    env = CapabilityEnvironment(PROGRAM)
    assert env.call_format == "native" and agent_tools(env) == env.tools
    find, rooms, book = env.tools
    assert find == {"type": "function", "function": {
        "name": "find_room", "description": "Looks up rows of the `rooms` table; returns the matching rows as JSON.",
        "parameters": {"type": "object", "properties": {"id": _string("an id")}, "required": ["id"]}}}
    assert rooms["function"]["parameters"] == {
        "type": "object", "required": ["kind", "floor"],
        "properties": {"kind": {"type": "string", "enum": ["single", "double"]}, "floor": {"type": "integer"}}}
    assert book["function"]["name"] == "book"
    assert book["function"]["description"] == "Changes the `rooms` table; refuses when a requirement fails."
    assert book["function"]["parameters"] == {
        "type": "object", "required": ["room", "nights", "note", "rate", "day", "vip"],
        "properties": {"room": _string("an id"), "nights": {"type": "integer"}, "note": {"type": "string"},
                       "rate": {"type": "number"}, "day": _string("a date, written YYYY-MM-DD"),
                       "vip": {"type": "boolean"}}}
    # native: the prompt keeps the instructions, not the prose list; text: as before, and no schemas
    assert "find_room" not in env.system_prompt and "<action>" not in env.system_prompt
    text = CapabilityEnvironment(PROGRAM, call_format="text")
    assert text.tools == [] and "- find_room(id: key) -> rows of rooms" in text.system_prompt
    assert "<action>tool(arg=value, ...)</action>" in text.system_prompt
    with pytest.raises(ValueError, match="call_format must be one of native, text, got 'json'"):
        CapabilityEnvironment(PROGRAM, call_format="json")


def _params(schema: dict[str, Any]) -> dict[str, Any]:
    return schema["function"]["parameters"]


def test_tau2_domains_give_their_toolkits_as_exact_schemas(domains: dict[str, Any]) -> None:
    airline = Tau2Environment(domains["airline"], user=gold_user())
    schemas = {s["function"]["name"]: s for s in airline.tools}
    assert list(schemas) == sorted(domains["airline"].toolkit.tools)
    assert schemas["search_direct_flight"] == {"type": "function", "function": {
        "name": "search_direct_flight", "description": "Bookable direct flights between two airports on a date.",
        "parameters": {"type": "object", "required": ["origin", "destination", "date"], "properties": {
            "origin": _string("IATA code, e.g. 'JFK'"), "destination": _string("IATA code"),
            "date": _string("YYYY-MM-DD")}}}}
    book = _params(schemas["book_reservation"])
    assert book["required"] == ["user_id", "origin", "destination", "flight_type", "cabin", "flights", "passengers",
                                "payment_methods", "total_baggages", "nonfree_baggages", "insurance"]
    assert book["properties"]["cabin"] == {"type": "string", "enum": ["basic_economy", "economy", "business"]}
    assert book["properties"]["payment_methods"] == {"type": "array", "items": {
        "type": "object", "properties": {"payment_id": {"type": "string"}, "amount": {"type": "integer"}},
        "required": ["payment_id", "amount"]}}
    assert book["properties"]["total_baggages"] == {"type": "integer"}
    retail = {s["function"]["name"]: s for s in Tau2Environment(domains["retail"], user=gold_user()).tools}
    exchange = _params(retail["exchange_delivered_order_items"])
    assert exchange["required"] == ["order_id", "item_ids", "new_item_ids", "payment_method_id"]
    assert exchange["properties"]["item_ids"] == {"type": "array", "items": {"type": "string"},
                                                  "description": "item ids, duplicates allowed"}
    for name, spec in domains["retail"].toolkit.tools.items():  # every parameter, named and required as specified
        assert _params(retail[name])["required"] == [p.name for p in spec.params]
    assert "## Tools" not in airline.system_prompt and "<action>" not in airline.system_prompt
    text = Tau2Environment(domains["airline"], user=gold_user(), call_format="text")
    assert text.tools == [] and "## Tools" in text.system_prompt and "<action>tool_name(" in text.system_prompt
    assert agent_tools(letter_env()) == []  # the protocol's default: an environment without tools has none
    assert "tools" not in vars(TextWorldEnvironment)  # TextWorld is one
    wrapped = made_environment("toy_env:bare_letter_env", bare_letter_env)  # a factory's object without `tools`
    assert agent_tools(wrapped) == []


def _hermes(system: str, tools: list[dict[str, Any]]) -> str:
    """Qwen2.5's tool block, transcribed from its chat template."""
    lines = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (f"{system}\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>{lines}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def test_smollm2_gets_the_hermes_block_in_its_system_message(smollm2: Any) -> None:
    env = CapabilityEnvironment(PROGRAM)
    messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": "Book R1."}]
    assert not conversation.renders_tools(smollm2)  # its template ignores tools=
    text = conversation.render(smollm2, messages, tools=env.tools)
    assert text == (f"<|im_start|>system\n{_hermes(env.system_prompt, env.tools)}<|im_end|>\n"
                    "<|im_start|>user\nBook R1.<|im_end|>\n<|im_start|>assistant\n")
    carried = conversation.with_tools(messages, env.tools)  # what a chat backend is handed
    assert json.loads(carried[0][conversation.TOOLS_KEY]) == env.tools and carried[1:] == messages[1:]
    assert conversation.render(smollm2, carried) == text
    assert conversation.encode(smollm2, carried) == conversation.encode(smollm2, messages, tools=env.tools)
    model, _ = build_tiny_model()  # prompts are only encoded: its weights serve any tokenizer
    ids = TurnTemplate(smollm2).prompt_ids(env.system_prompt, Observation(text="Book R1."), tools=env.tools)
    assert TransformersBackend(model, smollm2).prompt_ids(carried) == ids  # a chat agent's prompt is a rollout's
    peft = PeftAdapters(types.SimpleNamespace(model=model, tokenizer=smollm2, source="probe"))
    assert peft.prompt_ids(carried) == ids
    tiny = build_tokenizer()  # the fallback template: the same block in the system message
    assert conversation.render(tiny, carried).startswith(f"<|system|>\n{_hermes(env.system_prompt, env.tools)}\n")
    assert conversation.render(smollm2, messages, tools=[]) == conversation.render(smollm2, messages)
    with pytest.raises(ValueError, match="message 0: 'tools' must be a JSON list"):
        conversation.render(smollm2, [{**messages[0], "tools": "{not json"}])


def test_a_tools_aware_template_renders_the_tools_its_own_way(tools_aware: Any) -> None:
    env = CapabilityEnvironment(PROGRAM)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert conversation.renders_tools(tools_aware)
    functions = "".join(f"\n* {t['function']['name']} {json.dumps(t['function']['parameters'])}" for t in env.tools)
    expected = (f"<|im_start|>system\nBe brief.\nFunctions:{functions}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                "<|im_start|>assistant\n")
    assert conversation.render(tools_aware, messages, tools=env.tools) == expected
    assert "# Tools" not in expected
    # the turn template too: the first prompt and each observation's continuation under the same tools
    turns = TurnTemplate(tools_aware)
    prompt = turns.prompt_ids("Be brief.", Observation(text="Hi"), tools=env.tools)
    assert tools_aware.decode(prompt) == expected
    reply = tools_aware("Ok.", add_special_tokens=False)["input_ids"] + [turns.end_of_turn_id]
    after = turns.observation_ids(Observation(text='{"rows": []}', role="tool"), closed=True, tools=env.tools)
    whole = conversation.render(tools_aware, [*messages, {"role": "assistant", "content": "Ok."},
                                              {"role": "tool", "content": '{"rows": []}'}], tools=env.tools)
    assert tools_aware.decode(prompt + reply + after) == whole


class NativeGold:
    """Answers in the native format: the hidden solution's calls, then the values to report."""

    def __init__(self, env: CapabilityEnvironment) -> None:
        self.env = env
        self.seen: list[list[dict[str, str]]] = []

    def act(self, messages: Sequence[dict[str, str]]) -> str:
        self.seen.append(list(messages))
        assert self.env.scenario is not None
        done = sum(m["role"] == "assistant" for m in messages)
        calls = self.env.scenario.gold_calls
        if done < len(calls):
            return format_native_call(calls[done].name, calls[done].arguments)
        return "I am done: you are on floor " + ", ".join(show(v) for v in self.env.scenario.report) + "."


def test_a_native_episode_of_a_capability_environment_succeeds() -> None:
    env = CapabilityEnvironment(PROGRAM)
    agent = NativeGold(env)
    record = run_episode(env, agent, 3, 6)
    assert record["success"] and record["env_reward"] == 1.0
    assert [a["kind"] for a in record["actions"]] == ["query", "mutate", "message"]  # the user ends it there
    system = agent.seen[0][0]
    assert system["content"] == env.system_prompt and json.loads(system[conversation.TOOLS_KEY]) == env.tools
    assert agent.seen[1][2]["content"].startswith("<tool_call>\n{")  # its turn, kept as written


def test_a_chat_backend_agent_is_prompted_with_the_tools() -> None:
    model, tokenizer = build_tiny_model(0)
    backend = TransformersBackend(model, tokenizer)
    prompts: list[str] = []
    rendered = backend.render

    def recording(messages: list[dict[str, str]], **options: Any) -> str:
        prompts.append(rendered(messages, **options))
        return "I am done."

    backend.generate = recording  # type: ignore[method-assign]
    env = CapabilityEnvironment(PROGRAM)
    run_episode(env, ChatAgent(backend), 0, 1)
    assert _hermes(env.system_prompt, env.tools) in prompts[0]
    body = OpenAIChatBackend(HTTPConfig(base_url="http://127.0.0.1:1/v1", model="m"))._body(
        conversation.with_tools([{"role": "system", "content": "S"}], env.tools), Sampling(), 1, 0)
    assert body["messages"] == [{"role": "system", "content": _hermes("S", env.tools)}]  # no `tools` key sent


def _json_error(body: str) -> str:
    try:
        json.loads(body)
    except json.JSONDecodeError as error:
        return f"<tool_call>: invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
    raise AssertionError("valid JSON")


def test_malformed_native_calls_give_located_errors(domains: dict[str, Any]) -> None:
    broken = '{"name": "find_room", "arguments": {"id": "R1"}'
    cases = {
        f"<tool_call>{broken}</tool_call>": _json_error(broken),
        '<tool_call>\n{"name": "find_room",\n "arguments": {"id": R1}}\n</tool_call>':
            _json_error('{"name": "find_room",\n "arguments": {"id": R1}}'),
        '<tool_call>{"arguments": {"id": "R1"}}</tool_call>': '<tool_call>: "name" must be a tool name, got null',
        '<tool_call>{"name": "find_room", "arguments": ["R1"]}</tool_call>':
            '<tool_call>: "arguments" must be an object',
        '<tool_call>{"name": "find_room", "arguments": "{\\"id\\": "}</tool_call>':
            '<tool_call> "arguments": invalid JSON at line 1 column 8: Expecting value',
        '<tool_call>{"name": "find_rooms", "arguments": {"id": "R1"}}</tool_call>':
            "unknown tool `find_rooms` (did you mean `find_room`?); tools are: find_room, list_rooms, book",
        '<tool_call>{"name": "list_rooms", "arguments": {"kind": "single", "floor": "two"}}</tool_call>':
            "argument `floor` of `list_rooms`: expected a number, got `two`",
        '<tool_call>{"name": "list_rooms", "arguments": {"kind": "suite", "floor": 2}}</tool_call>':
            "argument `kind` of `list_rooms`: expected one of single, double, got `suite`",
        '<tool_call>{"name": "find_room", "arguments": {"id": "R1"}': "<tool_call> is not closed with </tool_call>",
    }
    env = CapabilityEnvironment(PROGRAM)
    env.reset(0)
    for text, message in cases.items():
        result = env.step(text)
        assert result.observation.role == "tool"
        assert json.loads(result.observation.text) == {"error": message}, text
    assert _json_error(broken) == "<tool_call>: invalid JSON at line 1 column 48: Expecting ',' delimiter"
    tau2 = Tau2Environment(domains["airline"], user=scripted_user(["Hi."]), task_ids=["0"])
    tau2.reset(0)
    answers = {
        f"<tool_call>{broken}</tool_call>": f"Error: could not read the tool call: {_json_error(broken)}",
        '<tool_call>{"name": "fly_me", "arguments": {}}</tool_call>': "Error: Tool 'fly_me' not found. Tools: ",
        '<tool_call>{"name": "update_reservation_baggages", "arguments": {"reservation_id": "R", "total_baggages":'
        ' "two", "nonfree_baggages": 0, "payment_id": "P"}}</tool_call>':
            "Error: argument `total_baggages` must be a whole number, got 'two'",
    }
    for text, message in answers.items():
        assert tau2.step(text).observation.text.startswith(message), text


def test_the_hint_is_the_same_guidance_in_both_formats_and_holds_no_call() -> None:
    env = CapabilityEnvironment(PROGRAM)
    env.reset(5)
    hint = env.hint()
    assert hint is not None and env.scenario is not None
    for call in env.scenario.gold_calls:
        assert format_native_call(call.name, call.arguments) not in hint
        assert format_tool_call(call.name, call.arguments) not in hint
    assert "<tool_call>" not in hint and "<action>" not in hint and parse_tool_call(hint) is None
    text = CapabilityEnvironment(PROGRAM, call_format="text")
    text.reset(5)
    assert text.hint() == hint


class ScriptedSampler:
    """A `TurnSampler` that plays fixed turns (their ids, as if drawn): the mask is then the engine's, no model's."""

    def __init__(self, tokenizer: Any, end: int, script: Sequence[str]) -> None:
        self.turns = [list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [end] for text in script]
        self.taken: dict[int, int] = {}
        self.prompts: dict[int, list[int]] = {}

    def sample(self, requests: Sequence[TurnRequest]) -> list[SampledTurn]:
        out = []
        for request in requests:
            turn = self.taken.get(request.key, 0)
            self.prompts.setdefault(request.key, list(request.context))
            self.taken[request.key] = turn + 1
            ids = self.turns[turn]
            out.append(SampledTurn(ids=ids, logprobs=[-0.5] * len(ids), closed=True))
        return out

    def release(self, keys: Sequence[int]) -> None: ...

    def reset(self) -> None: ...

    def sync(self, policy: Any) -> None: ...


def test_only_a_native_calls_tokens_carry_the_advantage(smollm2: Any) -> None:
    template = TurnTemplate(smollm2)
    scenario = PROGRAM.scenario(2)
    calls = [format_native_call(c.name, c.arguments) for c in scenario.gold_calls]
    tail = "\nChecking the room now."
    script = [f"<think>Find it first.</think>{calls[0]}{tail}", calls[1], f"Done: floor {show(scenario.report[0])}."]
    sampler = ScriptedSampler(smollm2, template.end_of_turn_id, script)
    engine = RolloutEngine(sampler, template, lambda: CapabilityEnvironment(PROGRAM), RolloutSection(max_new_tokens=96),
                           max_turns=4)
    (episode,) = engine.run([GroupTask(group=0, seed=2)], group_size=1, seed=0, iteration=0)
    assert episode.success and episode.turns == 3
    env = CapabilityEnvironment(PROGRAM)
    prompt = template.prompt_ids(env.system_prompt, env.reset(2), tools=env.tools)
    assert sampler.prompts[0] == prompt and episode.token_ids[:len(prompt)].tolist() == prompt
    assert "# Tools" in smollm2.decode(prompt) and '"name": "book"' in smollm2.decode(prompt)
    assert (episode.step_of_token[:len(prompt)] == -1).all()  # the tools block is context
    for step, call in enumerate(calls):  # the call's tokens, tags included, and nothing else (but the token that
        #   holds the end of `</think>` and the start of `<tool_call>`)
        shown = smollm2.decode(episode.token_ids[episode.step_of_token == step].tolist()).strip()
        assert shown == call if step else shown.endswith(call) and len(shown) <= len(call) + 2
    first = sampler.turns[0]
    start, stop = template.action_token_range(first)
    assert smollm2.decode(first[:start]).startswith("<think>Find it first.</think")  # `>` may share the call's token
    assert smollm2.decode(first[stop:-1]).strip() == tail.strip() and stop < len(first) - 1
    message = episode.token_ids[episode.step_of_token == 2].tolist()
    assert smollm2.decode(message) == script[2]
    assert int(np.sum(episode.sampled)) == sum(len(t) for t in sampler.turns)


def test_call_format_is_a_checked_option_of_the_env_and_the_target(tmp_path: Path) -> None:
    assert EnvSection(kind="tau2").call_format == "native" and TargetSection().call_format == "native"
    with pytest.raises(FieldError, match="choose one of \"native\", \"text\""):
        EnvSection(kind="tau2", call_format="json")
    with pytest.raises(FieldError, match="did you mean \"native\""):
        TargetSection(call_format="natve")
    config = tmp_path / "run.toml"
    config.write_text('[env]\nmax_turns = 2\ncall_format = "xml"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{config}:3:1: error: env.call_format = \"xml\""):
        load_config(config)
    assert load_config(None, ["env.call_format=text"]).env.call_format == "text"


def test_playing_by_hand_shows_the_prompt_of_the_format() -> None:
    native, text = io.StringIO(), io.StringIO()
    play(PROGRAM, 0, io.StringIO(""), native)
    play(PROGRAM, 0, io.StringIO(""), text, call_format="text")
    assert "# Tools" in native.getvalue() and '"name": "find_room"' in native.getvalue()
    assert "# Tools" not in text.getvalue() and "- find_room(id: key)" in text.getvalue()


def test_tracec_env_play_takes_the_call_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rubric = tmp_path / "desk.rubric"
    rubric.write_text(DESK, encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO('<tool_call>{"name": "find_room", "arguments": {"id": "R1"}}'
                                                 "</tool_call>\n"))
    assert cli_main(["env", str(rubric), "--play", "--call-format", "text"]) == 0
    out = capsys.readouterr().out
    assert "- find_room(id: key)" in out and "# Tools" not in out and "agent> []\n" in out  # either spelling is read
    assert cli_main(["env", "validate", str(rubric), "--call-format", "text"]) == 2
    assert "--call-format does not go with `tracec env validate FILE`" in capsys.readouterr().err


def test_a_tiny_model_trains_in_the_native_format(tmp_path: Path) -> None:
    rubric = tmp_path / "desk.rubric"
    rubric.write_text(DESK, encoding="utf-8")
    config = load_config(None, ["model.name=tiny", "model.threads=1", "lora.rank=4", "lora.alpha=8",
                                "rollout.group_size=2", "rollout.groups_per_batch=1", "rollout.max_new_tokens=12",
                                "rollout.max_context_tokens=4096", "rollout.hint_ratio=[0.5, 0.5]", "optim.lr=3e-3",
                                "optim.mini_batches=1", "iterations=1", f"env.capability.path={rubric}",
                                "env.max_turns=2", "advantage.filter_constant_groups=false"])
    assert config.env.call_format == "native"
    given: list[int] = []

    class Counted(CapabilityEnvironment):
        @property
        def tools(self) -> list[dict[str, Any]]:
            given.append(len(super().tools))
            return super().tools

    result = train(config, out=tmp_path / "run", make_env=lambda: Counted(PROGRAM))
    assert result.metrics[0]["optimizer_steps"] >= 1 and result.metrics[0]["hinted_fraction"] == 0.5
    assert given and set(given) == {3}  # every episode's prompt was rendered with the three schemas
