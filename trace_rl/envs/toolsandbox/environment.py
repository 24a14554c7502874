"""ToolSandbox scenarios as the one environment protocol (`tracec.trace_rl.envs.protocol.Environment`).

`reset(seed)` plays scenario `seed mod n` of the environment's list (all transcribed scenarios in file order, or
the names given): a fresh sandbox on the scenario's base state, and the user's fixed first message as the first
observation. Each `step` is one agent turn: a tool call (parsed with `tracec.trace_rl.envs.toolcall`, run in the
sandbox, its answer a `tool` observation: the result's Python repr or `Kind: message`) or a message to the user,
whose reply is a `user` observation. The episode ends when the user ends it, when the benchmark's message budget
is spent, or after `max_steps` turns; it is scored as ToolSandbox scores it (`milestones.evaluate`): the
similarity is the last step's reward and the trajectory's `env_reward`, `success` is a perfect score; the record
also holds the whole `evaluation` (`Evaluation.record()`) and the scenario's `categories`, which ToolSandbox's
per-category numbers read (`toolsandbox.metrics`).

The agent is given the scenario's allowed tools: as JSON schemas (`tools`, the native call format) or listed in
the system prompt (`text`). The user is made per scenario by `user_for` (default `scripted_user`: the scenario's
fixed replies, then it ends the conversation; `functools.partial(user.simulated_user, backend)`: a chat model as
the benchmark's user simulator). Steps record the `toolenv` facts (`trace_rl.envs.toolfacts`) but `rows` and
`done`; `args` are the argument values as strings, `target` the first id-like argument.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracec.trace_rl.envs.protocol import Environment, Observation, StepResult
from tracec.trace_rl.envs.toolcall import (
    CALL_FORMATS,
    DEFAULT_CALL_FORMAT,
    ToolCallError,
    argument_leaves,
    parse_tool_call,
)
from tracec.trace_rl.envs.toolfacts import RecordsToolFacts, ToolFacts
from tracec.trace_rl.envs.toolsandbox.clock import Clock
from tracec.trace_rl.envs.toolsandbox.milestones import Evaluation, evaluate
from tracec.trace_rl.envs.toolsandbox.replay import start
from tracec.trace_rl.envs.toolsandbox.sandbox import Outcome, Sandbox
from tracec.trace_rl.envs.toolsandbox.scenarios import AGENT_PROMPT, Scenario, ScenarioSet
from tracec.trace_rl.envs.users import STOP, ScriptedUser, User

TARGET_KEYS = ("person_id", "reminder_id", "message_id", "phone_number")
CALL_FORMAT = """\
## How to act
Each turn, do exactly one of these:
- call one tool: <action>tool_name(arg="value", other=1.5)</action> (arguments by name, values as JSON);
- or write a message to the user (plain text, no tool call in it)."""
NATIVE_FORMAT = """\
## How to act
Each turn, do exactly one of these: call one tool, or write a message to the user (plain text, no tool call in it)."""


def scripted_user(scenario: Scenario) -> ScriptedUser:
    """The scenario's fixed replies, one per agent message, then the user ends the conversation."""
    return ScriptedUser(scenario.user_replies, then=None, done_pattern=None, closing="end_conversation()")


@dataclass(frozen=True, kw_only=True)
class _CallFacts:
    """One call as the `toolenv` facts read it (`trace_rl.envs.toolfacts.ToolOutcome`)."""

    outcome: Outcome

    @property
    def kind(self) -> str:
        return "invalid" if self.outcome.tool is None else "mutate" if self.outcome.changes else "query"

    @property
    def tool(self) -> str | None:
        return self.outcome.tool

    @property
    def accepted(self) -> bool:
        return self.outcome.accepted

    @property
    def error(self) -> str | None:
        return self.outcome.answer.exception

    @property
    def changed(self) -> bool:
        return self.outcome.changed

    @property
    def revealed(self) -> frozenset[str]:
        trace = self.outcome.answer.tool_trace
        return frozenset(_ids(trace[0]["result"])) if trace else frozenset()


class ToolSandboxEnvironment(RecordsToolFacts, Environment):
    def __init__(self, scenarios: ScenarioSet, *, names: Sequence[str] | None = None, max_steps: int = 30,
                 user_for: Callable[[Scenario], User] = scripted_user, clock: Clock | None = None,
                 call_format: str = DEFAULT_CALL_FORMAT) -> None:
        if max_steps < 1:
            raise ValueError(f"ToolSandboxEnvironment: max_steps must be at least 1, got {max_steps}")
        if call_format not in CALL_FORMATS:
            raise ValueError(f"ToolSandboxEnvironment: call_format must be one of {', '.join(CALL_FORMATS)}, "
                             f"got {call_format!r}")
        self.scenarios = tuple(scenarios.get(name) for name in (scenarios.scenarios if names is None else names))
        if not self.scenarios:
            raise ValueError("ToolSandboxEnvironment: no scenarios to play")
        self.max_steps, self.user_for, self.clock, self.call_format = max_steps, user_for, clock, call_format
        self.scenario: Scenario | None = None
        self.sandbox: Sandbox | None = None
        self.done = True
        self._facts = ToolFacts(records_done=False)

    @property
    def system_prompt(self) -> str:
        if self.call_format == "native":
            return f"{AGENT_PROMPT}\n\n{NATIVE_FORMAT}"
        listing = "\n".join(f"- {s['function']['name']}: {s['function']['description']}" for s in self._schemas())
        return f"{AGENT_PROMPT}\n\n## Tools\n{listing}\n\n{CALL_FORMAT}"

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The current scenario's allowed tools as JSON schemas (native format; none before `reset`)."""
        return self._schemas() if self.call_format == "native" else []

    def reset(self, seed: int) -> Observation:
        self.scenario = self.scenarios[seed % len(self.scenarios)]
        self.sandbox = start(self.scenario, clock=self.clock, seed=seed)
        self.user = self.user_for(self.scenario)
        opening = self.user.start(self.scenario.first_message)
        self.steps, self.done, self.end = 0, False, "max_steps"
        self._evaluation: Evaluation | None = None
        self._facts.start(opening)
        return Observation(text=opening, role="user")

    def step(self, action: str) -> StepResult:
        if self.done or self.sandbox is None:
            raise RuntimeError("the episode is over (or never began): call reset(seed)")
        self.steps += 1
        call = parse_tool_call(action)
        if call is not None:
            outcome = (self.sandbox.malformed_call(action, call.message) if isinstance(call, ToolCallError)
                       else self.sandbox.call(call.name, call.arguments))
            arguments = {} if isinstance(call, ToolCallError) else call.arguments
            self.done = self._over()
            self._facts.tool_call(action, _CallFacts(outcome=outcome), args=argument_leaves(arguments),
                                  target=_target(arguments), done=self.done)
            observation = Observation(text=outcome.answer.content, role="tool")
        else:
            self.sandbox.agent_says(action)
            reply = self.user.respond(action)
            if reply.end == STOP:
                self.sandbox.end_conversation()
                self.end = "stop"
            else:
                self.sandbox.user_says(reply.text)
            self.done = self._over()
            self._facts.message(action, reply.text, done=self.done)
            observation = Observation(text=reply.text, role="user")
        reward = self.evaluation().similarity if self.done else 0.0
        return StepResult(observation=observation, done=self.done, reward=reward, state=self.states[-1],
                          action=self.actions[-1])

    def evaluation(self) -> Evaluation:
        """The benchmark's score of the episode so far (fixed once it is over)."""
        if self.scenario is None or self.sandbox is None:
            raise RuntimeError("no episode to score: call reset(seed)")
        if self._evaluation is not None:
            return self._evaluation
        result = evaluate(self.scenario, self.sandbox)
        if self.done:
            self._evaluation = result
        return result

    def trajectory(self, episode: str) -> dict[str, Any]:
        if self.scenario is None:
            raise RuntimeError("no episode to record: call reset(seed)")
        result = self.evaluation()
        return {"episode": episode, "task": f"toolsandbox/{self.scenario.name}",
                "instruction": self.scenario.user_task, "states": self.states, "actions": self.actions,
                "env_reward": result.similarity, "success": result.perfect, "end": self.end,
                "evaluation": result.record(), "categories": list(self.scenario.categories)}

    def _over(self) -> bool:
        assert self.sandbox is not None
        if not self.sandbox.active and self.end == "max_steps":
            self.end = "stop" if not self.sandbox.messages[-1].conversation_active else "max_messages"
        return not self.sandbox.active or self.steps >= self.max_steps

    def _schemas(self) -> list[dict[str, Any]]:
        return [] if self.sandbox is None else self.sandbox.toolbox.schemas()


def _target(arguments: Mapping[str, Any]) -> str | None:
    value = next((arguments[key] for key in TARGET_KEYS if isinstance(arguments.get(key), str)), None)
    return None if value is None else str(value)


def _ids(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [v for k, v in value.items() if k.endswith("_id") and isinstance(v, str)]
    if isinstance(value, list):
        return [found for item in value for found in _ids(item)]
    return [value] if isinstance(value, str) and len(value) == 36 and value.count("-") == 4 else []
