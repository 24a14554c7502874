"""One tau2 conversation: agent, user and environment in turn, until the user ends it or the steps run out.

The agent opens with a fixed greeting (as in the benchmark), the user states the request, then each agent turn
is one step: a tool call (parsed with `tracec.runtime.toolcall`, executed, its result appended as a `tool`
message) or a message to the user (who answers). The agent is any `ChatBackend`: it gets the whole transcript,
`system` first. The episode is scored as the benchmark scores it (`scoring.py`).

Left out: retries of a failing backend, and the benchmark's cap on consecutive tool errors (`max_steps` bounds
an agent that never stops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracec.runtime.toolcall import parse_tool_call
from tracec.trace_rl.envs.tau2.db import Db
from tracec.trace_rl.envs.tau2.env import Domain, Tau2Env, ToolOutcome
from tracec.trace_rl.envs.tau2.gold import replay_gold
from tracec.trace_rl.envs.tau2.scoring import Score, score
from tracec.trace_rl.envs.tau2.tasks import Task
from tracec.runtime.chat import ChatBackend
from tracec.trace_rl.envs.tau2.user import OUT_OF_SCOPE, STOP, TRANSFER, Turn, User, end_token

EndReason = Literal["stop", "transfer", "out_of_scope", "max_steps"]
_ENDS: dict[str, EndReason] = {STOP: "stop", TRANSFER: "transfer", OUT_OF_SCOPE: "out_of_scope"}


@dataclass(frozen=True, kw_only=True)
class EpisodeConfig:
    max_steps: int = 60
    greeting: str = "Hi! How can I help you today?"

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"EpisodeConfig.max_steps must be at least 1, got {self.max_steps}")


@dataclass(frozen=True, kw_only=True)
class Step:
    """One agent turn: a tool call (with its outcome) or a message (with the user's reply)."""

    text: str
    outcome: ToolOutcome | None  # None: a message to the user
    user_before: str  # the user's most recent message when the agent acted
    user_reply: str | None = None


@dataclass(frozen=True, kw_only=True)
class Episode:
    task: Task
    opening: str  # the user's first message
    steps: tuple[Step, ...]
    messages: tuple[dict[str, str], ...]  # the agent's transcript, system prompt first
    end: EndReason
    score: Score

    @property
    def agent_messages(self) -> tuple[str, ...]:
        return tuple(step.text for step in self.steps if step.outcome is None)


def run_episode(
    domain: Domain,
    task: Task,
    agent: ChatBackend,
    user: User,
    *,
    config: EpisodeConfig = EpisodeConfig(),
    gold: Db | None = None,
) -> Episode:
    """`gold`: the task's gold database (`replay_gold`), replayed here when not given; pass it to share it
    across the rollouts of one task."""
    env = Tau2Env(domain)
    messages = [
        {"role": "system", "content": env.system_prompt()},
        {"role": "assistant", "content": config.greeting},
    ]
    dialogue = [Turn(role="agent", content=config.greeting)]
    opening = user.respond(dialogue)
    dialogue.append(Turn(role="user", content=opening))
    messages.append({"role": "user", "content": opening})
    steps: list[Step] = []
    last_user, token = opening, end_token(opening)
    while token is None and len(steps) < config.max_steps:
        text = agent.generate([dict(message) for message in messages])
        messages.append({"role": "assistant", "content": text})
        call = parse_tool_call(text)
        if call is not None:
            outcome = env.execute(call)
            messages.append({"role": "tool", "content": outcome.content})
            steps.append(Step(text=text, outcome=outcome, user_before=last_user))
            continue
        dialogue.append(Turn(role="agent", content=text))
        reply = user.respond(dialogue)
        dialogue.append(Turn(role="user", content=reply))
        messages.append({"role": "user", "content": reply})
        steps.append(Step(text=text, outcome=None, user_before=last_user, user_reply=reply))
        last_user, token = reply, end_token(reply)
    said = [step.text for step in steps if step.outcome is None]
    return Episode(
        task=task,
        opening=opening,
        steps=tuple(steps),
        messages=tuple(messages),
        end=_ENDS[token] if token is not None else "max_steps",
        score=score(task, env.db, said, gold=gold if gold is not None else replay_gold(domain, task)[0].db),
    )
