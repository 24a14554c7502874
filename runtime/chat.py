"""What every conversation in tracec shares: the chat-model protocol, and reading a user's consent.

Agents, LLM users and rollout backends all speak `ChatBackend`; tool environments and tau2-bench both record
`confirmed` (the user said yes before an action) with `says_yes` (`tracec.runtime.consent`), so their facts mean
the same thing.
"""

from __future__ import annotations

from typing import Protocol

from tracec.runtime.consent import says_yes

__all__ = ["ChatBackend", "says_yes"]  # says_yes lives in runtime.consent; callers may import it from here


class ChatBackend(Protocol):
    """A chat model: messages `{"role": "system"|"user"|"assistant"|"tool", "content": str}` in, text out."""

    def generate(self, messages: list[dict[str, str]]) -> str: ...
