"""Validation: is an environment a usable training signal? Checked over many seeds with three scripted agents.

- the gold agent (the `solution` as tool calls, then a message with every reported value) scores 1 on every seed;
- a do-nothing agent scores below 1 on every seed (the task needs a change or an answer);
- a random-tool agent (seeded) scores below 1 on average (the task is not hit by chance);
- distinct seeds give distinct tasks (at least `min_distinct` of them), and `reset` is deterministic.
Left out: whether the task is solvable from what the agent sees; the gold agent knows the hidden picks.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tracec.dsl.errors import EnvError
from tracec.runtime.env.episode import Environment, Scores
from tracec.runtime.env.expr import show
from tracec.runtime.env.generate import rng_for
from tracec.runtime.env.program import Program, Scenario
from tracec.runtime.toolcall import format_tool_call

_EPS = 1e-9
_DONE = "I am done."


class Agent(Protocol):
    def act(self, observation: str) -> str: ...


class GoldAgent:
    def __init__(self, scenario: Scenario):
        values = ", ".join(show(v) for v in scenario.report)
        final = f"All done. {values}".strip() if values else "All done."
        self.turns = [format_tool_call(c.name, c.arguments) for c in scenario.gold_calls] + [final]

    def act(self, observation: str) -> str:
        return self.turns.pop(0) if self.turns else _DONE


class NullAgent:
    def act(self, observation: str) -> str:
        return _DONE


class RandomAgent:
    """Calls random tools with values drawn from the tables (so keys are real keys), then says it is done."""

    def __init__(self, program: Program, scenario: Scenario, rng: random.Random):
        self.program, self.rng = program, rng
        values = [v for rows in scenario.db.rows.values() for row in rows for v in row.values()]
        self.pool = {kind: [v for v in values if type(v) is t] or [fallback]
                     for kind, t, fallback in (("str", str, "x"), ("int", int, 1), ("float", float, 1.0))}
        self.calls_left = rng.randint(1, 8)

    def act(self, observation: str) -> str:
        if self.calls_left == 0 or not self.program.tools:
            return _DONE
        self.calls_left -= 1
        tool = self.rng.choice(list(self.program.tools.values()))
        return format_tool_call(tool.name, {p.name: self.value(p.type.kind, p.type.members) for p in tool.info.params})

    def value(self, kind: str, members: tuple[str, ...]) -> Any:
        if kind == "enum":
            return self.rng.choice(members)
        if kind == "bool":
            return self.rng.random() < 0.5
        return self.rng.choice(self.pool.get(kind if kind in ("int", "float") else "str", self.pool["str"]))


def run_episode(program: Program, seed: int, agent: Callable[[Scenario], Agent]) -> tuple[Scores, Scenario]:
    env = Environment(program)
    observation = env.reset(seed)
    assert env.scenario is not None
    actor, done = agent(env.scenario), False
    while not done:
        observation, done = env.step(actor.act(observation))
    return env.scores(), env.scenario


@dataclass(frozen=True, kw_only=True)
class ValidationReport:
    environment: str
    seeds: int
    gold_mean: float
    null_mean: float
    random_mean: float
    distinct_tasks: int
    failures: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def reason(self) -> str | None:
        return self.failures[0] if self.failures else None

    def render(self) -> str:
        header = ("environment", "seeds", "gold mean", "null mean", "random mean", "distinct tasks")
        row = (self.environment, str(self.seeds), f"{self.gold_mean:.3f}", f"{self.null_mean:.3f}",
               f"{self.random_mean:.3f}", str(self.distinct_tasks))
        widths = [max(len(h), len(c)) for h, c in zip(header, row)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join(c.ljust(w) for c, w in zip(row, widths))]
        lines.append("ok" if self.ok else f"FAILED: {self.reason}")
        lines += [f"  also: {f}" for f in self.failures[1:5]]
        return "\n".join(lines)


def validate(program: Program, *, seeds: int = 100, first_seed: int = 0, min_distinct: float = 0.9) -> ValidationReport:
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    failures: list[str] = []
    gold, null, rand = [], [], []
    tasks: set[str] = set()
    for seed in range(first_seed, first_seed + seeds):
        try:
            gold_scores, scenario = run_episode(program, seed, GoldAgent)
            null_scores, again = run_episode(program, seed, lambda s: NullAgent())
            rng = rng_for(seed, "validate/random-agent")
            rand_scores, _ = run_episode(program, seed, functools.partial(RandomAgent, program, rng=rng))
        except EnvError as error:
            failures.append(f"seed {seed}: {error.diagnostics[0].format().splitlines()[0]}")
            gold.append(0.0)
            continue
        tasks.add(scenario.task)
        gold.append(gold_scores.reward)
        null.append(null_scores.reward)
        rand.append(rand_scores.reward)
        if _fingerprint(scenario) != _fingerprint(again):
            failures.append(f"seed {seed}: reset is not deterministic")
        if gold_scores.reward < 1.0 - _EPS:
            failures.append(f"seed {seed}: the gold solution scores {gold_scores.reward:.3f} "
                            f"(state {gold_scores.state:.0f}, report {gold_scores.report:.0f})")
        if null_scores.reward >= 1.0 - _EPS:
            failures.append(f"seed {seed}: doing nothing scores 1; the task needs no change and no answer")
    random_mean = _mean(rand)
    if rand and random_mean >= 1.0 - _EPS:
        failures.append(f"random tool calls score {random_mean:.3f} on average; the task is hit by chance")
    if len(tasks) < min_distinct * seeds:
        failures.append(f"only {len(tasks)} distinct tasks in {seeds} seeds (need {min_distinct:.0%}); "
                        "the task text should name what the seed picked")
    return ValidationReport(environment=program.name, seeds=seeds, gold_mean=_mean(gold), null_mean=_mean(null),
                            random_mean=random_mean, distinct_tasks=len(tasks), failures=tuple(failures))


def _fingerprint(scenario: Scenario) -> tuple[str, str, str]:
    return scenario.task, scenario.db.digest(), scenario.gold_digest


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
