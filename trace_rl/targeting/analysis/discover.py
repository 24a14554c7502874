"""Capability discovery: an LLM reads successful and failed trajectories and proposes the capabilities the agent
lacks, as a validated dictionary `{"candidates": [{"name", "description", "example_trajectories"}]}` (TRACE's
`candidate_capabilities.json`).

Each of the n runs is independent: its own sample of the trajectories (failures and successes balanced, drawn by
the run's seed) and its own sampling seed, so the runs see different evidence and the merge measures agreement.
A reply is accepted when it matches the schema, its names are distinct snake_case, and every example id is one the
prompt showed; otherwise the problem goes back (`llm.repair`). Candidates merge by name (the schema holds names
to snake_case, so `Multi-Step` and `multi_step` cannot both occur): the first run's description wins, examples are
pooled, and `proposed_in` counts the runs that named it. The merged dictionary is ordered by that count, then by first
appearance, and cut to `max_candidates`.
Left out: merging near-synonyms with different names (the labeling phase would disagree on them; review the
dictionary, as TRACE advises, before labeling).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.llm.chat import Sampling, SamplingBackend
from tracec.trace_rl.llm.repair import TRIES, ask_json
from tracec.trace_rl.llm.replies import ReplyProblem
from tracec.trace_rl.targeting.analysis.cases import Case, split
from tracec.trace_rl.targeting.analysis.progress import Progress

NAME_PATTERN = r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$"
SAMPLING = Sampling(temperature=0.7, max_tokens=1024)  # diverse runs; the repair loop catches the stray reply


@dataclass(frozen=True, kw_only=True)
class DiscoverSettings:
    runs: int = 3
    max_candidates: int = 10
    cases_per_run: int = 16
    case_chars: int = 1500
    tries: int = TRIES
    seed: int = 0  # run r samples its trajectories and its replies under seed * 10^6 + r * 1000 (+ attempt)
    sampling: Sampling = SAMPLING

    def __post_init__(self) -> None:
        for name in ("runs", "max_candidates", "cases_per_run", "tries"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.case_chars < 200:
            raise ValueError(f"--case-chars must be at least 200, got {self.case_chars}")


def schema(max_candidates: int) -> dict[str, Any]:
    example = {"type": "object", "required": ["task_id"],
               "properties": {"task_id": {"type": "string"}, "reward": {"type": "number"}, "note": {"type": "string"}}}
    candidate = {"type": "object", "required": ["name", "description"],
                 "properties": {"name": {"type": "string", "pattern": NAME_PATTERN},
                                "description": {"type": "string", "minLength": 20},
                                "example_trajectories": {"type": "array", "items": example}}}
    return {"type": "object", "required": ["candidates"],
            "properties": {"candidates": {"type": "array", "minItems": 1, "maxItems": max_candidates,
                                          "items": candidate}}}


def discovery_prompt(shown: Sequence[Case], settings: DiscoverSettings) -> list[dict[str, str]]:
    failed, passed = split(shown)
    blocks = [f"### trajectory {c.id} ({'PASSED' if c.success else 'FAILED'}, reward {c.reward:g})\n"
              f"{c.excerpt(settings.case_chars)}" for c in [*failed, *passed]]
    system = ("You analyse an AI agent's trajectories to find the general capabilities it lacks. A capability is a "
              "general skill (for example multi_step_planning, error_recovery, numerical_verification), never a "
              "domain rule or a hint for one task.")
    user = (
        f"Below are {len(failed)} failed and {len(passed)} successful trajectories of one agent.\n\n"
        + "\n\n".join(blocks)
        + f"\n\nPropose up to {settings.max_candidates} distinct capabilities that explain the failures. For each: "
        "a snake_case name of 2-5 words; a 2-3 sentence description precise enough that another analyst can tell, "
        "for any trajectory, whether the task needed the capability and whether the agent showed it; and 2-4 "
        "example trajectories from those above (their ids exactly as written), failed and passed, with a short "
        "note each.\nReply with only a JSON object:\n"
        '{"candidates": [{"name": "snake_case_name", "description": "...", "example_trajectories": '
        '[{"task_id": "ID", "reward": 0.0, "note": "..."}]}]}'
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def sample_cases(cases: Sequence[Case], count: int, seed: int) -> list[Case]:
    """Up to `count` cases, failures and successes balanced (the short side is taken whole), in input order."""
    failed, passed = split(cases)
    rng = random.Random(seed)
    take_failed = min(len(failed), max(count - min(len(passed), count // 2), count // 2))
    take_passed = min(len(passed), count - take_failed)
    chosen = {c.id for c in rng.sample(failed, take_failed)} | {c.id for c in rng.sample(passed, take_passed)}
    return [c for c in cases if c.id in chosen]


def discover(backend: SamplingBackend, cases: Sequence[Case], settings: DiscoverSettings, *, log: CallLog,
             progress: Progress, report: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The merged candidate dictionary of `settings.runs` independent discovery runs, each reported when done."""
    per_run: list[list[dict[str, Any]]] = []
    for run in range(1, settings.runs + 1):
        key = f"run {run}"
        if key not in progress.done:
            shown = sample_cases(cases, settings.cases_per_run, run_seed(settings.seed, run))
            sampling = replace(settings.sampling, seed=run_seed(settings.seed, run))
            accepted = ask_json(backend, discovery_prompt(shown, settings), schema(settings.max_candidates),
                                log=log, purpose=f"discover run {run}", tries=settings.tries, sampling=sampling,
                                check=partial(_check_candidates, ids={c.id for c in shown}))
            progress.record(key, accepted.value["candidates"])
        per_run.append(progress.done[key])
        report(f"discover run {run}/{settings.runs}: {len(progress.done[key])} candidates")
    merged = merge(per_run)[: settings.max_candidates]
    return {"candidates": merged, "runs": settings.runs, "model": backend.name}


def merge(per_run: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Candidates of several runs merged by name; most-proposed first, then first seen."""
    merged: dict[str, dict[str, Any]] = {}
    for run in per_run:
        for candidate in run:
            name = candidate["name"]
            entry = merged.setdefault(name, {"name": name, "description": candidate["description"],
                                             "example_trajectories": [], "proposed_in": 0})
            entry["proposed_in"] += 1
            known = {e["task_id"] for e in entry["example_trajectories"]}
            for example in candidate.get("example_trajectories", []):
                if example["task_id"] not in known and len(entry["example_trajectories"]) < 4:
                    entry["example_trajectories"].append(example)
                    known.add(example["task_id"])
    order = {name: i for i, name in enumerate(merged)}
    return sorted(merged.values(), key=lambda e: (-e["proposed_in"], order[e["name"]]))


def run_seed(seed: int, run: int) -> int:
    """Run `run`'s seed: runs lie 1000 apart, so the repair loop's attempts (seed + k) never reach the next run."""
    return seed * 1_000_000 + run * 1000


def _check_candidates(value: dict[str, Any], ids: set[str]) -> dict[str, Any]:
    names = [c["name"] for c in value["candidates"]]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ReplyProblem(f"capability names must be distinct; repeated: {', '.join(repeated)}")
    for c in value["candidates"]:
        unknown = [e["task_id"] for e in c.get("example_trajectories", []) if e["task_id"] not in ids]
        if unknown:
            raise ReplyProblem(f"capability {c['name']}: example ids {', '.join(map(repr, unknown))} are not among the "
                               "trajectories shown; use ids exactly as written after `### trajectory`")
    return value

