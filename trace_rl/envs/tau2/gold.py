"""The gold side of a tau2 task: its actions replayed on a fresh database, and an agent that plays them.

`replay_gold` is the benchmark's gold replay: every gold action in order on a fresh copy, refusals included
(23 retail gold actions are meant to fail: lookups of users, products or orders that do not exist, a refund to
a method that is not the original one, a short gift card, an exchange on an order not delivered) and change
nothing. Its database is what an agent's final database must equal.

`GoldAgent` plays the same actions through the agent's text format, asking the user to confirm before each
mutation (so its trajectories show the behaviour the policy asks for), and ends with one message that carries
every `communicate_info` string. With `gold_user` answering, it scores 1.0 on every task.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tracec.trace_rl.envs.agent import Message, turns_taken
from tracec.trace_rl.envs.tau2.env import Domain, Tau2Outcome, Tau2Tools
from tracec.trace_rl.envs.tau2.tasks import Task
from tracec.trace_rl.envs.toolcall import ToolCall, format_tool_call
from tracec.trace_rl.envs.users import STOP, ScriptedUser

if TYPE_CHECKING:  # the environment scores with `replay_gold`: a run-time import would go in a circle
    from tracec.trace_rl.envs.tau2.environment import Tau2Environment

OPENING = "Hi, I need some help with my account."
CONSENT = "Yes, I confirm. Please go ahead."
ASK = "I am about to run {name} with {args}. Do you want me to proceed?"
FINAL = "All done."


def replay_gold(domain: Domain, task: Task) -> tuple[Tau2Tools, tuple[Tau2Outcome, ...]]:
    """A fresh copy of the domain's tools and database after the task's gold actions, and each action's outcome."""
    tools = Tau2Tools(domain)
    outcomes = tuple(tools.execute(ToolCall(name=a.name, arguments=a.arguments)) for a in task.actions)
    return tools, outcomes


def gold_script(domain: Domain, task: Task) -> tuple[str, ...]:
    """The gold agent's turns: confirm then call for a mutation, a call for a query, a closing message."""
    script: list[str] = []
    for action in task.actions:
        tool = domain.toolkit.tools.get(action.name)
        if tool is not None and tool.kind == "mutate":
            script.append(ASK.format(name=action.name, args=json.dumps(action.arguments, ensure_ascii=False)))
        script.append(format_tool_call(action.name, action.arguments))
    info = "; ".join(task.communicate_info)
    script.append(f"{FINAL} Here is what you asked for: {info}." if info else f"{FINAL} Anything else?")
    return tuple(script)


class GoldAgent:
    """Says the gold script of the task its environment plays, a turn at a time (the closing once it is out)."""

    def __init__(self, env: Tau2Environment) -> None:
        self.env = env
        self._script: tuple[Task | None, tuple[str, ...]] = (None, ())

    def act(self, messages: Sequence[Message]) -> str:
        task = self.env.task
        if task is None:
            raise RuntimeError("the agent acts before the environment was reset")
        if self._script[0] is not task:
            self._script = (task, gold_script(self.env.domain, task))
        script = self._script[1]
        return script[min(turns_taken(messages), len(script) - 1)]


def gold_user() -> ScriptedUser:
    """The user for a gold episode: opens, consents to each mutation the agent announces, and stops when the
    agent's closing message comes."""
    return ScriptedUser([OPENING], then=CONSENT, done_pattern="^" + re.escape(FINAL), closing=STOP)
