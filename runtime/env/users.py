"""The user an agent talks to when it writes a message instead of a tool call.

Two kinds behind one Protocol: `ScriptedUser`, which ends the episode when the agent says it is done and otherwise
asks it to carry on (deterministic, what validation and training use), and `LLMUser`, which plays the user with any
chat backend (`generate(messages) -> str`) and ends the episode by writing `###STOP###`.
Left out: user-side tools and personas; the task message already holds everything the user knows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from tracec.runtime.chat import ChatBackend

STOP = "###STOP###"
DONE_PATTERN = r"\b(?:done|finished|completed?|all set)\b|###STOP###"


class User(Protocol):
    def start(self, task: str) -> None:
        """Begin a conversation whose first user message is `task`."""

    def respond(self, message: str) -> tuple[str, bool]:
        """The user's reply to the agent's message, and whether the episode ends."""


@dataclass(frozen=True, kw_only=True)
class ScriptedUser:
    done_pattern: str = DONE_PATTERN  # searched case-insensitively in the agent's message
    reply: str = "Yes, please go ahead with my request, and tell me when you are done."
    closing: str = "Thank you, bye."

    def start(self, task: str) -> None:
        return None

    def respond(self, message: str) -> tuple[str, bool]:
        if re.search(self.done_pattern, message, re.IGNORECASE):
            return self.closing, True
        return self.reply, False


_PROMPT = (
    "You are a customer writing to a support agent. Your request, in your own words: {task}\n"
    "Answer the agent's questions briefly, using only what your request says; never invent details. When the agent "
    f"has done what you asked or cannot do it, reply with {STOP} alone."
)


class LLMUser:
    """A simulated user; from its side the agent's messages are `user` turns and its own replies `assistant` turns."""

    def __init__(self, backend: ChatBackend):
        self.backend = backend
        self.messages: list[dict[str, str]] = []

    def start(self, task: str) -> None:
        self.messages = [{"role": "system", "content": _PROMPT.format(task=task)}, {"role": "assistant", "content": task}]

    def respond(self, message: str) -> tuple[str, bool]:
        self.messages.append({"role": "user", "content": message})
        reply = self.backend.generate(list(self.messages))
        self.messages.append({"role": "assistant", "content": reply})
        done = STOP in reply
        return (reply.replace(STOP, "").strip() or "Thank you, bye."), done
