"""Scoring as ToolSandbox scores: the best alignment of a scenario's milestones (and minefields) to the episode's
snapshots, its mean similarity, and the perfect rate over many episodes.

Every message is a snapshot (the message itself for `sandbox` constraints, the world as it was for the others),
from the user's first message to the last. An alignment maps each milestone to one snapshot so that a milestone
never maps before one that precedes it in the DAG (several may share a snapshot). A milestone's similarity at a
snapshot is the geometric mean of its constraints' similarities, each read against the snapshot of the milestone
it references (-1: the user's first message), times its guardrails: every database that neither the milestone
nor its references and predecessors constrain must be unchanged since those references' and predecessors'
snapshots (a guardrail is 0 or 1 and not counted in the mean). The milestone similarity is the best alignment's
mean; the minefield similarity likewise (0 without minefields). `similarity` is the milestone similarity when
no minefield is met, else 0; a scenario without milestones scores 1 unless a minefield is met. `perfect`:
similarity 1.

The benchmark searches the alignments depth first with pruning; here a dynamic program over the DAG's topological
order keeps, for each assignment of the milestones still referenced later, the best partial sum: the same
optimum, without the search's worst case. As in the benchmark, a milestone referencing -1 also leaves unguarded
the databases its last sibling milestone constrains (the benchmark indexes `milestones[-1]`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracec.trace_rl.envs.toolsandbox.sandbox import Message, Sandbox
from tracec.trace_rl.envs.toolsandbox.scenarios import Constraint, Milestone, Scenario, topological_order
from tracec.trace_rl.envs.toolsandbox.similarity import (
    addition_similarity,
    guardrail_similarity,
    removal_similarity,
    snapshot_similarity,
    tool_trace_dependant_similarity,
    update_similarity,
)
from tracec.trace_rl.envs.toolsandbox.world import DATABASES

PERFECT = 1.0 - 1e-9  # a product of ones is exactly 1; the slack only absorbs float noise in the means


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    similarity: float
    milestone_similarity: float
    minefield_similarity: float
    milestone_mapping: tuple[tuple[int, int, float], ...]  # (milestone, snapshot index, similarity)
    minefield_mapping: tuple[tuple[int, int, float], ...]
    turn_count: int

    @property
    def perfect(self) -> bool:
        return self.similarity >= PERFECT

    def record(self) -> dict[str, Any]:
        """The evaluation as JSON values (a trajectory record's `evaluation`); `from_record` reads it back."""
        return {"similarity": self.similarity, "milestone_similarity": self.milestone_similarity,
                "minefield_similarity": self.minefield_similarity,
                "milestone_mapping": [list(m) for m in self.milestone_mapping],
                "minefield_mapping": [list(m) for m in self.minefield_mapping], "turn_count": self.turn_count}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Evaluation:
        return cls(similarity=float(record["similarity"]),
                   milestone_similarity=float(record["milestone_similarity"]),
                   minefield_similarity=float(record["minefield_similarity"]),
                   milestone_mapping=tuple((int(m), int(s), float(v)) for m, s, v in record["milestone_mapping"]),
                   minefield_mapping=tuple((int(m), int(s), float(v)) for m, s, v in record["minefield_mapping"]),
                   turn_count=int(record["turn_count"]))


@dataclass(frozen=True, kw_only=True)
class Summary:
    count: int
    mean_similarity: float
    perfect_rate: float
    mean_turn_count: float


def evaluate(scenario: Scenario, sandbox: Sandbox) -> Evaluation:
    snapshots = _Snapshots(sandbox.messages, sandbox.first_user_index)
    milestone_sum, milestone_map = _best_alignment(scenario.milestones, scenario.milestone_edges, snapshots)
    minefield_sum, minefield_map = _best_alignment(scenario.minefields, scenario.minefield_edges, snapshots)
    milestone_similarity = milestone_sum / len(scenario.milestones) if scenario.milestones else 1.0
    minefield_similarity = minefield_sum / len(scenario.minefields) if scenario.minefields else 0.0
    return Evaluation(similarity=milestone_similarity if minefield_similarity == 0 else 0.0,
                      milestone_similarity=milestone_similarity, minefield_similarity=minefield_similarity,
                      milestone_mapping=milestone_map, minefield_mapping=minefield_map,
                      turn_count=sandbox.turn_count())


def summarize(evaluations: Sequence[Evaluation]) -> Summary:
    """The benchmark's headline numbers: mean similarity and the share of perfect episodes."""
    count = len(evaluations)
    if count == 0:
        return Summary(count=0, mean_similarity=0.0, perfect_rate=0.0, mean_turn_count=0.0)
    return Summary(count=count, mean_similarity=sum(e.similarity for e in evaluations) / count,
                   perfect_rate=sum(e.perfect for e in evaluations) / count,
                   mean_turn_count=sum(e.turn_count for e in evaluations) / count)


class _Snapshots:
    def __init__(self, messages: Sequence[Message], first_user_index: int) -> None:
        self.messages, self.first = messages, first_user_index
        self.last = len(messages) - 1

    def rows(self, database: str, index: int) -> list[dict[str, Any]] | tuple[Any, ...]:
        if database == "sandbox":
            return [self.messages[index].row()]
        return self.messages[index].world.table(database)


@dataclass(frozen=True)
class _Check:
    """A constraint of a milestone, or a guardrail (`constraint` None) on `database` against `reference`."""

    database: str
    reference: int | None
    constraint: Constraint | None


def _checks(nodes: Sequence[Milestone], edges: Sequence[tuple[int, int]]) -> list[list[_Check]]:
    checks = []
    for i, node in enumerate(nodes):
        references = {c.reference for c in node.constraints if c.reference is not None}
        predecessors = {a for a, b in edges if b == i}
        guarded = set(node.guardrail_only if node.guardrail_only is not None else ("sandbox", *DATABASES))
        guarded -= {"sandbox", *node.guardrail_exclude}
        for j in {i} | references | predecessors:  # j == -1 reads the last node, as the benchmark's list does
            guarded -= {c.database for c in nodes[j].constraints}
        own = [_Check(c.database, c.reference, c) for c in node.constraints]
        checks.append(own + [_Check(database, reference, None)
                             for reference in sorted(references | predecessors) for database in sorted(guarded)])
    return checks


def _best_alignment(nodes: Sequence[Milestone], edges: Sequence[tuple[int, int]],
                    snapshots: _Snapshots) -> tuple[float, tuple[tuple[int, int, float], ...]]:
    """The best sum of node similarities over alignments that respect the edges, and that alignment."""
    if not nodes:
        return 0.0, ()
    checks = _checks(nodes, edges)
    order = topological_order(len(nodes), tuple(edges))
    depends = [{c.reference for c in node_checks if c.reference is not None and c.reference >= 0}
               | {a for a, b in edges if b == i} for i, node_checks in enumerate(checks)]
    cache: dict[tuple[int, int, int, int | None], float] = {}
    # state: (node, snapshot) pairs of the placed nodes a later node still reads -> (best sum, its alignment)
    states: dict[tuple[tuple[int, int], ...], tuple[float, tuple[tuple[int, int, float], ...]]] = {(): (0.0, ())}
    for k, node in enumerate(order):
        later = set().union(*(depends[n] for n in order[k + 1:])) if k + 1 < len(order) else set()
        following: dict[tuple[tuple[int, int], ...], tuple[float, tuple[tuple[int, int, float], ...]]] = {}
        for key, (total, alignment) in states.items():
            placed = dict(key)
            earliest = max([snapshots.first, *(placed[a] for a, b in edges if b == node)])
            for index in range(earliest, snapshots.last + 1):
                similarity = _similarity(node, checks[node], index, placed, snapshots, cache)
                after = {**placed, node: index}
                next_key = tuple(sorted((n, s) for n, s in after.items() if n in later))
                candidate = (total + similarity, (*alignment, (node, index, similarity)))
                if next_key not in following or candidate[0] > following[next_key][0]:
                    following[next_key] = candidate
        states = following
    total, alignment = max(states.values(), key=lambda state: state[0])
    return total, tuple(sorted(alignment))


def _similarity(node: int, checks: Sequence[_Check], index: int, placed: dict[int, int], snapshots: _Snapshots,
                cache: dict[tuple[int, int, int, int | None], float]) -> float:
    product, counted = 1.0, 0
    for position, check in enumerate(checks):
        reference = None if check.reference is None else (
            snapshots.first if check.reference == -1 else placed[check.reference])
        key = (node, position, index, reference)
        if key not in cache:
            cache[key] = _check_similarity(check, index, reference, snapshots)
        product *= cache[key]
        counted += check.constraint is not None
    return math.pow(product, 1 / counted)


def _check_similarity(check: _Check, index: int, reference: int | None, snapshots: _Snapshots) -> float:
    rows = snapshots.rows(check.database, index)
    before = snapshots.rows(check.database, reference) if reference is not None else []
    constraint = check.constraint
    if constraint is None:
        return guardrail_similarity(rows, before)
    if constraint.measure == "snapshot":
        return snapshot_similarity(rows, constraint.target, constraint.measures)
    if constraint.measure == "addition":
        return addition_similarity(rows, constraint.target, constraint.measures, before)
    if constraint.measure == "removal":
        return removal_similarity(rows, constraint.target, constraint.measures, before)
    if constraint.measure == "update":
        return update_similarity(rows, constraint.target, constraint.measures, before)
    assert constraint.fill_to is not None and constraint.extractor is not None, "checked at load"
    return tool_trace_dependant_similarity(rows, constraint.target, constraint.measures, before,
                                           fill_to=constraint.fill_to, extractor=constraint.extractor)
