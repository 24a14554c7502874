"""The one environment protocol: what the trainer, `evaluate` and the pipeline run, whatever the target.

Capability environments (`trace_rl/envs/capability/`), TextWorld games and tau2-bench domains all speak it. An episode
is a conversation: `reset(seed)` gives the system prompt's task-independent part (`system_prompt`) and the first
observation; each agent turn is one `step(action_text)`, which gives the next observation (a tool result or game
text, or the simulated user's reply: the user lives inside the environment), whether the episode is over, the step's
environment reward (the terminal reward on the last step, 0 before), and the transition's canonical facts (the state
after the action and the action's facts, in the environment's schema). `trajectory()` is the finished episode as one
record of trajectory JSONL (`docs/` describes the format), which a rubric scores. Four parts have defaults, which
an environment inherits by subclassing `Environment` (every environment here does): `hint()`, after `reset(seed)`,
is expert guidance for the task (what to attend to, never the answer) or None (the default: no hint), which the
trainer shows to some rollouts (`rollout.hint_ratio`); `admissible_commands`, the commands the current state admits
(TextWorld's), which the admissible action mode chooses from, or None (the default: this environment lists none);
`tools`, the tools the agent is given as OpenAI-style JSON schemas (`[{"type": "function", "function": {"name",
"description", "parameters": {"type": "object", "properties", "required"}}}]`), which the chat template renders
(`tracec.trace_rl.llm.conversation`; the default: [], as TextWorld has); `close()` lets a game engine or a
subprocess go (the default: nothing to let go). Whoever makes an environment closes it when done with
it (`with contextlib.closing(make_env()) as env:`, or `env.close()` in a `finally`). A `kind = "python"` factory's
object that does not subclass `Environment` gets the defaults from `envs.user_factory`, the one place that looks
for them. Optional, without a default: `call_format`, `native` (the default of the tool environments, capability
and tau2: tools as schemas, calls as `<tool_call>{...}</tool_call>`, the system prompt without the prose tool list)
or `text` (the tools listed in the system prompt, calls as `<action>f(a=...)</action>`; `tools` is then empty). An
environment reads both spellings of a call whatever its format. `agent_tools(env)` is how every path that renders
an agent's prompt reads the tools.

The same seed gives the same task instance: a GRPO group is K environments reset with one seed.
Agents and the one episode loop (`run_episode`) are in `trace_rl.envs.agent`; users, in `trace_rl.envs.users`.
Left out: batched environments (the trainer steps K instances side by side) and asynchronous stepping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Role = Literal["user", "tool"]


@dataclass(frozen=True, kw_only=True, slots=True)  # slots: built once a step, they cost a third less
class Observation:
    """What the agent is shown: its text, and the chat role it arrives in (`tool` results, `user` messages)."""

    text: str
    role: Role = "user"


@dataclass(frozen=True, kw_only=True, slots=True)  # slots: built once a step, they cost a third less
class StepResult:
    observation: Observation
    done: bool
    reward: float  # the environment's reward for this step: its terminal reward on the last step, else 0
    state: dict[str, Any]  # s_t+1's canonical facts
    action: dict[str, Any]  # a_t's canonical facts


class Environment(Protocol):
    @property
    def system_prompt(self) -> str:
        """The instructions an agent gets before the first observation (call format, tools, goal)."""

    def reset(self, seed: int) -> Observation:
        """Start the task instance of `seed` (a pure function of it) and return the first observation."""

    def step(self, action: str) -> StepResult:
        """Apply the agent's turn, exactly as the agent wrote it."""

    def trajectory(self, episode: str) -> dict[str, Any]:
        """The episode so far as one trajectory record (`episode`, `task`, `instruction`, `states`, `actions`,
        `env_reward`, `success`)."""

    # With defaults, inherited by a class that subclasses the protocol (a structural match must write them):

    def hint(self) -> str | None:
        """Expert guidance for the task of the last `reset(seed)` (TRACE's hint: what to attend to, what to check,
        in which order; a capability environment's never holds its solution's calls), or None: no hint."""
        return None

    @property
    def admissible_commands(self) -> Sequence[str] | None:
        """The commands the current state admits, which the admissible action mode chooses from; None: this
        environment lists none (an empty list: it lists them, and admits none now)."""
        return None

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools the agent is given, as OpenAI-style JSON schemas; [] in the text format and without tools."""
        return []

    def close(self) -> None:
        """Let what the environment holds (a game engine, a subprocess) go now, not at garbage collection."""
        return  # the default holds nothing (a body, not a stub: mypy would take a stub for an abstract method)

    # Optional, without a default: call_format: str, native | text (`tracec.trace_rl.envs.toolcall.CALL_FORMATS`)


def agent_tools(env: Environment) -> list[dict[str, Any]]:
    """The JSON schemas of the tools `env` gives its agent (a copy): [] for one without any, or in text format."""
    return list(env.tools)


DEFAULTED_PARTS = ("hint", "admissible_commands", "tools", "close")  # what a subclass inherits; the rest it writes

EnvironmentFactory = Callable[[], Environment]  # a fresh instance; a group of K rollouts makes K of them
