"""examples/tau2.rubric over recorded tau2 episodes: the gold agent asks before it acts, a careless one does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tracec.compiler.backends import compile_kernel
from tracec.compiler.pipeline import compile_capability
from tracec.dsl.check import check
from tracec.dsl.parse import parse_file
from tracec.runtime.agent import run_episode
from tracec.runtime.capabilities import Label, label_episodes
from tracec.runtime.evaluate import RubricScorer
from tracec.runtime.facts import build_fact_batch
from tracec.runtime.output import write_records
from tracec.runtime.toolcall import format_tool_call
from tracec.runtime.trajectories import read_trajectories
from tracec.trace_rl.envs.tau2.environment import Tau2Environment, scripted_user
from tracec.trace_rl.envs.tau2.gold import GoldAgent, gold_user

RUBRIC = Path(__file__).resolve().parents[2] / "examples" / "tau2.rubric"


class Careless:
    """Plays the gold tool calls without ever asking the user."""

    def __init__(self, calls: list[str]):
        self.script = [*calls, "Done."]

    def act(self, messages):
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]


@pytest.fixture(scope="module")
def trajectories(domains, tmp_path_factory):
    domain = domains["retail"]
    task = next(t for t in domain.tasks.values() if any(a.name.startswith(("cancel", "exchange", "return")) for a in t.actions))
    env = Tau2Environment(domain, user=gold_user(), task_ids=[task.id])
    gold = run_episode(env, GoldAgent(env), 0, env.max_steps, episode="gold")
    env = Tau2Environment(domain, user=scripted_user(["Hi, I need some help with my account.", "ok"]), task_ids=[task.id])
    careless = Careless([format_tool_call(a.name, a.arguments) for a in task.actions])
    path = tmp_path_factory.mktemp("tau2") / "episodes.jsonl"
    write_records([gold, run_episode(env, careless, 0, env.max_steps, episode="careless")], path)
    assert gold["env_reward"] == 1.0
    return path


def test_consent_and_blind_changes_are_told_apart(trajectories):
    result = RubricScorer.from_file(RUBRIC, backend="interp").evaluate(trajectories)
    names = list(result.operator_names)
    fired = {name: [] for name in names}
    for record in result.records():
        for name in names:
            if record["ops"][name]:
                fired[name].append(record["episode"])
    assert "gold" in fired["mutates_agreed"] and "gold" not in fired["no_consent"]
    assert "careless" in fired["no_consent"] and "careless" not in fired["mutates_agreed"]
    assert "gold" in fired["asks_consent"] and "careless" not in fired["asks_consent"]
    returns = dict(zip(result.batch.episodes, result.episode_returns()))
    assert returns["gold"] > returns["careless"]


def test_capability_labels_follow_the_episodes(trajectories):
    module = check(parse_file(str(RUBRIC)))
    capability = compile_capability(module.capabilities["consent_before_action"])
    batch = build_fact_batch(read_trajectories(trajectories), capability.plan)
    labels = label_episodes(capability, compile_kernel(capability.program, "interp", None), batch)
    assert dict(zip(batch.episodes, labels)) == {"gold": Label.PRESENT, "careless": Label.LACKING}
    records = [json.loads(line) for line in trajectories.read_text().splitlines()]
    assert all(len(r["states"]) == len(r["actions"]) + 1 for r in records)
