"""One ToolSandbox episode as the benchmark records it: the messages between system, user, agent and execution
environment, each keeping the world as it was when it was written.

The episode opens with the system's prompt to the agent, the system's instruction to the user and the user's
first message (`first_user_index`: the snapshot a milestone's reference -1 means). A tool call is two messages:
the agent's call to the execution environment (written as the Python code the benchmark runs, so a minefield can
look for the tool's name in it) and the environment's answer, `repr` of the result or the raised exception's
last traceback line, with the call's trace (tool, arguments with defaults filled in, result) when it
succeeded. A refused call leaves the world unchanged. The user ends the conversation with `end_conversation`.
A call the benchmark's agent loop would crash on (an unknown or disallowed tool, arguments that are not an
object) is answered with the error instead, so an episode never stops on bad agent output; an exception a tool
raises on odd values (a year out of range) is answered as its `Kind: message`, as the benchmark's execution
environment shows any exception.
Left out: parallel tool calls (one call per agent turn) and the user simulator's few-shot messages.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tracec.trace_rl.envs.toolsandbox.catalog import Toolbox
from tracec.trace_rl.envs.toolsandbox.clock import Clock
from tracec.trace_rl.envs.toolsandbox.toolkit import NOT_GIVEN, Call, ToolError
from tracec.trace_rl.envs.toolsandbox.world import World

Role = Literal["system", "user", "agent", "execution_environment"]
MAX_MESSAGES = 30  # the benchmark's cap on the messages after the user's first one


@dataclass(frozen=True, kw_only=True)
class Message:
    index: int
    sender: Role
    recipient: Role
    content: str
    world: World  # the world when this message was written
    tool_trace: tuple[dict[str, Any], ...] | None = None  # on a tool's answer: what was called and returned
    exception: str | None = None  # on a refused call's answer: `Kind: message`
    tool_name: str | None = None  # on a call and its answer
    conversation_active: bool = True

    def row(self) -> dict[str, Any]:
        """The message as a row of the benchmark's sandbox database (what milestones on it compare with)."""
        return {"sandbox_message_index": self.index, "sender": self.sender, "recipient": self.recipient,
                "content": self.content, "openai_tool_call_id": None if self.tool_name is None else
                f"call_{self.index}", "openai_function_name": self.tool_name,
                "conversation_active": self.conversation_active, "tool_call_exception": self.exception,
                "tool_trace": None if self.tool_trace is None else list(self.tool_trace),
                "visible_to": [self.sender, self.recipient]}


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one tool call did: its answer message, and whether the call ran and changed the world."""

    answer: Message
    tool: str | None
    accepted: bool
    changed: bool
    changes: bool  # the tool is one that can change the world


class Sandbox:
    def __init__(self, *, world: World, clock: Clock, toolbox: Toolbox, agent_prompt: str, user_prompt: str,
                 first_message: str, seed: int = 0, max_messages: int = MAX_MESSAGES) -> None:
        self.clock, self.toolbox, self.max_messages = clock, toolbox, max_messages
        self._ids = random.Random(seed)
        self._world = world
        self.messages: list[Message] = []
        self._add("system", "agent", agent_prompt)
        self._add("system", "user", user_prompt)
        self._add("user", "agent", first_message)
        self.first_user_index = 2

    @property
    def world(self) -> World:
        return self._world

    @property
    def active(self) -> bool:
        """The conversation goes on: the user has not ended it and the message budget is not spent."""
        last = self.messages[-1]
        return last.conversation_active and last.index < self.first_user_index + self.max_messages

    def call(self, name: str, arguments: object) -> Outcome:
        """The agent calls a tool: the call and the environment's answer are recorded; the answer is returned."""
        code = _as_code(name, arguments, f"call_{len(self.messages)}")
        self._add("agent", "execution_environment", code, tool_name=name)
        tool = self.toolbox.get(name)
        before = self._world
        try:
            if tool is None:
                options = ", ".join(self.toolbox.tools) or "none"
                raise ToolError("KeyError", f"Agent tool call {name!r} is not a known allowed tool. "
                                            f"Options are: {options}")
            if not isinstance(arguments, Mapping):
                raise ToolError("TypeError", f"{name}() arguments must be an object of keyword arguments, "
                                             f"got {type(arguments).__name__}")
            bound = tool.bind(arguments)
            call = Call(world=before, clock=self.clock, new_id=self._new_id)
            try:
                result = tool.run(call, bound)
            except ToolError:
                raise
            except Exception as err:  # noqa: BLE001 - the benchmark's execution environment shows any exception
                raise ToolError(type(err).__name__, str(err)) from None
        except ToolError as err:
            answer = self._add("execution_environment", "agent", str(err), tool_name=name, exception=str(err))
            return Outcome(answer=answer, tool=name if tool else None, accepted=False, changed=False,
                           changes=bool(tool and tool.changes))
        self._world = call.world
        trace = {"tool_name": name, "arguments": {k: v for k, v in bound.items() if v is not NOT_GIVEN},
                 "result": result}
        answer = self._add("execution_environment", "agent", repr(result), tool_name=name,
                           tool_trace=(json.loads(json.dumps(trace, ensure_ascii=False)),))
        return Outcome(answer=answer, tool=name, accepted=True, changed=call.world != before, changes=tool.changes)

    def malformed_call(self, text: str, error: str) -> Outcome:
        """A call the agent wrote but that cannot be read: answered as the benchmark answers code that does not
        compile, with a SyntaxError line."""
        self._add("agent", "execution_environment", text)
        answer = self._add("execution_environment", "agent", f"SyntaxError: {error}", exception=f"SyntaxError: {error}")
        return Outcome(answer=answer, tool=None, accepted=False, changed=False, changes=False)

    def agent_says(self, text: str) -> None:
        self._add("agent", "user", text)

    def user_says(self, text: str) -> None:
        self._add("user", "agent", text)

    def end_conversation(self) -> None:
        """The user's `end_conversation` tool: the conversation is over."""
        if self.messages[-1].conversation_active:
            self._add("user", "execution_environment", "end_conversation()", conversation_active=False)

    def turn_count(self) -> int:
        """The benchmark's effective turns: messages other than the system's and those between user and tools."""
        tools_and_user = {("user", "execution_environment"), ("execution_environment", "user")}
        return sum(m.sender != "system" and (m.sender, m.recipient) not in tools_and_user for m in self.messages)

    def _add(self, sender: Role, recipient: Role, content: str, **extra: Any) -> Message:
        message = Message(index=len(self.messages), sender=sender, recipient=recipient, content=content,
                          world=self._world, **extra)
        self.messages.append(message)
        return message

    def _new_id(self) -> str:
        return str(uuid.UUID(int=self._ids.getrandbits(128), version=4))


def _as_code(name: str, arguments: object, call_id: str) -> str:
    """The call as the Python the benchmark's agent sends to the execution environment."""
    return (f"{call_id}_parameters = {arguments!r}\n{call_id}_response = {name}(**{call_id}_parameters)\n"
            f"print(repr({call_id}_response))")
