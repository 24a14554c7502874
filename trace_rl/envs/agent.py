"""The one agent protocol and the one episode loop, for every environment of `tracec.trace_rl.envs.protocol`.

An agent maps the conversation so far to its next turn's text. The conversation is chat messages
(`{"role": ..., "content": ...}`, the `ChatBackend` vocabulary): the environment's `system_prompt`, then each
observation in its role (`user` or `tool`) and each of the agent's own turns as `assistant`. An environment that
gives its agent tools as JSON schemas (`protocol.agent_tools`, the native call format) has them carried on the
system message (`conversation.with_tools`: a JSON string under its `tools` key), so that any chat backend, which
takes only messages, renders them by the one rule of `tracec.trace_rl.llm.conversation`; an agent that reads only
`role` and `content` (a scripted one) is not disturbed. `run_episode` plays
one episode: reset with the seed, alternate agent turns and steps until the environment is done or `max_turns`
have been taken, and return the environment's trajectory record.

Agents that script a solution (a gold agent, a walkthrough) hold the environment they play in and read what it
knows (the hidden solution, TextWorld's winning plan): the observation is only what the agent is shown. Scripted
agents count their turns in the conversation, so one agent object replays the same way on every episode.
`ChatAgent` is an agent made of any chat model, optionally shown a window of the conversation.
Left out: batched and asynchronous rollouts (the trainer steps a group of environments side by side itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from tracec.trace_rl.envs.protocol import Environment, Observation, agent_tools
from tracec.trace_rl.llm import conversation
from tracec.trace_rl.llm.chat import ChatBackend

Message = dict[str, str]


class Agent(Protocol):
    def act(self, messages: Sequence[Message]) -> str:
        """The next turn's text, given the conversation so far (system prompt first, an observation last)."""


def observation_message(observation: Observation) -> Message:
    return {"role": observation.role, "content": observation.text}


def turns_taken(messages: Sequence[Message]) -> int:
    """How many turns the agent has taken in this conversation: a scripted agent's position in its script."""
    return sum(1 for message in messages if message["role"] == "assistant")


def run_episode(env: Environment, agent: Agent, seed: int, max_turns: int, *,
                episode: str | None = None) -> dict[str, Any]:
    """Play one episode of `env`'s task instance `seed`; its trajectory record, with id `episode` (default
    `seed-N`). The agent gets a fresh copy of the conversation each turn."""
    if max_turns < 1:
        raise ValueError(f"run_episode: max_turns={max_turns} must be at least 1")
    first = observation_message(env.reset(seed))
    messages = [*conversation.with_tools([{"role": "system", "content": env.system_prompt}], agent_tools(env)), first]
    for _ in range(max_turns):
        text = agent.act([dict(message) for message in messages])
        result = env.step(text)
        messages += [{"role": "assistant", "content": text}, observation_message(result.observation)]
        if result.done:
            break
    return env.trajectory(f"seed-{seed}" if episode is None else episode)


class ChatAgent:
    """A chat model as an agent. With `history_turns`, the model sees the system prompt, the first observation
    (the task) and only the last `history_turns` of its turns, each with the observation that answered it."""

    def __init__(self, backend: ChatBackend, *, history_turns: int | None = None) -> None:
        if history_turns is not None and history_turns < 1:
            raise ValueError(f"ChatAgent: history_turns={history_turns} must be at least 1 (or None: all)")
        self.backend, self.history_turns = backend, history_turns

    def act(self, messages: Sequence[Message]) -> str:
        shown = list(messages)
        if self.history_turns is not None and len(shown) > 2 + 2 * self.history_turns:
            shown = shown[:2] + shown[-2 * self.history_turns:]  # starts at one of its turns: roles alternate
        return self.backend.generate(shown)
