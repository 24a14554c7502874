"""A tau2-bench domain as the one environment protocol (`tracec.trace_rl.envs.protocol.Environment`).

`reset(seed)` plays task `seed mod n` of the environment's task list (the domain's tasks in file order, or the
ids given, a split say): a fresh copy of the database, the agent's fixed greeting (as in the benchmark) to the
user, and the user's answer as the first observation. Each `step` is one agent turn: a tool call (parsed with
`tracec.trace_rl.envs.toolcall`, executed, its result a `tool` observation) or a message to the user, whose reply is a
`user` observation. The episode ends when the user ends it (`###STOP###`, `###TRANSFER###`,
`###OUT-OF-SCOPE###`) or after `max_steps` turns, and is scored as the benchmark scores it (`scoring.py`): the
reward of the last step and the trajectory's `env_reward`.

`call_format` says how the agent is given the tools: `native` (the default) as the toolkit's JSON schemas
(`tools`), the system prompt the policy and how to act; `text`, listed in the system prompt with the `<action>`
call format (`CALL_FORMAT`), `tools` empty. Both spellings of a call are read either way.

The environment owns its user (`trace_rl.envs.users`): `tau2_user` is the LLM simulator with the benchmark's
guidelines, `scripted_user` and `gold.gold_user` are scripted ones. The agent's conversation starts with the
user's first message: the greeting is the user's context only (many chat templates want a user turn first).
Steps record the `toolenv` facts (`trace_rl.envs.toolfacts`) without `rows` and `done`, as the tau2 adapter always has.
`args` are every argument value as a string (nested lists and objects flattened to their leaves), `target` the
first of the primary id arguments present (`TARGET_KEYS`); `calculate` and `transfer_to_human_agents` are queries.

Left out: retries of a failing backend, and the benchmark's cap on consecutive tool errors (`max_steps` bounds
an agent that never stops).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.protocol import Environment, Observation, StepResult
from tracec.trace_rl.envs.tau2.db import Db
from tracec.trace_rl.envs.tau2.env import Domain, Tau2Tools
from tracec.trace_rl.envs.tau2.gold import replay_gold
from tracec.trace_rl.envs.tau2.scoring import Score, score
from tracec.trace_rl.envs.tau2.tasks import Task
from tracec.trace_rl.envs.toolcall import CALL_FORMATS, DEFAULT_CALL_FORMAT, argument_leaves, parse_tool_call
from tracec.trace_rl.envs.toolfacts import RecordsToolFacts, ToolFacts
from tracec.trace_rl.envs.users import OUT_OF_SCOPE, SCENARIO, STOP, TRANSFER, LLMUser, ScriptedUser, User
from tracec.trace_rl.llm.chat import ChatBackend

GREETING = "Hi! How can I help you today?"
TARGET_KEYS = ("reservation_id", "order_id", "user_id", "product_id", "item_id", "flight_number")
ENDS = {STOP: "stop", TRANSFER: "transfer", OUT_OF_SCOPE: "out_of_scope"}  # the trajectory's `end`
CALL_FORMAT = """\
## How to act
Each turn, do exactly one of these:
- call one tool: <action>tool_name(arg="value", other=[1, 2])</action> (arguments by name, values as JSON);
- or write a message to the user (plain text, no tool call in it).
The tool's result comes back as JSON, or as `Error: ...` when the call is refused."""
NATIVE_FORMAT = """\
## How to act
Each turn, do exactly one of these: call one tool, or write a message to the user (plain text, no tool call in it).
The tool's result comes back as JSON, or as `Error: ...` when the call is refused."""


class Tau2Environment(RecordsToolFacts, Environment):
    """Episodes of one domain's tasks. `gold`: a cache of each task's gold database (`replay_gold`), filled on
    first use; pass one mapping to the environments of a group so that they replay each task once."""

    def __init__(self, domain: Domain, *, user: User, task_ids: Sequence[str] | None = None, max_steps: int = 60,
                 greeting: str = GREETING, gold: MutableMapping[str, Db] | None = None,
                 call_format: str = DEFAULT_CALL_FORMAT) -> None:
        if max_steps < 1:
            raise ValueError(f"Tau2Environment: max_steps must be at least 1, got {max_steps}")
        if call_format not in CALL_FORMATS:
            raise ValueError(f"Tau2Environment: call_format must be one of {', '.join(CALL_FORMATS)}, "
                             f"got {call_format!r}")
        self.call_format = call_format
        self.tasks = tuple(domain.task(task_id) for task_id in (domain.tasks if task_ids is None else task_ids))
        if not self.tasks:
            raise ValueError(f"Tau2Environment: no tasks to play in the {domain.name} domain")
        self.domain, self.user, self.max_steps, self.greeting = domain, user, max_steps, greeting
        self.gold: MutableMapping[str, Db] = {} if gold is None else gold
        self.task: Task | None = None
        self.done = True
        self._facts = ToolFacts(records_done=False)

    @property
    def system_prompt(self) -> str:
        """Policy and how to act; in the text format also the tools and how to write a call (native: `tools`)."""
        if self.call_format == "native":
            return f"{self.domain.policy.strip()}\n\n{NATIVE_FORMAT}"
        return f"{self.domain.policy.strip()}\n\n## Tools\n{self.domain.toolkit.describe()}\n\n{CALL_FORMAT}"

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The domain's tools as JSON schemas in the native format; none in the text format (the prompt lists them)."""
        return self.domain.toolkit.schemas() if self.call_format == "native" else []

    def task_for(self, seed: int) -> Task:
        return self.tasks[seed % len(self.tasks)]

    def reset(self, seed: int) -> Observation:
        self.task = self.task_for(seed)
        self.service = Tau2Tools(self.domain)  # the episode's database and tools (`tools` are their schemas)
        self.steps, self.done, self.end = 0, False, "max_steps"
        self.agent_messages: list[str] = []
        self._score: Score | None = None
        opening = self.user.start(user_scenario(self.task), greeting=self.greeting)
        self._facts.start(opening)
        return Observation(text=opening, role="user")

    def step(self, action: str) -> StepResult:
        if self.done or self.task is None:
            raise RuntimeError("the episode is over (or never began): call reset(seed)")
        self.steps += 1
        call = parse_tool_call(action)
        if call is not None:
            outcome = self.service.execute(call)
            self.done = self.steps >= self.max_steps
            self._facts.tool_call(action, outcome, args=argument_leaves(outcome.arguments),
                                  target=primary_target(outcome.arguments), done=self.done)
            observation = Observation(text=outcome.content, role="tool")
        else:
            reply = self.user.respond(action)
            self.agent_messages.append(action)
            if reply.end is not None:
                self.end = ENDS[reply.end]
            self.done = reply.end is not None or self.steps >= self.max_steps
            self._facts.message(action, reply.text, done=self.done)
            observation = Observation(text=reply.text, role="user")
        return StepResult(observation=observation, done=self.done, reward=self.score().reward if self.done else 0.0,
                          state=self.states[-1], action=self.actions[-1])

    def score(self) -> Score:
        """The benchmark's score of the episode so far (fixed once it is over)."""
        if self.task is None:
            raise RuntimeError("no episode to score: call reset(seed)")
        if self._score is not None:
            return self._score
        if self.task.id not in self.gold:
            self.gold[self.task.id] = replay_gold(self.domain, self.task)[0].db
        result = score(self.task, self.service.db, self.agent_messages, gold=self.gold[self.task.id])
        if self.done:
            self._score = result
        return result

    def trajectory(self, episode: str) -> dict[str, Any]:
        """The episode as one trajectory line; `end` says how it ended (`max_steps`: the turns ran out)."""
        if self.task is None:
            raise RuntimeError("no episode to record: call reset(seed)")
        reward = self.score().reward
        return {"episode": episode, "task": self.task.key, "instruction": self.task.instruction,
                "states": self.states, "actions": self.actions, "env_reward": reward, "success": reward == 1.0,
                "end": self.end}


def user_scenario(task: Task) -> str:
    """What the simulated user is told: its persona, then the task's scenario."""
    persona = f"Persona: {task.persona.strip()}\n\n" if task.persona else ""
    return f"{persona}{task.instruction}"


def primary_target(arguments: Mapping[str, Any]) -> str | None:
    target = next((arguments[key] for key in TARGET_KEYS if isinstance(arguments.get(key), (str, int))), None)
    return None if target is None or isinstance(target, bool) else str(target)


def load_guidelines(data_dir: Path) -> str:
    path = Path(data_dir) / "user_simulator" / "simulation_guidelines.md"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise FileNotFoundError(f"{path}: cannot read the user simulator guidelines: {err}") from None


def tau2_user(backend: ChatBackend, *, guidelines: str) -> LLMUser:
    """The benchmark's user simulator: the guidelines and the scenario as its system prompt; its replies are
    recorded as written, end token included."""
    prompt = f"{guidelines.strip()}\n\n<scenario>\n{SCENARIO}\n</scenario>"
    return LLMUser(backend, prompt=prompt, keep_end_token=True)


def scripted_user(lines: Sequence[str]) -> ScriptedUser:
    """A user that says `lines`, one a turn whatever the agent said (the first answers the greeting), then
    `###STOP###`."""
    return ScriptedUser(lines, then=None, done_pattern=None, closing=STOP)
