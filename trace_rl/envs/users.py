"""The user an agent talks to when it writes a message instead of a tool call: one protocol for every target.

An environment that has a user (the capability environments, tau2-bench) owns it: `start(scenario, greeting)`
begins a conversation and gives the user's first message; `respond(message)` gives the user's `Reply` to each
message of the agent, which may end the conversation. Two users:
- `ScriptedUser`: deterministic, for validation, gold runs and tests: it says its `lines` in order, then `then`
  each time (or, with `then=None`, it closes), and closes at once when the agent's message matches `done_pattern`.
- `LLMUser`: a chat model plays the user. Its system prompt is `prompt` with the scenario in it (the default
  prompt for capability environments, tau2-bench's simulation guidelines for tau2); from its side the roles are
  flipped (the agent's messages are `user` turns, its own replies `assistant` turns). A reply holding an end token
  (`###STOP###`, `###TRANSFER###`, `###OUT-OF-SCOPE###`) ends the conversation.

A user object holds one conversation at a time: each environment of a group gets its own.
Openings: with a `greeting` (tau2-bench: the agent greets first), the user answers it; without one (capability
environments, whose task text is written as the user's request), the user's first message is the scenario itself.
Left out: user-side tools and personas beyond the scenario text (the shipped domains need neither); an opening
that ends the conversation (the agent always gets a first turn).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tracec.trace_rl.llm.chat import ChatBackend

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
END_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)
DONE_PATTERN = r"\b(?:done|finished|completed?|all set)\b|###STOP###"
CARRY_ON = "Yes, please go ahead with my request, and tell me when you are done."
CLOSING = "Thank you, bye."
SCENARIO = "{scenario}"  # where a prompt template takes the scenario text
CUSTOMER_PROMPT = (
    "You are a customer writing to a support agent. Your request, in your own words: {scenario}\n"
    "Answer the agent's questions briefly, using only what your request says; never invent details. When the agent "
    f"has done what you asked or cannot do it, reply with {STOP} alone."
)


@dataclass(frozen=True, kw_only=True)
class Reply:
    text: str  # what the agent reads, and the facts' `user_msg`
    end: str | None = None  # the end token that closed the conversation (one of END_TOKENS); None: it goes on


class User(Protocol):
    def start(self, scenario: str, greeting: str | None = None) -> str:
        """Begin a conversation about `scenario`; the user's first message (its answer to `greeting`, if any)."""

    def respond(self, message: str) -> Reply:
        """The user's reply to the agent's message."""


def end_token(text: str) -> str | None:
    """The first end-of-conversation token in a user's message, if any."""
    return next((token for token in END_TOKENS if token in text), None)


class ScriptedUser:
    """Says `lines` in order (the first answers a greeting), then `then` each time, or closes when `then` is None;
    an agent message matching `done_pattern` (case-insensitive) closes at once. Closing says `closing` and ends."""

    def __init__(self, lines: Sequence[str] = (), *, then: str | None = CARRY_ON,
                 done_pattern: str | None = DONE_PATTERN, closing: str = CLOSING) -> None:
        self.lines, self.then, self.closing = tuple(lines), then, closing
        self._done = re.compile(done_pattern, re.IGNORECASE) if done_pattern is not None else None
        self._said = 0

    def start(self, scenario: str, greeting: str | None = None) -> str:
        self._said = 0
        return scenario if greeting is None else self._next().text

    def respond(self, message: str) -> Reply:
        if self._done is not None and self._done.search(message):
            return Reply(text=self.closing, end=STOP)
        return self._next()

    def _next(self) -> Reply:
        if self._said < len(self.lines):
            self._said += 1
            return Reply(text=self.lines[self._said - 1])
        return Reply(text=self.then) if self.then is not None else Reply(text=self.closing, end=STOP)


class LLMUser:
    """A simulated user: `backend` plays it with `prompt` (holding `{scenario}`) as its system message.

    `keep_end_token`: the reply is shown as written, end token included (as tau2-bench records it); otherwise the
    token is taken out, and a reply left empty reads `closing`. `messages` is the user's side of the conversation.
    """

    def __init__(self, backend: ChatBackend, *, prompt: str = CUSTOMER_PROMPT, keep_end_token: bool = False,
                 closing: str = CLOSING) -> None:
        if SCENARIO not in prompt:
            raise ValueError(f"LLMUser: the prompt must hold {SCENARIO} where the scenario goes")
        self.backend, self.prompt, self.keep_end_token, self.closing = backend, prompt, keep_end_token, closing
        self.messages: list[dict[str, str]] = []

    def start(self, scenario: str, greeting: str | None = None) -> str:
        # `replace`, not `format`: a prompt (tau2's guidelines) may hold braces of its own.
        self.messages = [{"role": "system", "content": self.prompt.replace(SCENARIO, scenario)}]
        if greeting is None:
            self.messages.append({"role": "assistant", "content": scenario})
            return scenario
        self.messages.append({"role": "user", "content": greeting})
        return self._generate().text

    def respond(self, message: str) -> Reply:
        self.messages.append({"role": "user", "content": message})
        return self._generate()

    def _generate(self) -> Reply:
        written = self.backend.generate(list(self.messages))
        self.messages.append({"role": "assistant", "content": written})
        token = end_token(written)
        if self.keep_end_token:
            return Reply(text=written.strip(), end=token)
        text = written
        for each in END_TOKENS:
            text = text.replace(each, "")
        return Reply(text=text.strip() or self.closing, end=token)
