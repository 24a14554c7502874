"""examples/customer_service.rubric on tau2-bench's retail domain (its real tools and database): gold episodes are
never punished, random ones are, and its capabilities tell them apart.

The rubric's `service` schema is tau-bench's retail seen by a support desk; `service_record` turns a tau2 episode
into it (identity verified by a user lookup, orders checked by `get_order_details`, cancellations and returns
accepted so far). Its instructions read "You are NAME (EMAIL). Cancel order #W...", so each task's instruction is
written from its one cancel, return or exchange.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from rubric_checks import assert_invalidity_profile
from tracec.compiler.backends import compile_kernel
from tracec.compiler.pipeline import compile_capability
from tracec.dsl.check import check
from tracec.dsl.parse import parse_file
from tracec.runtime.capabilities import Label, label_episodes
from tracec.runtime.evaluate import RubricScorer
from tracec.runtime.facts import build_fact_batch
from tracec.runtime.output import write_records
from tracec.runtime.toolcall import argument_leaves, format_tool_call
from tracec.runtime.trajectories import read_trajectories
from tracec.trace_rl.envs.tau2.episode import Episode, EpisodeConfig, run_episode
from tracec.trace_rl.envs.tau2.gold import OPENING, GoldAgent, replay_gold
from tracec.trace_rl.envs.tau2.tasks import GoldAction, Task
from tracec.trace_rl.envs.tau2.user import ScriptedUser

RUBRIC = Path(__file__).resolve().parents[2] / "examples" / "customer_service.rubric"
WANTS = {"cancel_pending_order": "Cancel", "return_delivered_order_items": "Return",
         "exchange_delivered_order_items": "Exchange"}
IDENTIFY = {"find_user_id_by_email", "find_user_id_by_name_zip", "get_user_details"}


def service_record(episode: Episode, episode_id: str, instruction: str) -> dict[str, Any]:
    verified, checked, cancelled, returned = False, set(), set(), set()
    states: list[dict[str, Any]] = [{"verified": False, "checked": [], "cancelled": [], "returned": [], "error": ""}]
    actions = []
    for step in episode.steps:
        outcome = step.outcome
        if outcome is None:
            action = {"tool": "respond", "kind": "respond", "args": [], "args_ok": True, "accepted": True,
                      "n_rows": 0, "message": step.text}
        else:
            arguments = outcome.arguments
            error = outcome.error or ""
            kind = "transfer" if outcome.tool == "transfer_to_human_agents" else outcome.kind
            action = {"args": sorted(set(argument_leaves(arguments))), "accepted": outcome.accepted,
                      "args_ok": kind != "invalid" and not re.search(r"\bargument", error),
                      "n_rows": _rows(outcome.content) if outcome.accepted and kind == "query" else 0}
            if kind != "invalid":
                action["kind"] = kind
            if outcome.tool is not None:
                action["tool"] = outcome.tool
            if isinstance(arguments.get("order_id"), str):
                action["order"] = arguments["order_id"]
            if outcome.accepted:
                verified |= outcome.tool in IDENTIFY
                order = arguments.get("order_id")
                checked |= {order} if outcome.tool == "get_order_details" else set()
                cancelled |= {order} if outcome.tool == "cancel_pending_order" else set()
                returned |= {order} if outcome.tool == "return_delivered_order_items" else set()
        actions.append(action)
        states.append({"verified": verified, "checked": sorted(checked), "cancelled": sorted(cancelled),
                       "returned": sorted(returned), "error": "" if outcome is None else outcome.error or ""})
    return {"episode": episode_id, "task": episode.task.key, "instruction": instruction, "states": states,
            "actions": actions, "env_reward": episode.score.reward, "success": episode.score.reward == 1.0}


def _rows(content: str) -> int:
    try:
        result = json.loads(content)
    except ValueError:
        return 1
    return len(result) if isinstance(result, list) else 1


def _one_order_tasks(domain) -> list[tuple[Task, str]]:
    """Tasks with one cancel, return or exchange and gold calls that all succeed, with the instruction written."""
    chosen = []
    for task in domain.tasks.values():
        changes = [a for a in task.actions if domain.toolkit.tools[a.name].kind == "mutate"]
        if len(changes) != 1 or changes[0].name not in WANTS:
            continue
        if not all(outcome.accepted for outcome in replay_gold(domain, task)[1]):
            continue
        order = changes[0].arguments["order_id"]
        user = domain.snapshot.fresh().row("users", domain.snapshot.fresh().row("orders", order)["user_id"])
        name = f"{user['name']['first_name']} {user['name']['last_name']}"
        chosen.append((task, f"You are {name} ({user['email']}). {WANTS[changes[0].name]} order {order}."))
    return chosen


def _careful(task: Task, email: str) -> Task:
    """The gold calls, after verifying the user by email and looking the order up, as the policy asks."""
    change = next(a for a in task.actions if a.name in WANTS)
    first = [GoldAction(action_id="verify", name="find_user_id_by_email", arguments={"email": email}),
             GoldAction(action_id="check", name="get_order_details", arguments={"order_id": change.arguments["order_id"]})]
    return dataclasses.replace(task, actions=(*first, *task.actions))


class RandomAgent:
    """Random retail calls (ids of this and other orders, made-up values, wrong types), transfers and messages."""

    def __init__(self, domain, values: list[Any], seed: int):
        self.rng, self.values = random.Random(seed), values
        self.tools = sorted(domain.toolkit.tools.values(), key=lambda tool: tool.name)

    def generate(self, messages):
        if self.rng.random() < 0.2:
            return self.rng.choice(["Let me look into that.", "<action>transfer_to_human_agents(summary=\"help\")</action>"])
        tool = self.rng.choice(self.tools)
        arguments = {p.name: self.rng.choice(self.values) for p in tool.params if self.rng.random() < 0.9}
        return format_tool_call(tool.name, arguments)


@pytest.fixture(scope="module")
def played(domains, tmp_path_factory):
    domain = domains["retail"]
    tasks = _one_order_tasks(domain)
    orders = sorted({a.arguments["order_id"] for task, _ in tasks for a in task.actions if "order_id" in a.arguments})
    records, gold, others = [], [], []
    for n, (task, instruction) in enumerate(tasks):
        email = re.search(r"\((\S+@\S+)\)", instruction).group(1)
        agent = GoldAgent(domain, _careful(task, email))
        episode = run_episode(domain, task, agent, ScriptedUser([OPENING, *["Yes, I confirm."] * agent.confirmations]))
        assert episode.score.reward == 1.0, task.key
        records.append(service_record(episode, f"gold-{task.id}", instruction))
        gold.append(f"gold-{task.id}")
        values = [email, *orders[:6], "#W0000000", 3, ["x"], *[v for a in task.actions for v in a.arguments.values()]]
        for k in range(2):
            episode = run_episode(domain, task, RandomAgent(domain, values, seed=10 * n + k),
                                  ScriptedUser([OPENING, *["Yes, go ahead."] * 20]), config=EpisodeConfig(max_steps=12))
            records.append(service_record(episode, f"random{k}-{task.id}", instruction))
            others.append(f"random{k}-{task.id}")
    path = tmp_path_factory.mktemp("service") / "episodes.jsonl"
    write_records(records, path)
    scorer = RubricScorer.from_file(RUBRIC, backend="interp")
    return scorer, scorer.evaluate(path), gold, others, path


def test_gold_is_never_punished_and_random_play_is(played):
    scorer, result, gold, others, _ = played
    assert len(gold) >= 10
    fired = assert_invalidity_profile(scorer, result, gold, others)
    for name in ("verifies", "looks_up_order", "confirms", "checked_first"):
        assert set(fired[name]) >= set(gold), name
    done = {op: set(fired[op]) & set(gold) for op in ("cancels", "returns", "exchanges")}
    assert all(done.values()) and set.union(*done.values()) == set(gold)  # each did what it was asked


def test_capabilities_label_gold_present(played):
    _, _, gold, _, path = played
    module = check(parse_file(str(RUBRIC)))
    for name in ("precondition_verification", "identity_verification"):
        capability = compile_capability(module.capabilities[name])
        batch = build_fact_batch(read_trajectories(path), capability.plan)
        labels = dict(zip(batch.episodes, label_episodes(capability, compile_kernel(capability.program, "interp", None),
                                                         batch)))
        assert {labels[episode] for episode in gold} == {Label.PRESENT}, name
