"""examples/tau2.rubric over recorded tau2 episodes: the gold agent asks before it acts, a careless one does not."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

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
from tracec.trace_rl.envs.agent import Message, run_episode, turns_taken
from tracec.trace_rl.envs.tau2.environment import TARGET_KEYS, Tau2Environment, scripted_user
from tracec.trace_rl.envs.tau2.gold import OPENING, GoldAgent, gold_script, gold_user, replay_gold
from tracec.trace_rl.envs.tau2.tasks import GoldAction
from tracec.trace_rl.envs.toolcall import format_tool_call

RUBRIC = Path(__file__).resolve().parents[2] / "examples" / "tau2.rubric"


class Careless:
    """Plays the gold tool calls without ever asking the user."""

    def __init__(self, calls: list[str]):
        self.script = [*calls, "Done."]

    def act(self, messages):
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]


class Script:
    """Says `turns` in order, the last one again once they run out."""

    def __init__(self, turns: tuple[str, ...]):
        self.turns = turns

    def act(self, messages: list[Message]) -> str:
        return self.turns[min(turns_taken(messages), len(self.turns) - 1)]


@pytest.fixture(scope="module")
def trajectories(domains, tmp_path_factory):
    domain = domains["retail"]
    task = next(t for t in domain.tasks.values()
                if any(a.name.startswith(("cancel", "exchange", "return")) for a in t.actions))
    env = Tau2Environment(domain, user=gold_user(), task_ids=[task.id])
    gold = run_episode(env, GoldAgent(env), 0, env.max_steps, episode="gold")
    env = Tau2Environment(domain, user=scripted_user(["Hi, I need some help with my account.", "ok"]),
                          task_ids=[task.id])
    careless = Careless([format_tool_call(a.name, a.arguments) for a in task.actions])
    path = tmp_path_factory.mktemp("tau2") / "episodes.jsonl"
    write_records([gold, run_episode(env, careless, 0, env.max_steps, episode="careless")], path)
    assert gold["env_reward"] == 1.0
    return path


def test_consent_and_blind_changes_are_told_apart(trajectories):
    result = RubricScorer.from_file(RUBRIC, backend="interp").score(trajectories)
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


# The tool that reads the record a mutation names (its `target`, `tau2.environment.TARGET_KEYS`), per id argument.
LOOKUPS = {"reservation_id": "get_reservation_details", "order_id": "get_order_details", "user_id": "get_user_details"}


def _reading_first(domain, task):
    """The task with a lookup of each mutation's record before it, as the policy asks: the benchmark's gold
    action lists hold only the essential calls, and a change to a record never read is what `blind_change` means."""
    actions, read = [], set()
    for action in task.actions:
        tool = domain.toolkit.tools[action.name]
        key = next((k for k in TARGET_KEYS if k in action.arguments), None)
        if tool.kind == "mutate" and key in LOOKUPS and action.arguments[key] not in read:
            actions.append(GoldAction(action_id=f"read-{action.action_id}", name=LOOKUPS[key],
                                      arguments={key: action.arguments[key]}))
            read.add(action.arguments[key])
        actions.append(action)
    return dataclasses.replace(task, actions=tuple(actions))


class RandomAgent:
    """Random turns: a tool of the domain with ids drawn from the task's gold calls (or made up), a malformed or
    unknown call, or a message."""

    def __init__(self, domain, task, seed: int):
        self.rng = random.Random(seed)
        self.tools = sorted(domain.toolkit.tools.values(), key=lambda tool: tool.name)
        self.values = sorted({str(v) for a in task.actions for v in a.arguments.values()
                              if isinstance(v, str)}) or ["x"]

    def act(self, messages):
        roll = self.rng.random()
        if roll < 0.15:
            return self.rng.choice(['<action>cancel_everything(now=true)</action>',
                                    '<action>get_user_details(</action>'])
        if roll < 0.3:
            return self.rng.choice(["Can I help with anything else?", "Let me check that for you."])
        tool = self.rng.choice(self.tools)
        arguments = {p.name: self.rng.choice([*self.values, "W0000000", "no-such-id"]) for p in tool.params}
        return format_tool_call(tool.name, arguments)


@pytest.fixture(scope="module")
def played(domains, tmp_path_factory):
    """Gold episodes (reading first) of every task whose gold calls all succeed, and random and careless play."""
    records, gold, others = [], [], []
    for name, domain in sorted(domains.items()):
        tasks = [t for t in domain.tasks.values() if all(o.accepted for o in replay_gold(domain, t)[1])]
        env = Tau2Environment(domain, user=gold_user(), task_ids=[t.id for t in tasks])
        for seed, task in enumerate(tasks):
            record = run_episode(env, Script(gold_script(domain, _reading_first(domain, task))), seed, env.max_steps,
                                 episode=f"gold-{task.key}")
            assert record["env_reward"] == 1.0, task.key
            records.append(record)
            gold.append(record["episode"])
        user = scripted_user(["Hi, I need help with a booking.", "ok", "No, I do not confirm.", "Sure."] * 5)
        random_env = Tau2Environment(domain, user=user, task_ids=[t.id for t in tasks], max_steps=25)
        careless_env = Tau2Environment(domain, user=scripted_user(["Hi, I need some help with my account.", "ok"]),
                                       task_ids=[t.id for t in tasks])
        for seed, task in enumerate(tasks[:12]):
            careless = Careless([format_tool_call(a.name, a.arguments) for a in task.actions])
            for kind, env_, agent in (("random", random_env, RandomAgent(domain, task, seed=len(others))),
                                      ("careless", careless_env, careless)):
                records.append(run_episode(env_, agent, seed, env_.max_steps, episode=f"{kind}-{task.key}"))
                others.append(f"{kind}-{task.key}")
    path = tmp_path_factory.mktemp("tau2-played") / "episodes.jsonl"
    write_records(records, path)
    scorer = RubricScorer.from_file(RUBRIC, backend="numba", cache=None)
    return scorer, scorer.score(path), gold, others


def test_gold_play_is_never_punished_and_random_play_is(played):
    scorer, result, gold, others = played
    assert len(gold) >= 140
    assert_invalidity_profile(scorer, result, gold, others)


def test_a_user_who_refuses_makes_every_change_unconsented(domains, tmp_path):
    domain = domains["retail"]
    task = next(t for t in domain.tasks.values() if any(a.name.startswith("cancel") for a in t.actions))
    confirmations = sum(turn.endswith("Do you want me to proceed?") for turn in gold_script(domain, task))
    refusing = scripted_user([OPENING, *["No, I do not confirm."] * confirmations])
    env = Tau2Environment(domain, user=refusing, task_ids=[task.id])
    record = run_episode(env, GoldAgent(env), 0, env.max_steps, episode="refused")  # it asks, hears no, acts anyway
    mutations = [action for action in record["actions"] if action["kind"] == "mutate"]
    assert mutations and not any(action["confirmed"] for action in mutations)
    write_records([record], tmp_path / "e.jsonl")
    result = RubricScorer.from_file(RUBRIC, backend="interp").score(tmp_path / "e.jsonl")
    assert result.fired[:, list(result.operator_names).index("no_consent")].sum() == len(mutations)
