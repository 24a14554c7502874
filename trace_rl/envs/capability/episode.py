"""A capability environment as the one environment protocol (`tracec.trace_rl.envs.protocol.Environment`).

`reset(seed)` draws the seed's task (the user's opening message, and the first observation); `step(agent_text)`
takes one turn: a tool call (`<action>tool(arg=value)</action>` or a JSON function call, read by
`trace_rl.envs.toolcall`), whose JSON result comes back as a `tool` observation, or a message to the user, who answers
it as a `user` observation (and may end the episode). The user lives inside the environment (`trace_rl.envs.users`):
`ScriptedUser` by default (validation, gold runs, training), or an `LLMUser` whose chat model plays the customer
from the task text and ends the episode with `###STOP###`.
Every step records the canonical `toolenv` facts (`trace_rl.envs.toolfacts`, schema in `grammars/toolenv.rubric`), so a
rubric can score the episode and `trajectory()` can write it as a line of trajectory JSONL (write them with
`runtime.facts.trajectories.records.write_records`). Scores: `state` = the final tables hash like the gold state's,
`report` = every reported value appears in the agent's last message to the user, `reward` = the environment's
formula over the two, given as the last step's reward.
`call_format` (`native`, the default, or `text`) is how the agent is given the
tools: as JSON schemas (`tools`, from `capability.schemas`), the system prompt keeping only the instructions, or
listed in the system prompt (`tools` empty); either way both spellings of a call are read. `hint()` is the trainer's
expert guidance (`rollout.hint_ratio`): the environment's `hint` line, else guidance from the shape of its solution
(`guidance.py`); never the solution's calls, which validation checks.
Left out: several tool calls in one turn (the first one counts, as in `trace_rl.envs.toolcall`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tracec.dsl.env_model import MAX_STEPS
from tracec.trace_rl.envs import protocol
from tracec.trace_rl.envs.capability.expr import show
from tracec.trace_rl.envs.capability.program import Outcome, Program, Scenario
from tracec.trace_rl.envs.capability.schemas import tool_schemas
from tracec.trace_rl.envs.protocol import Observation, StepResult
from tracec.trace_rl.envs.toolcall import (
    CALL_FORMATS,
    DEFAULT_CALL_FORMAT,
    ToolCallError,
    parse_tool_call,
    render_result,
)
from tracec.trace_rl.envs.toolfacts import RecordsToolFacts, ToolFacts
from tracec.trace_rl.envs.users import ScriptedUser, User

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_EPS = 1e-9


@dataclass(frozen=True, kw_only=True)
class Scores:
    state: float
    report: float
    reward: float


class CapabilityEnvironment(RecordsToolFacts, protocol.Environment):
    """Episodes of one compiled environment; `user` answers the agent's messages (default: `ScriptedUser()`)."""

    def __init__(self, program: Program, *, user: User | None = None, max_steps: int | None = None,
                 call_format: str = DEFAULT_CALL_FORMAT):
        limit = program.limits.max_steps if max_steps is None else max_steps
        if not 1 <= limit <= MAX_STEPS:
            raise ValueError(f"max_steps must be between 1 and {MAX_STEPS}, got {limit}")
        if call_format not in CALL_FORMATS:
            raise ValueError(f"call_format must be one of {', '.join(CALL_FORMATS)}, got {call_format!r}")
        self.call_format = call_format
        self.program, self.max_steps = program, limit
        self.user: User = user if user is not None else ScriptedUser()
        self.scenario: Scenario | None = None
        self.done = True
        self._facts = ToolFacts()

    @property
    def system_prompt(self) -> str:
        """The instructions; in the text format also how to write a call and the tools (native: `tools`)."""
        closing = ("Anything else you write goes to the user; when you have finished, tell the user you are done and "
                   "give any answer they asked for.")
        if self.call_format == "native":
            return f"You help a user by calling tools. Call one tool per turn. {closing}"
        tools = "\n".join(f"- {t.info.signature()}" for t in self.program.tools.values())
        return (
            "You help a user by calling tools. Call one tool per turn, written as <action>tool(arg=value, ...)"
            f'</action> or as {{"name": "tool", "arguments": {{...}}}}. {closing}\nTools:\n{tools}'
        )

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools as JSON schemas in the native format; none in the text format (the prompt lists them)."""
        if self.call_format != "native":
            return []
        return tool_schemas([t.info for t in self.program.tools.values()])

    def reset(self, seed: int) -> Observation:
        self.scenario = self.program.scenario(seed)
        self.db = self.scenario.db.copy()
        self.done, self.steps = False, 0
        self.last_message: str | None = None
        self._scores: Scores | None = None
        opening = self.user.start(self.scenario.task)
        self._facts.start(opening)
        return Observation(text=opening, role="user")

    def hint(self) -> str | None:
        """Guidance for this environment's tasks, the same for every seed (what to look at, what to check, in
        which order); None when a task needs no call and no answer."""
        return self.program.hint

    def step(self, action: str) -> StepResult:
        if self.done or self.scenario is None:
            raise RuntimeError("the episode is over (or never began): call reset(seed)")
        self.steps += 1
        text, most = action, self.program.limits.max_text
        if not isinstance(text, str) or len(text) > most:
            message = (f"a turn is text, not {type(text).__name__}" if not isinstance(text, str)
                       else f"a turn holds at most {most} characters, this one has {len(text)}")
            outcome = Outcome(kind="invalid", tool=None, accepted=False, error=message,
                              observation=render_result({"error": message}))
            text = text[:most] if isinstance(text, str) else ""
        else:
            call = parse_tool_call(text)
            if call is None:
                return self._message(text)
            if isinstance(call, ToolCallError):
                outcome = Outcome(kind="invalid", tool=None, accepted=False, error=call.message,
                                  observation=render_result({"error": call.message}))
            else:
                outcome = self.program.call(self.db, self.scenario.lets, call.name, call.arguments)
        self.done = self.steps >= self.max_steps
        self._facts.tool_call(text, outcome, args=outcome.args, target=outcome.target, done=self.done,
                              rows=outcome.rows)
        return self._result(Observation(text=outcome.observation, role="tool"))

    def _message(self, text: str) -> StepResult:
        reply = self.user.respond(text)
        self.last_message = text
        self.done = reply.end is not None or self.steps >= self.max_steps
        self._facts.message(text, reply.text, done=self.done)
        return self._result(Observation(text=reply.text, role="user"))

    def _result(self, observation: Observation) -> StepResult:
        reward = self.scores().reward if self.done else 0.0
        return StepResult(observation=observation, done=self.done, reward=reward,
                          state=self._facts.states[-1], action=self._facts.actions[-1])

    # ------------------------------------------------------------------ scoring and recording
    def scores(self) -> Scores:
        """The episode's scores now; fixed once it is over."""
        if self.scenario is None:
            raise RuntimeError("no episode to score: call reset(seed)")
        if self._scores is not None:
            return self._scores
        state = 1.0 if self.db.digest() == self.scenario.gold_digest else 0.0
        said = self.last_message or ""
        report = 1.0 if all(appears(value, said) for value in self.scenario.report) else 0.0
        scores = Scores(state=state, report=report, reward=self.program.reward(state, report))
        if self.done:
            self._scores = scores
        return scores

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
