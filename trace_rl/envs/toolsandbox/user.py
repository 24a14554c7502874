"""ToolSandbox's simulated user on a chat model: the benchmark's user simulator, behind the one user protocol.

`simulated_user(backend, scenario)` is a `tracec.trace_rl.envs.users.User` for one scenario, as tau2's `tau2_user`
is for a task: its system prompt is the scenario's `user_instruction` (the benchmark's role-play instruction, then
the user's task), its first message the scenario's fixed opening (`start(first_message)` says it unchanged, as the
benchmark's user does), and each reply is the backend's answer with the roles flipped (the agent's messages are
`user` turns, its own `assistant` turns). The benchmark gives its simulator an `end_conversation` tool; a chat
model without tools is told to write `end_conversation()`, and a reply naming it (or holding an end token,
`###STOP###`) ends the conversation, recorded as written.
Left out: the simulator's few-shot messages and the benchmark's tool-call plumbing for the user's side.
"""

from __future__ import annotations

import re

from tracec.trace_rl.envs.toolsandbox.scenarios import Scenario
from tracec.trace_rl.envs.users import STOP, Reply, end_token
from tracec.trace_rl.llm.chat import ChatBackend

TOOL_NOTE = ("\n\nTo use the tool `end_conversation`, reply with end_conversation() alone; "
             "anything else you write is said to User B.")
_ENDS = re.compile(r"\bend_conversation\b", re.IGNORECASE)


class SimulatedUser:
    """`backend` playing the user of one scenario under `instruction` (its system prompt)."""

    def __init__(self, backend: ChatBackend, instruction: str) -> None:
        self.backend, self.instruction = backend, instruction
        self.messages: list[dict[str, str]] = []

    def start(self, scenario: str, greeting: str | None = None) -> str:
        """`scenario` is the fixed first message; ToolSandbox's user speaks first (`greeting` is never given)."""
        self.messages = [{"role": "system", "content": self.instruction}, {"role": "assistant", "content": scenario}]
        return scenario

    def respond(self, message: str) -> Reply:
        self.messages.append({"role": "user", "content": message})
        written = self.backend.generate(list(self.messages))
        self.messages.append({"role": "assistant", "content": written})
        ends = _ENDS.search(written) is not None or end_token(written) is not None
        return Reply(text=written.strip(), end=STOP if ends else None)


def simulated_user(backend: ChatBackend, scenario: Scenario) -> SimulatedUser:
    """The benchmark's user simulator for `scenario` on `backend` (the environment's `user_for`, with
    `functools.partial(simulated_user, backend)`)."""
    return SimulatedUser(backend, scenario.user_instruction + TOOL_NOTE)
