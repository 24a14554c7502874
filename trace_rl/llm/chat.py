"""What every conversation in tracec shares: the chat-model protocols.

Agents, LLM users and rollout backends all speak `ChatBackend` (`generate(messages) -> str`, the backend's own
sampling settings). A backend that an analysis or synthesis step drives also speaks `SamplingBackend`:
`sample(messages, Sampling(...)) -> list[str]` takes the settings per call (max tokens, temperature, top-p, stop
sequences, a seed, n samples), so one model serves a greedy JSON labeler and a diverse discoverer at once. The
richer protocol extends the plain one rather than replacing it, so a two-line fake still passes for an agent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ChatBackend", "Sampling", "SamplingBackend"]


class ChatBackend(Protocol):
    """A chat model: messages `{"role": "system"|"user"|"assistant"|"tool", "content": str}` in, text out."""

    def generate(self, messages: list[dict[str, str]]) -> str: ...


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """How one call samples. `None` leaves a setting to the backend's default (its config, or the server's).

    `stop`: the reply ends before the first occurrence of any of these strings (which is not returned).
    `seed`: the same seed, messages and settings give the same replies on a backend that can promise it (local
    models, vLLM; an HTTP server passes it on). `n`: how many independent replies one call returns.
    """

    max_tokens: int | None = None
    temperature: float | None = None  # 0 decodes greedily
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    n: int = 1

    def __post_init__(self) -> None:
        if self.max_tokens is not None and (not is_int(self.max_tokens) or self.max_tokens < 1):
            raise ValueError(f"Sampling: max_tokens={self.max_tokens!r} must be an integer >= 1 (or None)")
        if self.temperature is not None and not (is_number(self.temperature) and self.temperature >= 0):
            raise ValueError(f"Sampling: temperature={self.temperature!r} must be a number >= 0 (0 is greedy)")
        if self.top_p is not None and not (is_number(self.top_p) and 0 < self.top_p <= 1):
            raise ValueError(f"Sampling: top_p={self.top_p!r} must be in (0, 1] (1 turns nucleus sampling off)")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"Sampling: stop={self.stop!r} must be a tuple of non-empty strings")
        if self.seed is not None and (not is_int(self.seed) or self.seed < 0):
            raise ValueError(f"Sampling: seed={self.seed!r} must be an integer >= 0 (or None)")
        if not is_int(self.n) or self.n < 1:
            raise ValueError(f"Sampling: n={self.n!r} must be an integer >= 1")


class SamplingBackend(ChatBackend, Protocol):
    """A chat model that takes its sampling settings per call; `name` says which model, for logs."""

    @property
    def name(self) -> str: ...

    def sample(self, messages: list[dict[str, str]], sampling: Sampling) -> list[str]:
        """`sampling.n` replies to `messages`, each cut before its first stop sequence."""
        ...


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """`text` up to (not including) the earliest occurrence of any stop sequence."""
    ends = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(ends)] if ends else text


def is_int(value: object) -> bool:
    """An integer setting; `True` is not one, though Python counts bools as ints."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A finite number setting (no bool, NaN or infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
