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

from tracec.runtime.toolcall import ToolCall, format_tool_call
from tracec.trace_rl.envs.tau2.env import Domain, Tau2Env, ToolOutcome
from tracec.trace_rl.envs.tau2.tasks import Task
from tracec.trace_rl.envs.tau2.user import ScriptedUser

OPENING = "Hi, I need some help with my account."
CONSENT = "Yes, I confirm. Please go ahead."


def replay_gold(domain: Domain, task: Task) -> tuple[Tau2Env, tuple[ToolOutcome, ...]]:
    """A fresh environment after the task's gold actions, and each action's outcome."""
    env = Tau2Env(domain)
    outcomes = tuple(env.execute(ToolCall(name=a.name, arguments=a.arguments)) for a in task.actions)
    return env, outcomes


class GoldAgent:
    """Says its script a turn at a time: confirm then call for a mutation, a call for a query, a closing."""

    def __init__(self, domain: Domain, task: Task) -> None:
        script: list[str] = []
        for action in task.actions:
            tool = domain.toolkit.tools.get(action.name)
            if tool is not None and tool.kind == "mutate":
                args = json.dumps(action.arguments, ensure_ascii=False)
                script.append(f"I am about to run {action.name} with {args}. Do you want me to proceed?")
            script.append(format_tool_call(action.name, action.arguments))
        info = "; ".join(task.communicate_info)
        script.append(
            f"All done. Here is what you asked for: {info}." if info else "All done. Anything else?"
        )
        self.script = tuple(script)
        self.confirmations = sum(1 for text in script if text.startswith("I am about to run"))
        self._turn = 0

    def generate(self, messages: list[dict[str, str]]) -> str:
        text = self.script[min(self._turn, len(self.script) - 1)]
        self._turn += 1
        return text


def gold_user(agent: GoldAgent) -> ScriptedUser:
    """The user for a gold episode: opens, then consents to each mutation the agent announces."""
    return ScriptedUser((OPENING, *([CONSENT] * agent.confirmations)))
