"""Scripted agents for TextWorld games, in the one agent protocol (`tracec.trace_rl.envs.agent`).

Both hold the game they play in (a `TextWorldEnvironment`, or a task family's, through `Game`) and read what it knows,
which the agent's observation does not carry: the walkthrough agent plays the first command of TextWorld's current
winning plan (`policy_commands`), the random agent a seeded draw of the admissible commands (the same seed, the same
episode; its draws restart with each conversation). An LLM agent is
`trace_rl.envs.agent.ChatAgent` over any chat backend.
Left out: batching several games, prompt tuning.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from tracec.trace_rl.envs.agent import Message, turns_taken


class Game(Protocol):
    """What a scripted agent reads of the game it plays: the commands it admits, and its winning plan from here."""

    @property
    def admissible_commands(self) -> tuple[str, ...]: ...

    @property
    def policy_commands(self) -> tuple[str, ...]: ...


class WalkthroughAgent:
    """Plays the first command of TextWorld's winning plan from the current state."""

    def __init__(self, env: Game) -> None:
        self.env = env

    def act(self, messages: Sequence[Message]) -> str:
        plan = self.env.policy_commands
        return plan[0] if plan else "look"


class RandomAgent:
    """Plays a uniformly drawn admissible command."""

    def __init__(self, env: Game, *, seed: int) -> None:
        self.env, self.seed = env, seed
        self._rng = random.Random(seed)

    def act(self, messages: Sequence[Message]) -> str:
        if turns_taken(messages) == 0:
            self._rng = random.Random(self.seed)
        commands = self.env.admissible_commands
        return self._rng.choice(commands) if commands else "look"
