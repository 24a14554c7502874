"""Agents for TextWorld games, the episode loop, and the trajectory JSONL it records.

Three agents share one small protocol (`start` with the first observation, then `act` on each one, returning the
reply text): the walkthrough agent follows TextWorld's current winning plan (`policy_commands`), the random
agent draws a seeded admissible command, and the LLM agent asks a chat backend. The episode loop takes the
command from the reply (`<action>...</action>`, else its first line) and records states and actions in the
trajectory format of PIPELINE.md, written atomically. Left out: batching several games, prompt tuning, and any
trainer-side handling of the recorded text.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from tracec.runtime.chat import ChatBackend
from tracec.trace_rl.envs.textworld_env import Observation, TextWorldEnv

SYSTEM_PROMPT = (
    "You are playing a text adventure game. Read the objective and what the game says, then reply with "
    "exactly one game command inside <action></action>, for example <action>take red apple</action>."
)


class Agent(Protocol):
    def start(self, observation: Observation) -> None: ...

    def act(self, observation: Observation) -> str: ...


class WalkthroughAgent:
    """Plays the first command of TextWorld's winning plan from the current state."""

    def start(self, observation: Observation) -> None:
        pass

    def act(self, observation: Observation) -> str:
        return observation.policy_commands[0] if observation.policy_commands else "look"


class RandomAgent:
    """Plays a uniformly drawn admissible command; the same seed gives the same episode."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._rng = random.Random(seed)

    def start(self, observation: Observation) -> None:
        self._rng = random.Random(self._seed)

    def act(self, observation: Observation) -> str:
        commands = observation.admissible_commands
        return self._rng.choice(commands) if commands else "look"


class LLMAgent:
    """Asks `backend` for the next command, keeping the last `history_turns` exchanges in the prompt."""

    def __init__(self, backend: ChatBackend, *, history_turns: int = 8, show_admissible: bool = True) -> None:
        if history_turns < 1:
            raise ValueError(f"LLMAgent: history_turns={history_turns} must be at least 1")
        self._backend = backend
        self._history_turns = history_turns
        self._show_admissible = show_admissible
        self._system = SYSTEM_PROMPT
        self._turns: list[dict[str, str]] = []

    def start(self, observation: Observation) -> None:
        # The objective lives in the system message so that it survives the history window.
        self._system = f"{SYSTEM_PROMPT}\n\nObjective: {observation.objective}"
        self._turns = []

    def act(self, observation: Observation) -> str:
        self._turns.append({"role": "user", "content": self._prompt(observation)})
        window = self._turns[-(2 * self._history_turns - 1) :]  # starts with a user turn
        reply = self._backend.generate([{"role": "system", "content": self._system}, *window])
        self._turns.append({"role": "assistant", "content": reply})
        return reply

    def _prompt(self, observation: Observation) -> str:
        parts = [observation.feedback]
        if observation.description and observation.description not in observation.feedback:
            parts.append(f"Room: {observation.description}")
        parts.append(f"Inventory: {observation.inventory}")
        if self._show_admissible:
            parts.append("Possible commands: " + ", ".join(observation.admissible_commands))
        return "\n\n".join(part for part in parts if part)


def play_episode(env: TextWorldEnv, agent: Agent, *, episode: str, max_steps: int) -> dict[str, Any]:
    """Play one episode until won, lost or `max_steps`; returns the trajectory record."""
    if max_steps < 1:
        raise ValueError(f"play_episode: max_steps={max_steps} must be at least 1")
    observation, state = env.reset()
    agent.start(observation)
    states: list[dict[str, Any]] = [state]
    actions: list[dict[str, Any]] = []
    while not observation.done and len(actions) < max_steps:
        observation, state, action = env.step(agent.act(observation))
        states.append(state)
        actions.append(action)
    return {
        "episode": episode,
        "task": env.task,
        "instruction": observation.objective,
        "states": states,
        "actions": actions,
        "env_reward": env_reward(observation),
        "success": observation.won,
    }


def env_reward(observation: Observation) -> float:
    """1 for a win, else the fraction of the maximum score reached (0 when the game has no score)."""
    if observation.won:
        return 1.0
    return observation.score / observation.max_score if observation.max_score > 0 else 0.0
