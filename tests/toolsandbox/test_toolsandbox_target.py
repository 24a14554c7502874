"""ToolSandbox as a target: `env.kind = "toolsandbox"` and `[target] kind = "toolsandbox"` read and checked (an unknown
scenario is a located error naming the key), the registry's environments with either user, the pipeline's domain
(cut to the selection, seeds in file order), the shipped CPU config, its collect step on two scenarios with the
tiny model, and the per-category numbers written beside the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tracec.trace_rl.envs.agent import run_episode
from tracec.trace_rl.envs.config import EnvSection, ToolSandboxEnvSection
from tracec.trace_rl.envs.registry import environment_factory, toolsandbox_factory
from tracec.trace_rl.envs.toolsandbox import SimulatedUser, ToolSandboxEnvironment, select_scenarios
from tracec.trace_rl.envs.toolsandbox.metrics import category_table
from tracec.trace_rl.envs.toolsandbox.replay import GoldAgent
from tracec.trace_rl.envs.users import STOP
from tracec.trace_rl.grpo.config import load_config
from tracec.trace_rl.targeting.pipeline.config import TargetSection, load_pipeline_config
from tracec.trace_rl.targeting.pipeline.targets import target_domains
from tracec.trace_rl.targeting.pipeline.toolsandbox_target import ToolSandboxTargetSection, fingerprint_values

from tracec.config_io import ConfigError, FieldError, to_dict

REPO = Path(__file__).resolve().parents[2]
CPU_CONFIG = REPO / "examples" / "pipeline" / "cpu_toolsandbox.toml"
TWO = ("wifi_off", "get_wifi")


def test_a_selection_is_names_and_categories_in_file_order(scenarios) -> None:  # type: ignore[no-untyped-def]
    assert select_scenarios(scenarios, ()) == tuple(scenarios.scenarios)
    assert select_scenarios(scenarios, TWO) == ("wifi_off", "get_wifi")  # file order, not the order given
    state = select_scenarios(scenarios, ("state_dependency",))
    assert len(state) == 13 and all("state_dependency" in scenarios.get(n).categories for n in state)
    assert select_scenarios(scenarios, ("get_wifi", "state_dependency"))[0] == "get_wifi"
    with pytest.raises(ValueError, match="did you mean 'state_dependency'"):
        select_scenarios(scenarios, ("state_dependancy",))
    with pytest.raises(ValueError, match="left out: its score needs the web tool search_weather_around_lat_lon"):
        select_scenarios(scenarios, ("find_temperature",))


def test_config_errors_name_the_key_and_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--set env.toolsandbox.scenarios=\[\"get_wfi\"\]: error: "
                                          r"env.toolsandbox.scenarios = \[\"get_wfi\"\]: .*did you mean 'get_wifi'"):
        load_config(None, ["env.kind=toolsandbox", 'env.toolsandbox.scenarios=["get_wfi"]'])
    with pytest.raises(ConfigError, match='env.toolsandbox.user = "base": choose one of "scripted", "llm"'):
        load_config(None, ["env.kind=toolsandbox", "env.toolsandbox.user=base"])
    config = load_config(None, ["env.kind=toolsandbox", 'env.toolsandbox.scenarios=["state_dependency"]'])
    assert config.env.toolsandbox == ToolSandboxEnvSection(scenarios=("state_dependency",))
    text = CPU_CONFIG.read_text().replace('scenarios = ["state_dependency"]', 'scenarios = ["wifi_of"]')
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('"../toolsandbox.rubric"', json.dumps(str(REPO / "examples" / "toolsandbox.rubric")))
                   .replace('"../toolenv.rubric"', json.dumps(str(REPO / "examples" / "toolenv.rubric"))))
    line = next(n for n, t in enumerate(bad.read_text().splitlines(), 1) if t.startswith("scenarios ="))
    with pytest.raises(ConfigError, match=rf"^{bad}:{line}:1: error: target.toolsandbox.scenarios = \[\"wifi_of\"\]: "
                                          r"no ToolSandbox scenario or category 'wifi_of'; did you mean 'wifi_off'"):
        load_pipeline_config(bad)
    with pytest.raises(FieldError, match="user"):
        ToolSandboxTargetSection(user="llm")


def test_the_registry_makes_fresh_environments_with_either_user(scenarios) -> None:  # type: ignore[no-untyped-def]
    make = environment_factory(EnvSection(kind="toolsandbox", max_turns=6, toolsandbox=ToolSandboxEnvSection(
        scenarios=TWO)))
    first, second = make(), make()
    assert first is not second and isinstance(first, ToolSandboxEnvironment)
    assert [s.name for s in first.scenarios] == list(TWO) and first.max_steps == 6
    record = run_episode(first, GoldAgent(first), 1, 6, episode="gold")  # seed 1: get_wifi
    assert record["success"] and record["categories"] == ["single_tool_call", "single_user_turn"]
    assert record["evaluation"]["similarity"] == 1.0

    class Backend:  # a chat model that answers once, then ends the conversation as the benchmark's user does
        def __init__(self) -> None:
            self.seen: list[list[dict[str, str]]] = []

        def generate(self, messages: list[dict[str, str]]) -> str:
            self.seen.append(messages)
            return "It should be on." if len(self.seen) == 1 else "end_conversation()"

    backend = Backend()
    env = toolsandbox_factory(("get_wifi",), user=backend, max_turns=6)()
    assert env.reset(0).text == "Is my wifi on?"  # the fixed opening, whatever the user model
    assert isinstance(env.user, SimulatedUser)
    assert env.step("Which network?").observation.text == "It should be on."
    last = env.step("Let me check.")
    assert last.done and env.trajectory("e")["end"] == "stop" and last.observation.text == "end_conversation()"
    system, opening, *_ = backend.seen[0]
    assert system["role"] == "system" and system["content"].startswith("You are no longer an assistant.")
    assert scenarios.get("get_wifi").user_task in system["content"] and "end_conversation()" in system["content"]
    assert opening == {"role": "assistant", "content": "Is my wifi on?"}
    assert backend.seen[0][-1] == {"role": "user", "content": "Which network?"}
    assert env.user.respond("x").end == STOP


def test_the_pipeline_target_is_one_domain_cut_to_the_selection() -> None:
    target = TargetSection(kind="toolsandbox", toolsandbox=ToolSandboxTargetSection(scenarios=("state_dependency",),
                                                                                    user="scripted"))
    (domain,) = target_domains(target, first_seed=10, tasks=5)
    assert (domain.name, domain.seeds) == ("toolsandbox", (10, 11, 12))  # 13 scenarios
    assert domain.first_message(12) == domain.make_env().reset(12).text
    with pytest.raises(ConfigError, match="toolsandbox has 13 scenarios selected; a first seed of 13 leaves none"):
        target_domains(target, first_seed=13, tasks=1)
    with pytest.raises(ConfigError, match="needs the base model"):
        target_domains(TargetSection(kind="toolsandbox"), first_seed=0, tasks=1)
    # the ToolSandbox settings at their defaults leave other targets' hashes as they were before them
    assert "toolsandbox" not in fingerprint_values(to_dict(TargetSection()))
    assert fingerprint_values(to_dict(target))["toolsandbox"]["scenarios"] == ["state_dependency"]
    assert "toolsandbox" not in fingerprint_values(to_dict(load_config(None)))["env"]


def test_the_cpu_config_loads_and_names_files_that_exist() -> None:
    config = load_pipeline_config(CPU_CONFIG)
    assert config.target.kind == "toolsandbox" and config.target.toolsandbox.user == "base"
    assert config.analysis.labeler == "rubric" and config.llm.backend == "none" and config.model.device == "cpu"
    assert Path(config.analysis.rubric).is_file() and Path(config.train.advantage.rubric).is_file()
    assert config.collect.first_seed + config.collect.tasks <= config.evaluate.first_seed  # held out
    (domain,) = target_domains(config.target, first_seed=config.evaluate.first_seed, tasks=config.evaluate.tasks,
                               user=object())  # type: ignore[arg-type]
    assert len(domain.seeds) == config.evaluate.tasks


def test_the_collect_step_plays_two_scenarios_with_the_tiny_model(tmp_path: Path) -> None:
    from tracec.trace_rl.targeting.pipeline import analysis_steps
    from tracec.trace_rl.targeting.pipeline.context import Context

    config = load_pipeline_config(CPU_CONFIG, [
        "model.name=tiny", f"run.out={json.dumps(str(tmp_path / 'run'))}", "target.max_turns=2",
        f"target.toolsandbox.scenarios={json.dumps(list(TWO))}", "target.call_format=text", "collect.tasks=2",
        "collect.max_new_tokens=6", "evaluate.first_seed=0"])
    folder = tmp_path / "collect"
    folder.mkdir()
    lines: list[str] = []
    summary = analysis_steps.collect(Context(config=config, report=lines.append, detail=lines.append), folder)
    assert summary.startswith("2 base episodes, 0 passed, mean similarity ")
    records = [json.loads(t) for t in (folder / "trajectories" / "base.jsonl").read_text().splitlines()]
    assert [r["task"] for r in records] == ["toolsandbox/wifi_off", "toolsandbox/get_wifi"]
    assert all(len(r["actions"]) <= 2 and "evaluation" in r for r in records)
    saved = json.loads((folder / "toolsandbox.json").read_text())
    assert saved["table"]["base"]["all"]["count"] == 2 and saved["table"]["base"]["single_tool_call"]["count"] == 2
    assert "| base | all | 2 |" in (folder / "toolsandbox.md").read_text()


def test_the_category_table_counts_a_scenario_in_each_of_its_categories() -> None:
    def record(similarity: float, categories: list[str]) -> dict[str, object]:
        return {"categories": categories, "evaluation": {
            "similarity": similarity, "milestone_similarity": similarity, "minefield_similarity": 0.0,
            "milestone_mapping": [[0, 3, similarity]], "minefield_mapping": [], "turn_count": 4}}

    table = category_table({"base": [record(1.0, ["state_dependency", "multiple_tool_call"]),
                                     record(0.5, ["multiple_tool_call"])], "x": []})
    assert table.categories == ("all", "multiple_tool_call", "state_dependency")
    every = table.summaries[("base", "all")]
    assert (every.count, every.mean_similarity, every.perfect_rate) == (2, 0.75, 0.5)  # exact in binary
    assert table.summaries[("base", "state_dependency")].perfect_rate == 1.0
    assert table.summaries[("x", "all")].count == 0
    assert "| base | multiple_tool_call | 2 | 0.750 | 50.0% | 4.0 |" in table.markdown()
    assert "| x |" not in table.markdown()


def test_tracec_train_plays_toolsandbox_scenarios(tmp_path: Path) -> None:
    from tracec.trace_rl.grpo.preflight import check_located
    from tracec.trace_rl.grpo.train import train

    overrides = ["model.name=tiny", "model.threads=1", "lora.rank=4", "lora.alpha=8", "rollout.group_size=2",
                 "rollout.groups_per_batch=2", "rollout.max_new_tokens=8", "rollout.max_context_tokens=2048",
                 "env.kind=toolsandbox", f"env.toolsandbox.scenarios={json.dumps(list(TWO))}", "env.call_format=text",
                 "env.max_turns=2", "iterations=1", "advantage.kind=trca",
                 f"advantage.rubric={REPO / 'examples' / 'toolsandbox.rubric'}"]
    config = load_config(None, overrides)
    check_located(config, None, overrides)
    (record,) = train(config, out=tmp_path).metrics
    assert 1 <= record["turns_mean"] <= 2 and 0.0 <= record["reward_mean"] <= 1.0
    with pytest.raises(ConfigError, match="rollout.action_mode"):  # a tool environment lists no commands
        check_located(load_config(None, [*overrides, "rollout.action_mode=admissible"]), None, overrides)
