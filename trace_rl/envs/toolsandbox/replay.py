"""Gold replay: a scenario's gold calls and messages played against its scripted user, then scored.

`start(scenario)` opens the episode (the base world, the allowed tools, the opening messages), which the gold
replay and the environment share. The replayed user answers each gold message with its next fixed reply and ends
the conversation after the last. A gold argument `{"$result": i}` (or `[i, key]`) is the i-th gold call's result,
and a gold message is formatted with the results as `r0, r1, ...`. `GoldAgent` plays the same steps through the
environment protocol, a turn each, in the environment's call format (with the scripted user: the gold replay).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracec.trace_rl.envs.agent import Message, turns_taken
from tracec.trace_rl.envs.toolcall import format_call
from tracec.trace_rl.envs.toolsandbox.catalog import Toolbox
from tracec.trace_rl.envs.toolsandbox.clock import Clock
from tracec.trace_rl.envs.toolsandbox.milestones import Evaluation, evaluate
from tracec.trace_rl.envs.toolsandbox.sandbox import MAX_MESSAGES, Sandbox
from tracec.trace_rl.envs.toolsandbox.scenarios import AGENT_PROMPT, Scenario
from tracec.trace_rl.envs.toolsandbox.world import base_world

if TYPE_CHECKING:  # the environment imports this module for `start`
    from tracec.trace_rl.envs.toolsandbox.environment import ToolSandboxEnvironment


class ReplayError(RuntimeError):
    """A gold step that cannot be played (a call the sandbox refused, a `$result` of a missing call)."""


@dataclass(frozen=True, kw_only=True)
class Replay:
    scenario: Scenario
    sandbox: Sandbox
    evaluation: Evaluation


def start(scenario: Scenario, *, clock: Clock | None = None, seed: int = 0,
          max_messages: int = MAX_MESSAGES) -> Sandbox:
    clock = clock or Clock()
    return Sandbox(world=base_world(scenario.base, clock), clock=clock,
                   toolbox=Toolbox(scenario.tools, scenario.denied_tools), agent_prompt=AGENT_PROMPT,
                   user_prompt=scenario.user_instruction, first_message=scenario.first_message, seed=seed,
                   max_messages=max_messages)


def replay_gold(scenario: Scenario, *, clock: Clock | None = None, seed: int = 0) -> Replay:
    """Play the gold steps; every call must be accepted (a refusal is a ReplayError naming the step)."""
    sandbox = start(scenario, clock=clock, seed=seed)
    results: list[Any] = []
    replies = iter(scenario.user_replies)
    for position, step in enumerate(scenario.gold):
        if step.call is not None:
            outcome = sandbox.call(step.call, _resolve(step.arguments or {}, results, scenario, position))
            if not outcome.accepted:
                raise ReplayError(f"{scenario.name}: gold[{position}] {step.call}: {outcome.answer.content}")
            assert outcome.answer.tool_trace is not None, "an accepted call is traced"
            results.append(outcome.answer.tool_trace[0]["result"])
            continue
        assert step.say is not None, "a gold step is a call or a message"
        sandbox.agent_says(step.say.format(**{f"r{i}": result for i, result in enumerate(results)}))
        reply = next(replies, None)
        if reply is None:
            sandbox.end_conversation()
        else:
            sandbox.user_says(reply)
    return Replay(scenario=scenario, sandbox=sandbox, evaluation=evaluate(scenario, sandbox))


class GoldAgent:
    """Takes the gold steps of the scenario its environment plays, one a turn (the last again once they run out); a
    `$result` argument reads the answers the sandbox gave the gold calls so far."""

    def __init__(self, env: ToolSandboxEnvironment) -> None:
        self.env = env

    def act(self, messages: Sequence[Message]) -> str:
        scenario, sandbox = self.env.scenario, self.env.sandbox
        if scenario is None or sandbox is None:
            raise RuntimeError("the agent acts before the environment was reset")
        position = min(turns_taken(messages), len(scenario.gold) - 1)
        step = scenario.gold[position]
        results = [m.tool_trace[0]["result"] for m in sandbox.messages if m.tool_trace]
        if step.call is not None:
            arguments = _resolve(step.arguments or {}, results, scenario, position)
            return format_call(step.call, arguments, self.env.call_format)
        assert step.say is not None, "a gold step is a call or a message"
        return step.say.format(**{f"r{i}": result for i, result in enumerate(results)})


def _resolve(value: Any, results: list[Any], scenario: Scenario, position: int) -> Any:
    if isinstance(value, list):
        return [_resolve(item, results, scenario, position) for item in value]
    if not isinstance(value, dict):
        return value
    if "$result" not in value:
        return {key: _resolve(item, results, scenario, position) for key, item in value.items()}
    spec = value["$result"]
    index, key = (spec, None) if isinstance(spec, int) else (spec[0], spec[1])
    try:
        return results[index] if key is None else results[index][key]
    except (IndexError, KeyError, TypeError):
        raise ReplayError(f"{scenario.name}: gold[{position}]: no result {spec!r} among {len(results)}") from None
