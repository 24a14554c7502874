"""Validation: is an environment a usable training signal? Checked over many seeds with three scripted agents.

- the gold agent (the `solution` as tool calls, then a message with every reported value) scores 1 on every seed;
- a do-nothing agent scores below 1 on every seed (the task needs a change or an answer);
- a random-tool agent (seeded) scores below 1 on average (the task is not hit by chance);
- distinct seeds give distinct tasks (at least `min_distinct` of them), and `reset` is deterministic;
- the hint (the trainer's expert guidance, `guidance.py`) gives away none of the seed's gold calls.
Left out: whether the task is solvable from what the agent sees; the gold agent knows the hidden picks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracec.dsl.errors import EnvError
from tracec.trace_rl.envs.agent import Agent, Message, run_episode, turns_taken
from tracec.trace_rl.envs.capability.episode import CapabilityEnvironment, Scores
from tracec.trace_rl.envs.capability.expr import show
from tracec.trace_rl.envs.capability.generate import rng_for
from tracec.trace_rl.envs.capability.guidance import gives_away
from tracec.trace_rl.envs.capability.program import Program, Scenario
from tracec.trace_rl.envs.toolcall import format_call

_EPS = 1e-9
_DONE = "I am done."


def _scenario(env: CapabilityEnvironment) -> Scenario:
    if env.scenario is None:
        raise RuntimeError("the agent acts before the environment was reset")
    return env.scenario


class GoldAgent:
    """Plays the seed's `solution` as tool calls in the environment's call format, then tells the user every
    reported value."""

    def __init__(self, env: CapabilityEnvironment):
        self.env = env

    def act(self, messages: Sequence[Message]) -> str:
        scenario, turn = _scenario(self.env), turns_taken(messages)
        if turn < len(scenario.gold_calls):
            call = scenario.gold_calls[turn]
            return format_call(call.name, call.arguments, self.env.call_format)
        if turn == len(scenario.gold_calls):
            values = ", ".join(show(v) for v in scenario.report)
            return f"All done. {values}".strip() if values else "All done."
        return _DONE


class NullAgent:
    def act(self, messages: Sequence[Message]) -> str:
        return _DONE


class RandomAgent:
    """Calls random tools with values drawn from the tables (so keys are real keys), then says it is done; the
    draws follow the episode's seed."""

    def __init__(self, env: CapabilityEnvironment):
        self.env = env
        self._drawn_for: Scenario | None = None

    def act(self, messages: Sequence[Message]) -> str:
        scenario = _scenario(self.env)
        if scenario is not self._drawn_for:  # a new episode: draw from its seed and its tables
            self._drawn_for = scenario
            self.rng = rng_for(scenario.seed, "validate/random-agent")
            values = [v for rows in scenario.db.rows.values() for row in rows for v in row.values()]
            self.pool = {kind: [v for v in values if type(v) is t] or [fallback]
                         for kind, t, fallback in (("str", str, "x"), ("int", int, 1), ("float", float, 1.0))}
            self.calls_left = self.rng.randint(1, 8)
        tools = self.env.program.tools
        if self.calls_left == 0 or not tools:
            return _DONE
        self.calls_left -= 1
        tool = self.rng.choice(list(tools.values()))
        return format_call(tool.name, {p.name: self.value(p.type.kind, p.type.members) for p in tool.info.params},
                           self.env.call_format)

    def value(self, kind: str, members: tuple[str, ...]) -> Any:
        if kind == "enum":
            return self.rng.choice(members)
        if kind == "bool":
            return self.rng.random() < 0.5
        return self.rng.choice(self.pool.get(kind if kind in ("int", "float") else "str", self.pool["str"]))


def play(env: CapabilityEnvironment, agent: Agent, seed: int) -> tuple[Scores, Scenario]:
    """One episode to its end (the environment's step limit bounds it); its scores and scenario."""
    run_episode(env, agent, seed, env.max_steps)
    return env.scores(), _scenario(env)


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
        lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)),
                 "  ".join(c.ljust(w) for c, w in zip(row, widths))]
        lines.append("ok" if self.ok else f"FAILED: {self.reason}")
        lines += [f"  also: {f}" for f in self.failures[1:5]]
        return "\n".join(lines)


def validate(program: Program, *, seeds: int = 100, first_seed: int = 0, min_distinct: float = 0.9) -> ValidationReport:
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    failures: list[str] = []
    gold, null, rand = [], [], []
    tasks: set[str] = set()
    env = CapabilityEnvironment(program)
    gold_agent, null_agent, random_agent = GoldAgent(env), NullAgent(), RandomAgent(env)
    for seed in range(first_seed, first_seed + seeds):
        try:
            gold_scores, scenario = play(env, gold_agent, seed)
            null_scores, again = play(env, null_agent, seed)
            rand_scores, _ = play(env, random_agent, seed)
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
        given = gives_away(program.hint, scenario.gold_calls) if program.hint else None
        if given is not None:
            call = format_call(given.name, given.arguments, "text").removeprefix("<action>").removesuffix("</action>")
            failures.append(f"seed {seed}: the hint gives away the solution's call {call}; a hint guides (what to look "
                            "at first, what to check before changing anything) without naming the calls or arguments")
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
