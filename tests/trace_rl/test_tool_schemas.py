"""Format fidelity of synthetic environments: the target's tool schemas (tau2's, or a JSON file), the check that an
environment declares exactly them, the writer's prompt and repair loop with a scripted LLM, and the library on tau2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted_llm import ScriptedLLM
from tracec.cli import main
from tracec.trace_rl.envs.capability import compile_environment, load_environment
from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.targeting.synth.env import EnvSettings, Target, synthesize
from tracec.trace_rl.targeting.synth.library import load_library
from tracec.trace_rl.targeting.synth.tool_schemas import (
    TargetTools,
    ToolsFileError,
    differences,
    load_tools,
    read_tools,
    target_tools,
    tau2_tools,
    transfer_rationale,
)

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "examples" / "envs"
SHIPPED = (LIBRARY / "precondition_verification.rubric").read_text()
WRITTEN = SHIPPED.replace("cancel_unshipped", "careful_cancel").replace(
    "capability precondition_verification", "capability careful_order_cancellation")
RENAMED = WRITTEN.replace("(order_id: key", "(order: key").replace("$order_id", "$order")
RETAIL = tau2_tools(["retail"])
TARGET = Target(name="careful_order_cancellation", description="looks at each order before cancelling it",
                tools=RETAIL)


def tools_of(source: str) -> list:
    return [t.info for t in compile_environment(source).tools.values()]


def fenced(source: str) -> str:
    return f"Here it is.\n```rubric\n{source}```\n"


def test_tau2_schemas_are_the_toolkits_with_every_parameter_typed() -> None:
    tools = tau2_tools(["airline", "retail"])
    names = [t.name for t in tools.tools]
    assert len(names) == len(set(names)) and {"get_user_details", "calculate", "cancel_pending_order"} <= set(names)
    bags = tools.tool("update_reservation_baggages")
    assert bags is not None and [(p.name, p.type, p.required) for p in bags.params] == [
        ("reservation_id", "string", True), ("total_baggages", "integer", True), ("nonfree_baggages", "integer", True),
        ("payment_id", "string", True)]
    reason = RETAIL.tool("cancel_pending_order").param("reason")  # type: ignore[union-attr]
    assert reason is not None and reason.enum == ("no longer needed", "ordered by mistake")
    items = RETAIL.tool("modify_pending_order_items")
    assert items is not None and not items.declarable  # arrays: the prompt says the language cannot declare it
    assert "modify_pending_order_items" not in RETAIL.prompt_text().split("(Not declarable")[0]
    assert "modify_pending_order_items" in RETAIL.prompt_text().split("(Not declarable")[1]


def test_every_library_environment_keeps_tau2_s_tools_and_says_why_it_transfers() -> None:
    tools = target_tools("tau2")
    for path in sorted(LIBRARY.glob("*.rubric")):
        assert differences([t.info for t in load_environment(str(path)).tools.values()], tools) == [], path.name
        assert (transfer_rationale(path.read_text()) or "").startswith("tau2-bench"), path.name


def test_each_departure_from_the_schemas_is_named() -> None:
    wrong = """environment e "a wrong type and a tool the target lacks" {
  table orders(id: key, n: int 1..3) rows 2..3
  let o = pick(orders)
  task "order {o.id}"
  tool get_order_details(order_id: int) -> orders where n == $order_id
  tool get_order_detail(order_id: key) -> orders where id == $order_id
  solution get_order_details(o.n)
  reward state
}
"""
    found = differences(tools_of(wrong), RETAIL)
    assert found == ["`get_order_details`: parameter `order_id` is `int` (JSON integer) here but string in the target",
                     "tool `get_order_detail` is not one of the target's tools (did you mean `get_order_details`?)"]
    assert differences(tools_of(RENAMED), RETAIL)[0] == (
        "`get_order_details`: parameter `order` is named `order_id` in the target (get_order_details(order_id: "
        "string))")
    enum_tools = TargetTools(name="t", tools=read_tools([{"name": "cancel_pending_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"},
                                         "reason": {"type": "string", "enum": ["a", "b"]}},
        "required": ["order_id", "reason"]}}], "t.json"))
    source = WRITTEN.replace("reason: entity", "reason: enum(a, c)").replace(
        'require $reason in {"no longer needed", "ordered by mistake"} else "the reason is \'no longer needed\' or '
        '\'ordered by mistake\'"', "require $reason == a else \"reason a\"").replace(
        'cancel_pending_order(open.id, "ordered by mistake")', "cancel_pending_order(open.id, a)").replace(
        "  tool get_order_details(order_id: key) -> orders where id == $order_id\n", "").replace(
        "solution get_order_details(x.id); get_order_details(y.id); ", "solution ")
    assert differences(tools_of(source), enum_tools) == [
        "`cancel_pending_order`: parameter `reason` has member(s) c that the target's enum ['a', 'b'] lacks"]
    optional = TargetTools(name="t", tools=read_tools([{"type": "function", "function": {
        "name": "get_order_details", "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string"}, "verbose": {"type": "boolean"}}, "required": ["order_id"]}}}], "t.json"))
    assert [d for d in differences(tools_of(WRITTEN), optional) if d.startswith("`get_order_details`")] == []


def test_a_bad_tools_file_is_a_located_error(tmp_path: Path) -> None:
    bad = tmp_path / "tools.json"
    bad.write_text('[{"name": "a",\n  "parameters": {"type": "object",}}]')
    with pytest.raises(ToolsFileError, match=r"tools.json:2:35: error: not JSON: "):
        load_tools(bad)
    bad.write_text(json.dumps([{"type": "function", "function": {"name": "a", "parameters": {
        "type": "object", "properties": {"x": {"type": "strin"}}}}}]))
    with pytest.raises(ToolsFileError, match=r"tools.json: error: at \$\[0\]\.function\.parameters\.properties\.x\."
                                             r"type: 'strin' is not one of"):
        load_tools(bad)
    bad.write_text(json.dumps([{"name": "a", "parameters": {"type": "object", "properties": {}, "required": ["y"]}}]))
    with pytest.raises(ToolsFileError, match=r"at \$\[0\]\.parameters\.required: 'y' is not one of its properties"):
        load_tools(bad)
    bad.write_text("{}")
    with pytest.raises(ToolsFileError, match="expected a non-empty JSON list of function schemas"):
        load_tools(bad)
    with pytest.raises(ToolsFileError, match="no tau2 domain 'telecom'"):
        target_tools("tau2:telecom")
    out = tmp_path / "out"
    assert main(["synth", "env", "--capability", "x", "--description", "d", "-o", str(out), "--no-calibrate",
                 "--tools", str(bad), "--llm", "http", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]) == 1


def test_the_writer_sees_the_schemas_and_a_renamed_parameter_goes_back_until_fixed(tmp_path: Path) -> None:
    llm = ScriptedLLM([fenced(RENAMED), fenced(WRITTEN)])
    log = CallLog(tmp_path / "llm_calls.jsonl", command="test")
    result = synthesize(llm, TARGET, EnvSettings(tries=3, validate_seeds=10, calibration=None),
                        library=load_library(LIBRARY), use_library=False, policy=None, out_dir=tmp_path, log=log,
                        report=lambda _: None)
    assert result.origin == "llm" and result.attempts == 2 and result.source == WRITTEN
    assert result.transfer == transfer_rationale(WRITTEN)
    assert result.transfer is not None and "cancel_pending_order(order_id, reason)" in result.transfer
    prompt = llm.calls[0][1]["content"]
    assert "The target agent's tools (tau2 retail), as JSON schemas:" in prompt and "# transfer: ..." in prompt
    assert '{"name": "cancel_pending_order", "description": "Cancel a pending order; the payment is refunded."' \
        in prompt
    feedback = llm.calls[1][-1]["content"]
    assert "the environment departs from the target's tools (tau2 retail)" in feedback
    assert ("- `get_order_details`: parameter `order` is named `order_id` in the target (get_order_details(order_id: "
            "string))") in feedback
    assert "- `cancel_pending_order`: parameter `order` is named `order_id` in the target" in feedback


def test_an_environment_without_its_transfer_comment_is_rejected_and_a_faithful_one_passes(tmp_path: Path) -> None:
    silent = "\n".join(line for line in WRITTEN.splitlines() if not line.startswith("#")) + "\n"
    llm = ScriptedLLM([fenced(silent), fenced(WRITTEN)])
    result = synthesize(llm, TARGET, EnvSettings(tries=2, validate_seeds=10, calibration=None),
                        library=load_library(LIBRARY), use_library=False, policy=None, out_dir=tmp_path,
                        log=CallLog(tmp_path / "calls.jsonl", command="test"), report=lambda _: None)
    assert result.attempts == 2
    assert "no `# transfer: ...` comment says why the skill transfers to tau2 retail" in llm.calls[1][-1]["content"]
    # Without target tools the check does not run: the silent environment is accepted as before.
    free = synthesize(ScriptedLLM([fenced(silent)]), Target(name="careful_order_cancellation", description="d"),
                      EnvSettings(tries=1, validate_seeds=10, calibration=None), library=load_library(LIBRARY),
                      use_library=False, policy=None, out_dir=tmp_path / "free",
                      log=CallLog(tmp_path / "free.jsonl", command="test"), report=lambda _: None)
    assert free.attempts == 1 and free.transfer is None


def test_the_pipeline_reads_environments_tools_at_load_time(tmp_path: Path) -> None:
    from pipeline_fixtures import write_config
    from tracec.trace_rl.targeting.pipeline.config import ConfigError, load_pipeline_config

    config = write_config(tmp_path)
    bad = tmp_path / "tools.json"
    bad.write_text("[{")
    with pytest.raises(ConfigError, match=rf"environments\.tools: {bad}:1:3: error: not JSON"):
        load_pipeline_config(config, [f"environments.tools={bad}"])
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"tools": [t.function for t in RETAIL.tools]}))
    loaded = load_pipeline_config(config, [f"environments.tools={good}"])
    assert loaded.environments.tools == str(good) and loaded.environments.keep_tools
    assert load_tools(Path(loaded.environments.tools)).tools == RETAIL.tools


def test_the_pipeline_keeps_a_tau2_target_s_own_tools_unless_told_otherwise() -> None:
    from tracec.trace_rl.targeting.pipeline.config import pipeline_config_from_dict
    from tracec.trace_rl.targeting.pipeline.context import Context
    from tracec.trace_rl.targeting.pipeline.env_steps import _target_tools

    def tools(**sections: dict) -> TargetTools | None:
        config = pipeline_config_from_dict({"analysis": {"rubric": "labels.rubric"}, **sections})
        return _target_tools(Context(config=config, report=print, detail=print))

    kept = tools(target={"kind": "tau2", "tau2": {"domains": ["retail"]}})
    assert kept is not None and kept.name == "tau2 retail" and kept.tools == RETAIL.tools
    assert tools(target={"kind": "tau2"}, environments={"keep_tools": False}) is None
    assert tools(target={"kind": "capability", "environments": [str(LIBRARY / "datetime_reasoning.rubric")]}) is None
