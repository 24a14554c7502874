"""examples/customer_service.rubric on tau2-bench's retail domain (its real tools and database): gold episodes are
never punished, random ones are, and its capabilities tell them apart.

The rubric's `service` schema is tau-bench's retail seen by a support desk; `service_record` turns a tau2 episode
into it (identity verified by a user lookup, orders checked by `get_order_details`, cancellations and returns
accepted so far), from what the environment's steps gave (the toolenv facts and the tool results). Its instructions read
"You are NAME (EMAIL). Cancel order #W...", so each task's instruction is written from its one cancel, return or
exchange.
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
from tracec.runtime.facts.fact_batch import build_fact_batch
from tracec.runtime.facts.trajectories.jsonl import read_trajectories
from tracec.runtime.facts.trajectories.records import write_records
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.envs.agent import Message, run_episode, turns_taken
from tracec.trace_rl.envs.protocol import Environment, Observation, StepResult
from tracec.trace_rl.envs.tau2.environment import Tau2Environment, scripted_user
from tracec.trace_rl.envs.tau2.gold import OPENING, gold_script, replay_gold
from tracec.trace_rl.envs.tau2.tasks import GoldAction, Task
from tracec.trace_rl.envs.toolcall import ToolCall, format_tool_call, parse_tool_call

RUBRIC = Path(__file__).resolve().parents[2] / "examples" / "customer_service.rubric"
WANTS = {"cancel_pending_order": "Cancel", "return_delivered_order_items": "Return",
         "exchange_delivered_order_items": "Exchange"}
IDENTIFY = {"find_user_id_by_email", "find_user_id_by_name_zip", "get_user_details"}


class Steps(Environment):
    """The tau2 environment, keeping what each step gave: its facts and the tool's result."""

    def __init__(self, env: Tau2Environment) -> None:
        self.env, self.results = env, []  # type: ignore[var-annotated]

    @property
    def system_prompt(self) -> str:
        return self.env.system_prompt

    def reset(self, seed: int) -> Observation:
        self.results = []
        return self.env.reset(seed)

    def step(self, action: str) -> StepResult:
        self.results.append(self.env.step(action))
        return self.results[-1]

    def trajectory(self, episode: str) -> dict[str, Any]:
        return self.env.trajectory(episode)


def service_record(played: Steps, episode_id: str, instruction: str) -> dict[str, Any]:
    verified, checked, cancelled, returned = False, set(), set(), set()
    states: list[dict[str, Any]] = [{"verified": False, "checked": [], "cancelled": [], "returned": [], "error": ""}]
    actions = []
    for result in played.results:
        facts, error = result.action, result.state.get("last_error", "")
        if facts["kind"] == "message":
            action = {"tool": "respond", "kind": "respond", "args": [], "args_ok": True, "accepted": True,
                      "n_rows": 0, "message": facts["text"]}
        else:
            call = parse_tool_call(facts["text"])
            arguments = call.arguments if isinstance(call, ToolCall) else {}
            tool, accepted = facts.get("tool"), facts["accepted"]
            kind = "transfer" if tool == "transfer_to_human_agents" else facts["kind"]
            action = {"args": facts["args"], "accepted": accepted,
                      "args_ok": kind != "invalid" and not re.search(r"\bargument", error),
                      "n_rows": _rows(result.observation.text) if accepted and kind == "query" else 0}
            if kind != "invalid":
                action["kind"] = kind
            if tool is not None:
                action["tool"] = tool
            if isinstance(arguments.get("order_id"), str):
                action["order"] = arguments["order_id"]
            if accepted:
                verified |= tool in IDENTIFY
                order = arguments.get("order_id")
                checked |= {order} if tool == "get_order_details" else set()
                cancelled |= {order} if tool == "cancel_pending_order" else set()
                returned |= {order} if tool == "return_delivered_order_items" else set()
        actions.append(action)
        states.append({"verified": verified, "checked": sorted(checked), "cancelled": sorted(cancelled),
                       "returned": sorted(returned), "error": error})
    reward = played.env.score().reward
    return {"episode": episode_id, "task": played.env.task.key, "instruction": instruction, "states": states,
            "actions": actions, "env_reward": reward, "success": reward == 1.0}


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
             GoldAction(action_id="check", name="get_order_details",
                        arguments={"order_id": change.arguments["order_id"]})]
    return dataclasses.replace(task, actions=(*first, *task.actions))


class Script:
    """Says `turns` in order, the last one again once they run out."""

    def __init__(self, turns: tuple[str, ...]) -> None:
        self.turns = turns

    def act(self, messages: list[Message]) -> str:
        return self.turns[min(turns_taken(messages), len(self.turns) - 1)]


class RandomAgent:
    """Random retail calls (ids of this and other orders, made-up values, wrong types), transfers and messages."""

    def __init__(self, domain, values: list[Any], seed: int):
        self.rng, self.values = random.Random(seed), values
        self.tools = sorted(domain.toolkit.tools.values(), key=lambda tool: tool.name)

    def act(self, messages):
        if self.rng.random() < 0.2:
            return self.rng.choice(["Let me look into that.",
                                    "<action>transfer_to_human_agents(summary=\"help\")</action>"])
        tool = self.rng.choice(self.tools)
        arguments = {p.name: self.rng.choice(self.values) for p in tool.params if self.rng.random() < 0.9}
        return format_tool_call(tool.name, arguments)


@pytest.fixture(scope="module")
def played(domains, tmp_path_factory):
    domain = domains["retail"]
    tasks = _one_order_tasks(domain)
    orders = sorted({a.arguments["order_id"] for task, _ in tasks for a in task.actions if "order_id" in a.arguments})
    records, gold, others = [], [], []
    ids = [task.id for task, _ in tasks]
    random_play = Steps(Tau2Environment(domain, user=scripted_user([OPENING, *["Yes, go ahead."] * 20]), task_ids=ids,
                                        max_steps=12))
    for n, (task, instruction) in enumerate(tasks):
        email = re.search(r"\((\S+@\S+)\)", instruction).group(1)
        script = gold_script(domain, _careful(task, email))
        confirmations = sum(turn.endswith("Do you want me to proceed?") for turn in script)
        gold_play = Steps(Tau2Environment(domain, user=scripted_user([OPENING, *["Yes, I confirm."] * confirmations]),
                                          task_ids=ids))
        run_episode(gold_play, Script(script), n, gold_play.env.max_steps)
        assert gold_play.env.score().reward == 1.0, task.key
        records.append(service_record(gold_play, f"gold-{task.id}", instruction))
        gold.append(f"gold-{task.id}")
        values = [email, *orders[:6], "#W0000000", 3, ["x"], *[v for a in task.actions for v in a.arguments.values()]]
        for k in range(2):
            run_episode(random_play, RandomAgent(domain, values, seed=10 * n + k), n, 12)
            records.append(service_record(random_play, f"random{k}-{task.id}", instruction))
            others.append(f"random{k}-{task.id}")
    path = tmp_path_factory.mktemp("service") / "episodes.jsonl"
    write_records(records, path)
    scorer = RubricScorer.from_file(RUBRIC, backend="interp")
    return scorer, scorer.score(path), gold, others, path


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
