"""The user side of a tau2 conversation: an LLM user simulator, and a scripted user for tests and gold runs.

The simulator follows the benchmark's recipe: a system prompt made of the simulation guidelines
(`user_simulator/simulation_guidelines.md`) and the task's scenario, then the dialogue with the roles flipped
(the agent speaks as `user`, the simulated customer answers as `assistant`). It never sees tool calls or their
results, only the agent's messages. The model sits behind `ChatBackend`, one method, so any client (a local
transformers model, vLLM, an HTTP API, a fake in tests) plugs in.

A reply containing `###STOP###`, `###TRANSFER###` or `###OUT-OF-SCOPE###` ends the episode. Left out:
user-side tools (the airline and retail domains have none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from tracec.runtime.chat import ChatBackend
from tracec.trace_rl.envs.tau2.tasks import Task

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
END_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One visible message of the dialogue: the agent's text to the user, or the user's text to the agent."""

    role: Literal["agent", "user"]
    content: str


class User(Protocol):
    def respond(self, dialogue: Sequence[Turn]) -> str: ...


def end_token(text: str) -> str | None:
    """The end-of-conversation token in a user message, if any."""
    return next((token for token in END_TOKENS if token in text), None)


def load_guidelines(data_dir: Path) -> str:
    path = Path(data_dir) / "user_simulator" / "simulation_guidelines.md"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise FileNotFoundError(f"{path}: cannot read the user simulator guidelines: {err}") from None


class LLMUser:
    """The customer, played by a model that gets the guidelines and the task's scenario."""

    def __init__(self, backend: ChatBackend, *, guidelines: str, task: Task) -> None:
        self.backend = backend
        persona = f"Persona: {task.persona.strip()}\n\n" if task.persona else ""
        self.system = f"{guidelines.strip()}\n\n<scenario>\n{persona}{task.instruction}\n</scenario>"

    def respond(self, dialogue: Sequence[Turn]) -> str:
        messages = [{"role": "system", "content": self.system}]
        messages += [
            {"role": "user" if turn.role == "agent" else "assistant", "content": turn.content}
            for turn in dialogue
        ]
        return self.backend.generate(messages).strip()


class ScriptedUser:
    """Says its lines in order, one per turn, whatever the agent said; then `###STOP###`."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = tuple(lines)

    def respond(self, dialogue: Sequence[Turn]) -> str:
        said = sum(1 for turn in dialogue if turn.role == "user")
        return self.lines[said] if said < len(self.lines) else STOP
