"""Writing a TRCA operator library: TRCA's offline step, by an LLM, checked, then validated on recorded episodes.

From a schema (the facts each transition carries), a description of the benchmark's interaction and, optionally,
recorded trajectories, the LLM writes one `rubric ... for SCHEMA` with 5 Evidence, 5 Execution and 5 Invalidity
operators, bindings for the task's parameters and context keys. The reply goes through the repair loop:
1. check: parsed and type-checked after the schema (the model's text comes first in the checked source, so the
   errors' line numbers are its own lines), and exactly 5 operators per category with a `context` line;
2. validate, on the episodes given (successful and failed recorded episodes, and random-agent episodes):
   every operator fires somewhere and not on every step; Evidence and Execution fire more on successful than on
   failed episodes; Invalidity fires more on random-agent episodes than on recorded ones. A rate is the mean over
   episodes of the share of the episode's steps on which the operator fires (long episodes do not outvote short
   ones). A check whose episodes are missing is skipped and said so in the report.
The operators that fail go back with their rates, for the model to rewrite (the others kept), within the bound.
The report gives every operator's rates and verdict. Left out: judging whether an operator means what its
description says (a person reads the report).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.compiler.backends import compile_kernel
from tracec.compiler.load import load_rubric
from tracec.dsl.errors import RubricError
from tracec.runtime.facts.trajectories.jsonl import Episode
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.llm.chat import Sampling, SamplingBackend
from tracec.trace_rl.llm.repair import ask
from tracec.trace_rl.llm.replies import ReplyProblem
from tracec.trace_rl.targeting.synth.reference import example_text, guide_sections, rubric_source

from tracec.atomic import write_atomic

PER_CATEGORY = 5
CATEGORIES = ("evidence", "execution", "invalidity")
SAMPLING = Sampling(temperature=0.4, max_tokens=2048)


@dataclass(frozen=True, kw_only=True)
class Episodes:
    """The episodes operators are validated on; any group may be empty."""

    succeeded: tuple[Episode, ...] = ()
    failed: tuple[Episode, ...] = ()
    random: tuple[Episode, ...] = ()


@dataclass(frozen=True, kw_only=True)
class OperatorReport:
    name: str
    category: str
    fired_steps: int
    steps: int
    rate_succeeded: float | None
    rate_failed: float | None
    rate_random: float | None
    problems: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class RubricResult:
    source: str
    attempts: int
    operators: tuple[OperatorReport, ...]
    skipped: tuple[str, ...]  # checks that had no episodes to run on


def render_report(operators: Sequence[OperatorReport], skipped: Sequence[str]) -> str:
    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    header = ("operator", "category", "fires", "succeeded", "failed", "random", "verdict")
    rows = [(o.name, o.category, f"{o.fired_steps}/{o.steps}", rate(o.rate_succeeded), rate(o.rate_failed),
             rate(o.rate_random), "ok" if not o.problems else "; ".join(o.problems)) for o in operators]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines += [f"not checked: {s}" for s in skipped]
    return "\n".join(lines) + "\n"


def validate_operators(compiled: Any, episodes: Episodes) -> tuple[list[OperatorReport], list[str]]:
    """Each operator's firing rates on the three groups, and its problems (see the module docstring)."""
    scorer = RubricScorer(compiled, compile_kernel(compiled.program, "interp", None))
    groups = {"succeeded": episodes.succeeded, "failed": episodes.failed, "random": episodes.random}
    rates: dict[str, list[float] | None] = {}
    fired_steps = [0] * len(compiled.operators)
    steps = 0
    always = [True] * len(compiled.operators)
    for group, members in groups.items():
        if not members:
            rates[group] = None
            continue
        result = scorer.score(list(members))
        offsets = result.batch.episode_offsets
        per_episode = []
        for e in range(len(members)):
            rows = result.fired[offsets[e] : offsets[e + 1]]  # (steps of episode e, n_operators)
            per_episode.append(rows.mean(axis=0) if len(rows) else rows.sum(axis=0).astype(float))
        rates[group] = [statistics.fmean(float(r[j]) for r in per_episode) for j in range(len(compiled.operators))]
        for j in range(len(compiled.operators)):
            fired_steps[j] += int(result.fired[:, j].sum())
            always[j] = always[j] and bool(result.fired[:, j].all())
        steps += result.batch.n_transitions
    skipped = []
    if rates["succeeded"] is None or rates["failed"] is None:
        skipped.append("Evidence and Execution firing more on successful than on failed episodes "
                       "(needs both; give --trajectories with both, or --env)")
    if rates["random"] is None or (rates["succeeded"] is None and rates["failed"] is None):
        skipped.append("Invalidity firing more on random-agent episodes (needs --random-trajectories and recorded "
                       "episodes, or --env)")
    reports = []
    for j, op in enumerate(compiled.operators):
        got = {g: (None if r is None else r[j]) for g, r in rates.items()}
        problems = _problems(op.category, fired_steps[j], steps, always[j], got, episodes)
        reports.append(OperatorReport(name=op.name, category=op.category, fired_steps=fired_steps[j], steps=steps,
                                      rate_succeeded=got["succeeded"], rate_failed=got["failed"],
                                      rate_random=got["random"], problems=tuple(problems)))
    return reports, skipped


def _problems(category: str, fired: int, steps: int, always: bool, rate: dict[str, float | None],
              episodes: Episodes) -> list[str]:
    if steps == 0:
        return []
    if fired == 0:
        return ["never fires"]
    if always:
        return ["fires on every step (constant)"]
    found = []
    succeeded, failed, random = rate["succeeded"], rate["failed"], rate["random"]
    if category in ("evidence", "execution") and succeeded is not None and failed is not None \
            and not succeeded > failed:
        found.append(f"fires no more on successful episodes ({succeeded:.3f}) than on failed ones ({failed:.3f})")
    recorded = len(episodes.succeeded) + len(episodes.failed)
    if category == "invalidity" and random is not None and recorded:
        # The recorded episodes' rate: the two groups' rates weighted by their episode counts.
        mean = (len(episodes.succeeded) * (succeeded or 0.0) + len(episodes.failed) * (failed or 0.0)) / recorded
        if not random > mean:
            found.append(f"fires no more on random-agent episodes ({random:.3f}) than on recorded ones ({mean:.3f})")
    return found


class RubricChecks:
    """Check then validate one candidate; its failures become the `ReplyProblem` sent back."""

    def __init__(self, schema_text: str, episodes: Episodes, attempts_dir: Path,
                 report: Callable[[str], None]) -> None:
        # `schema_text` is appended to every candidate ("" for a built-in schema, which the checker knows).
        self.schema_text, self.episodes, self.attempts_dir, self.report = schema_text, episodes, attempts_dir, report
        self.count = 0

    def __call__(self, reply: str) -> RubricResult:
        self.count += 1
        source = rubric_source(reply)
        path = self.attempts_dir / f"attempt_{self.count}.rubric"
        write_atomic(path, [source])
        try:
            compiled = load_rubric(source + "\n" + self.schema_text, path.name)
        except RubricError as error:
            self.report(f"attempt {self.count}: check failed")
            raise ReplyProblem(f"the checker rejects the rubric:\n{error.format()}") from None
        counts = {c: sum(op.category == c for op in compiled.operators) for c in CATEGORIES}
        has_context = bool(compiled.program.context)
        if any(n != PER_CATEGORY for n in counts.values()) or not has_context:
            said = ", ".join(f"{n} {c}" for c, n in counts.items())
            self.report(f"attempt {self.count}: wrong shape ({said})")
            raise ReplyProblem(f"the rubric needs exactly {PER_CATEGORY} evidence, {PER_CATEGORY} execution and "
                               f"{PER_CATEGORY} invalidity operators and a `context` line; it has {said}"
                               + ("" if has_context else " and no context line"))
        operators, skipped = validate_operators(compiled, self.episodes)
        failing = [o for o in operators if o.problems]
        if failing:
            self.report(f"attempt {self.count}: {len(failing)} operators fail validation")
            listed = "\n".join(f"- {o.name} ({o.category}): {'; '.join(o.problems)}" for o in failing)
            raise ReplyProblem("the rubric checks, but these operators fail validation on the recorded episodes:\n"
                               f"{listed}\nRewrite these operators (keep the others as they are)")
        self.report(f"attempt {self.count}: accepted ({compiled.name})")
        return RubricResult(source=source, attempts=self.count, operators=tuple(operators), skipped=tuple(skipped))


def rubric_prompt(schema_name: str, schema_text: str, description: str, excerpts: Sequence[str],
                  example: Path) -> list[dict[str, str]]:
    guide = guide_sections((2, 3, 4, 5))
    shown = "\n\n".join(f"### episode {i + 1}\n{e}" for i, e in enumerate(excerpts))
    system = ("You write TRCA operator libraries in the `.rubric` language: boolean operators over one transition "
              "(the state before, the action, the state after) that credit progress and penalise mistakes.")
    user = (
        f"The language:\n\n{guide}\n\nA complete example (for another schema):\n\n```rubric\n{example_text(example)}"
        f"\n```\n\nThe schema of the facts every transition carries:\n\n```rubric\n{schema_text.strip()}\n```\n\n"
        f"The benchmark: {description}\n"
        + (f"\nRecorded episodes:\n\n{shown}\n" if shown else "")
        + f"\nWrite one `rubric NAME for {schema_name}` with exactly {PER_CATEGORY} evidence operators (progress "
        f"toward the goal), {PER_CATEGORY} execution operators (doing the task's steps right) and {PER_CATEGORY} "
        "invalidity operators (malformed, refused or harmful actions); a `bind` line for each task parameter "
        "the instruction names, a `budget` line and one `context` line. Do not repeat the schema. Reply with the "
        "rubric only, in one ```rubric code block."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def synthesize_rubric(backend: SamplingBackend, *, schema_name: str, schema_text: str, description: str,
                      append_schema: bool, episodes: Episodes, excerpts: Sequence[str], example: Path, tries: int,
                      out_dir: Path, log: CallLog, report: Callable[[str], None],
                      sampling: Sampling = SAMPLING) -> RubricResult:
    checks = RubricChecks(schema_text if append_schema else "", episodes, out_dir, report)
    messages = rubric_prompt(schema_name, schema_text, description, excerpts, example)
    accepted = ask(backend, messages, checks, log=log, purpose=f"operator library for {schema_name}", tries=tries,
                   sampling=sampling,
                   instruction="Reply again with the whole corrected rubric in one ```rubric code block.")
    return accepted.value
