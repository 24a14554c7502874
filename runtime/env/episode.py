"""One episode of a capability environment: `reset(seed)` gives the task, `step(agent_text)` the observation.

A turn is a tool call (`<action>tool(arg=value)</action>` or a JSON function call, read by `runtime.toolcall`) or a
message to the user, who answers it (and may end the episode). Every step records the canonical `toolenv` facts
(schema in `grammars/toolenv.rubric`), so a rubric can score the episode and `trajectory()` can write it as a line
of trajectory JSONL (write them with `runtime.output.write_records`). Scores: `state` = the final tables hash like the gold state's, `report` = every reported value
appears in the agent's last message to the user, `reward` = the environment's formula over the two.
Left out: several tool calls in one turn (the first one counts, as in `runtime.toolcall`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tracec.runtime.chat import says_yes
from tracec.runtime.env.expr import show
from tracec.runtime.env.program import Outcome, Program, Scenario
from tracec.runtime.env.users import ScriptedUser, User
from tracec.runtime.toolcall import ToolCallError, parse_tool_call, render_result

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
# The user agreed: the same reading as the tau2 adapter's `confirmed` fact.
_EPS = 1e-9


@dataclass(frozen=True, kw_only=True)
class Scores:
    state: float
    report: float
    reward: float


class Environment:
    def __init__(self, program: Program, *, user: User | None = None, max_steps: int | None = None):
        limit = program.limits.max_steps if max_steps is None else max_steps
        if not 1 <= limit <= 1000:
            raise ValueError(f"max_steps must be between 1 and 1000, got {limit}")
        self.program, self.max_steps = program, limit
        self.user: User = user if user is not None else ScriptedUser()
        self.scenario: Scenario | None = None
        self.done = True

    @property
    def instructions(self) -> str:
        """A system prompt: the call format and the tools."""
        tools = "\n".join(f"- {t.info.signature()}" for t in self.program.tools.values())
        return (
            "You help a user by calling tools. Call one tool per turn, written as <action>tool(arg=value, ...)"
            '</action> or as {"name": "tool", "arguments": {...}}. Anything else you write goes to the user; '
            f"when you have finished, tell the user you are done and give any answer they asked for.\nTools:\n{tools}"
        )

    def reset(self, seed: int) -> str:
        self.scenario = self.program.scenario(seed)
        self.db = self.scenario.db.copy()
        self.user.start(self.scenario.task)
        self.done, self.steps = False, 0
        self.last_message: str | None = None
        self._revealed: set[str] = set()
        self._revealed_list: list[str] = []  # sorted; rebuilt only when a key is new
        self._errors = 0
        self._hear(self.scenario.task)
        self.states: list[dict[str, Any]] = [self._state(None, self.scenario.task, checked=False, changed=False)]
        self.actions: list[dict[str, Any]] = []
        return self.scenario.task

    def step(self, text: str) -> tuple[str, bool]:
        if self.done or self.scenario is None:
            raise RuntimeError("the episode is over (or never began): call reset(seed)")
        self.steps += 1
        user_msg, confirmed = self._user_msg, self._confirmed
        most = self.program.limits.max_text
        if not isinstance(text, str) or len(text) > most:
            message = (f"a turn is text, not {type(text).__name__}" if not isinstance(text, str)
                       else f"a turn holds at most {most} characters, this one has {len(text)}")
            outcome = Outcome(kind="invalid", tool=None, accepted=False, error=message,
                              observation=render_result({"error": message}))
            text = text[:most] if isinstance(text, str) else ""
        else:
            call = parse_tool_call(text)
            if call is None:
                return self._message(text, user_msg, confirmed)
            if isinstance(call, ToolCallError):
                outcome = Outcome(kind="invalid", tool=None, accepted=False, error=call.message,
                                  observation=render_result({"error": call.message}))
            else:
                outcome = self.program.call(self.db, self.scenario.lets, call.name, call.arguments)
        if outcome.revealed and not self._revealed.issuperset(outcome.revealed):
            self._revealed.update(outcome.revealed)
            self._revealed_list = sorted(self._revealed)
        if outcome.error is not None:
            self._errors += 1
        self.done = self.steps >= self.max_steps
        self.actions.append(_action(outcome, text, confirmed))
        checked = outcome.kind == "query" and outcome.accepted
        self.states.append(self._state(outcome, user_msg, checked=checked, changed=outcome.changed))
        return outcome.observation, self.done

    def _message(self, text: str, user_msg: str, confirmed: bool) -> tuple[str, bool]:
        reply, ended = self.user.respond(text)
        self._hear(reply)
        self.last_message = text
        self.done = ended or self.steps >= self.max_steps
        self.actions.append({"kind": "message", "accepted": True, "args": [], "confirmed": confirmed, "text": text})
        self.states.append(self._state(None, reply, checked=False, changed=False))
        return reply, self.done

    def _hear(self, user_msg: str) -> None:
        """The user's latest message, and whether it consents: read once, not again on every tool call after it."""
        self._user_msg, self._confirmed = user_msg, says_yes(user_msg)

    def _state(self, outcome: Outcome | None, user_msg: str, *, checked: bool, changed: bool) -> dict[str, Any]:
        state: dict[str, Any] = {"revealed": self._revealed_list, "checked": checked, "user_msg": user_msg,
                                 "db_changed": changed, "n_errors": self._errors, "done": self.done}
        if outcome is not None and outcome.error is not None:
            state["last_error"] = outcome.error
        if outcome is not None and outcome.rows is not None:
            state["rows"] = outcome.rows
        return state

    # ------------------------------------------------------------------ scoring and recording
    def scores(self) -> Scores:
        if self.scenario is None:
            raise RuntimeError("no episode to score: call reset(seed)")
        state = 1.0 if self.db.digest() == self.scenario.gold_digest else 0.0
        said = self.last_message or ""
        report = 1.0 if all(appears(value, said) for value in self.scenario.report) else 0.0
        return Scores(state=state, report=report, reward=self.program.reward(state, report))

    def trajectory(self, episode: str) -> dict[str, Any]:
        """This episode as one line of trajectory JSONL (PIPELINE.md)."""
        if self.scenario is None:
            raise RuntimeError("no episode to record: call reset(seed)")
        scores = self.scores()
        return {
            "episode": episode, "task": f"{self.program.name}/{self.scenario.seed}", "instruction": self.scenario.task,
            "states": self.states, "actions": self.actions, "env_reward": scores.reward,
            "success": scores.reward >= 1.0 - _EPS, "environment": self.program.name, "seed": self.scenario.seed,
        }


def _action(outcome: Outcome, text: str, confirmed: bool) -> dict[str, Any]:
    action: dict[str, Any] = {"kind": outcome.kind, "accepted": outcome.accepted, "args": sorted(set(outcome.args)),
                              "confirmed": confirmed, "text": text}
    if outcome.tool is not None:
        action["tool"] = outcome.tool
    if outcome.target is not None:
        action["target"] = outcome.target
    return action


def appears(value: Any, text: str) -> bool:
    """Whether the agent told the user `value`: numbers compare as numbers (`1,250.50` is 1250.5), words ignore case."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for match in _NUMBER.finditer(text):
            try:
                if abs(float(match.group().replace(",", "")) - value) <= 0.005 + _EPS:
                    return True
            except ValueError:
                continue
        return False
    return show(value).lower() in text.lower()
