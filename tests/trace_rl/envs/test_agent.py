"""The one episode loop and `ChatAgent`, over a small environment written against the protocol alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tracec.trace_rl.envs.agent import ChatAgent, Message, observation_message, run_episode, turns_taken
from tracec.trace_rl.envs.protocol import Environment, Observation, StepResult


class Countdown(Environment):
    """Say the seed's number back to win; the episode ends at the right number or after `limit` turns."""

    system_prompt = "Say the number."

    def __init__(self, limit: int = 5) -> None:
        self.limit = limit

    def reset(self, seed: int) -> Observation:
        self.seed, self.turns = seed, []  # type: ignore[var-annotated]
        return Observation(text=f"The number is {seed}.")

    def step(self, action: str) -> StepResult:
        self.turns.append(action)
        won = action == str(self.seed)
        done = won or len(self.turns) >= self.limit
        return StepResult(observation=Observation(text="yes" if won else f"no: {action}", role="tool"), done=done,
                          reward=float(won) if done else 0.0, state={"n": len(self.turns)}, action={"text": action})

    def trajectory(self, episode: str) -> dict[str, Any]:
        won = bool(self.turns) and self.turns[-1] == str(self.seed)
        return {"episode": episode, "task": str(self.seed), "turns": list(self.turns), "success": won}


class Guesser:
    """Guesses 0, 1, 2, ...: its turn count is its guess; keeps what it was shown."""

    def __init__(self) -> None:
        self.seen: list[list[Message]] = []

    def act(self, messages: Sequence[Message]) -> str:
        self.seen.append([dict(m) for m in messages])
        guess = str(turns_taken(messages))
        messages[0]["content"] = "scribbled over"  # type: ignore[index]  # a copy: the loop's own stays intact
        return guess


def test_run_episode_plays_until_done_and_returns_the_trajectory() -> None:
    agent = Guesser()
    record = run_episode(Countdown(), agent, 2, max_turns=10)
    assert record == {"episode": "seed-2", "task": "2", "turns": ["0", "1", "2"], "success": True}
    last = agent.seen[-1]
    assert last == [
        {"role": "system", "content": "Say the number."}, {"role": "user", "content": "The number is 2."},
        {"role": "assistant", "content": "0"}, {"role": "tool", "content": "no: 0"},
        {"role": "assistant", "content": "1"}, {"role": "tool", "content": "no: 1"},
    ]


def test_the_environment_or_max_turns_ends_the_episode() -> None:
    assert run_episode(Countdown(limit=3), Guesser(), 9, max_turns=10)["turns"] == ["0", "1", "2"]
    assert run_episode(Countdown(), Guesser(), 9, max_turns=2, episode="short") == {
        "episode": "short", "task": "9", "turns": ["0", "1"], "success": False}
    with pytest.raises(ValueError, match="max_turns=0 must be at least 1"):
        run_episode(Countdown(), Guesser(), 0, max_turns=0)


def test_observation_messages_keep_the_role() -> None:
    assert observation_message(Observation(text="[]", role="tool")) == {"role": "tool", "content": "[]"}
    assert observation_message(Observation(text="hi")) == {"role": "user", "content": "hi"}


class Echo:
    def __init__(self) -> None:
        self.calls: list[list[dict[str, str]]] = []

    def generate(self, messages: list[dict[str, str]]) -> str:
        self.calls.append(messages)
        return "reply"


def _conversation(turns: int) -> list[Message]:
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "task"}]
    for t in range(turns):
        messages += [{"role": "assistant", "content": f"a{t}"}, {"role": "user", "content": f"o{t}"}]
    return messages


@given(turns=st.integers(0, 12), window=st.one_of(st.none(), st.integers(1, 5)))
def test_chat_agent_window_keeps_the_task_and_the_latest_turns(turns: int, window: int | None) -> None:
    backend = Echo()
    messages = _conversation(turns)
    assert ChatAgent(backend, history_turns=window).act(messages) == "reply"
    (shown,) = backend.calls
    kept = turns if window is None else min(turns, window)
    assert shown[:2] == messages[:2] and shown[2:] == messages[len(messages) - 2 * kept:]
    assert len(shown) == 2 + 2 * kept
    assert [m["role"] for m in shown[1:]] == ["user"] + ["assistant", "user"] * kept  # roles alternate


def test_chat_agent_window_must_hold_a_turn() -> None:
    with pytest.raises(ValueError, match="history_turns=0 must be at least 1"):
        ChatAgent(Echo(), history_turns=0)
