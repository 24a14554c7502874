"""What every conversation in tracec shares: the chat-model protocol, and reading a user's consent.

Agents, LLM users and rollout backends all speak `ChatBackend`; tool environments and tau2-bench both record
`confirmed` (the user said yes before an action) with `says_yes`, so their facts mean the same thing.
"""

from __future__ import annotations

import re
from typing import Protocol

_CONSENT = re.compile(r"\b(?:yes|yeah|yep|confirm|confirmed|confirms)\b", re.IGNORECASE)


class ChatBackend(Protocol):
    """A chat model: messages `{"role": "system"|"user"|"assistant"|"tool", "content": str}` in, text out."""

    def generate(self, messages: list[dict[str, str]]) -> str: ...


def says_yes(message: str) -> bool:
    """Whether a user's message gives consent (yes / yeah / yep / confirm)."""
    return _CONSENT.search(message) is not None
