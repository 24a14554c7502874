"""examples/toolsandbox.rubric over ToolSandbox episodes: it compiles and scores a gold replay's trajectory, no
Invalidity operator fires on any scenario's gold episode, and random play (wrong tools, made-up ids, unreadable
calls) hits each of them; its capability blocks label the gold and the random episodes apart."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from rubric_checks import assert_invalidity_profile
from tracec.compiler.backends import compile_kernel
from tracec.compiler.pipeline import compile_capability
from tracec.dsl.check import check
from tracec.dsl.parse import parse_file
from tracec.runtime.capabilities import Label, label_episodes
from tracec.runtime.facts.fact_batch import build_fact_batch
from tracec.runtime.facts.trajectories.jsonl import read_trajectories
from tracec.runtime.facts.trajectories.records import write_records
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.envs.agent import Message, run_episode
from tracec.trace_rl.envs.toolcall import format_tool_call
from tracec.trace_rl.envs.toolsandbox import ToolSandboxEnvironment
from tracec.trace_rl.envs.toolsandbox.replay import GoldAgent
from tracec.trace_rl.envs.toolsandbox.world import stable_id

RUBRIC = Path(__file__).resolve().parents[2] / "examples" / "toolsandbox.rubric"
MADE_UP = ["no-such-id", stable_id("nobody"), "+10000000001", "wifi"]
UNREADABLE = ["<action>set_wifi_status(</action>", "<tool_call>{oops", "<action>frobnicate(x=1)</action>"]


class RandomAgent:
    """Random turns: one of the scenario's tools (or a tool it does not give) with values drawn from ids of the
    world and made-up ones, an unreadable call, or a message."""

    def __init__(self, env: ToolSandboxEnvironment, seed: int) -> None:
        self.env, self.rng = env, random.Random(seed)

    def act(self, messages: list[Message]) -> str:
        assert self.env.sandbox is not None
        roll = self.rng.random()
        if roll < 0.1:
            return self.rng.choice(UNREADABLE)
        if roll < 0.2:
            return self.rng.choice(["Could you tell me more?", "Done."])
        tools = list(self.env.sandbox.toolbox.tools.values())
        if roll < 0.3 or not tools:
            return format_tool_call("search_stock", {"query": "Apple"})  # a tool no scenario here gives
        tool = self.rng.choice(tools)
        world = self.env.sandbox.world
        known = [row[key] for key, table in (("person_id", "contact"), ("reminder_id", "reminder"))
                 for row in world.table(table)]
        arguments: dict[str, Any] = {}
        for param in tool.params:
            if param.kind == "bool":
                arguments[param.name] = self.rng.random() < 0.5
            elif param.kind in ("int", "float"):
                arguments[param.name] = self.rng.choice([0, 1, 1717581600, -5])
            else:
                arguments[param.name] = self.rng.choice([*known, *MADE_UP])
        return format_tool_call(tool.name, arguments)


def _records(scenarios) -> tuple[list[dict[str, Any]], list[str], list[str]]:  # type: ignore[no-untyped-def]
    env = ToolSandboxEnvironment(scenarios, call_format="text")
    records, gold, others = [], [], []
    for seed in range(len(env.scenarios)):
        record = run_episode(env, GoldAgent(env), seed, env.max_steps, episode=f"gold-{seed}")
        assert record["success"], record["task"]
        records.append(record)
        gold.append(record["episode"])
    for seed in range(0, len(env.scenarios), 2):
        records.append(run_episode(env, RandomAgent(env, seed), seed, 8, episode=f"random-{seed}"))
        others.append(records[-1]["episode"])
    return records, gold, others


@pytest.fixture(scope="module")
def played(scenarios, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    records, gold, others = _records(scenarios)
    path = tmp_path_factory.mktemp("toolsandbox-rubric") / "episodes.jsonl"
    write_records(records, path)
    scorer = RubricScorer.from_file(RUBRIC, backend="interp")
    return scorer, scorer.score(path), gold, others, path


def test_a_gold_replay_scores_and_its_changes_count_as_execution(played) -> None:  # type: ignore[no-untyped-def]
    _, result, gold, _, _ = played
    names = list(result.operator_names)
    returns = dict(zip(result.batch.episodes, result.episode_returns()))
    rows = [r for r in result.records() if r["episode"] == gold[0]]  # cellular_off: one call, one message
    assert [r["ops"]["changes_world"] for r in rows] == [1, 0]
    assert [r["ops"]["reports_back"] for r in rows] == [0, 1]
    assert returns[gold[0]] > 0 and "fixes_setting" in names
    randoms = [returns[e] for e in returns if e not in gold]
    assert sum(returns[g] for g in gold) / len(gold) > sum(randoms) / len(randoms)


def test_gold_play_is_never_punished_and_random_play_is(played) -> None:  # type: ignore[no-untyped-def]
    scorer, result, gold, others, _ = played
    assert len(gold) == 101
    assert_invalidity_profile(scorer, result, gold, others)


def test_the_capability_blocks_label_gold_and_random_play(played) -> None:  # type: ignore[no-untyped-def]
    _, _, gold, others, path = played
    module = check(parse_file(str(RUBRIC)))
    labels = {}
    for name in module.capabilities:
        capability = compile_capability(module.capabilities[name])
        batch = build_fact_batch(read_trajectories(path), capability.plan)
        labels[name] = dict(zip(batch.episodes, label_episodes(
            capability, compile_kernel(capability.program, "interp", None), batch)))
    calls = {record["episode"] for record in _read(path) if any(a["kind"] != "message" for a in record["actions"])}
    assert 0 < len(calls & set(gold)) < len(gold)  # insufficient-information gold says it cannot, calling nothing
    assert all(labels["tool_calling_precision"][g] == (Label.PRESENT if g in calls else Label.LACKING) for g in gold)
    assert all(labels["permission_error_recovery"][g] == Label.NA for g in gold)  # gold is never refused
    assert any(labels["permission_error_recovery"][e] == Label.LACKING for e in others)
    assert any(labels["datetime_reasoning"][g] == Label.PRESENT for g in gold)
    assert any(labels["multi_step_completion"][g] == Label.PRESENT for g in gold)


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
