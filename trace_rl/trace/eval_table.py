"""The evaluation table: pass rate per domain and overall for each condition, as TRACE's tau2-bench table reports it,
with the union ceiling and the routing confusion table.

A task passes when its reward is 1 (tau2-bench's rule; a TextWorld win; a capability environment's full reward).
Per condition and domain: tasks, passed, pass rate, mean reward (TextWorld's score: 1 for a win, else the share of
the maximum score). Overall pools every task of every domain (164 tasks for airline + retail), so a domain counts
by its size, as in the paper. The oracle row is TRACE's union ceiling: a task counts as passed when base or any
adapter passed it, the best any router could do with these adapters. The routing tables say where the routed
condition sent each domain's tasks, and how often the adapter it chose passed that task on its own run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# The conditions named by a keyword rather than by an adapter: no adapter, each adapter, the router's choice.
BASE, ADAPTERS, ROUTED = "base", "adapters", "routed"
CONDITION_KEYWORDS = (BASE, ADAPTERS, ROUTED)
ORACLE = "oracle"  # the union ceiling's row


@dataclass(frozen=True, kw_only=True)
class TaskResult:
    condition: str
    domain: str
    seed: int
    task: str
    reward: float
    success: bool
    turns: int
    seconds: float
    route: dict[str, Any] | None = None  # the routed condition's decision: choice, label, logits, weights


@dataclass(frozen=True, kw_only=True)
class Cell:
    tasks: int
    passed: int
    reward_sum: float

    @property
    def pass_rate(self) -> float:
        return self.passed / self.tasks if self.tasks else 0.0

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.tasks if self.tasks else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "passed": self.passed, "pass_rate": self.pass_rate,
                "mean_reward": self.mean_reward}


@dataclass(frozen=True, kw_only=True)
class EvalTable:
    conditions: tuple[str, ...]  # rows, the oracle last when there is one
    domains: tuple[str, ...]
    cells: dict[tuple[str, str], Cell]  # (condition, domain or "overall")
    routing: dict[str, dict[str, int]]  # domain -> choice -> tasks
    routing_hits: dict[str, tuple[int, int]]  # domain -> (routed tasks whose chosen condition passed them, checked)

    def cell(self, condition: str, domain: str = "overall") -> Cell:
        return self.cells[(condition, domain)]

    def to_json(self) -> dict[str, Any]:
        return {"conditions": list(self.conditions), "domains": list(self.domains),
                "table": {c: {d: self.cells[(c, d)].to_json() for d in (*self.domains, "overall")}
                          for c in self.conditions},
                "routing": self.routing,
                "routing_hits": {d: {"hit": h, "checked": n} for d, (h, n) in self.routing_hits.items()}}

    def markdown(self) -> str:
        heads = [f"{d} pass" for d in self.domains] + ["overall pass", "overall reward"]
        lines = ["| condition | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(heads)]
        for condition in self.conditions:
            cells = [_rate(self.cells[(condition, d)]) for d in self.domains]
            overall = self.cells[(condition, "overall")]
            lines.append(f"| {condition} | " + " | ".join([*cells, _rate(overall), f"{overall.mean_reward:.3f}"])
                         + " |")
        text = "\n".join(lines) + "\n"
        if ORACLE in self.conditions:
            text += "\nPass: reward 1. Overall pools every task. Oracle: passed by base or any adapter (the union " \
                    "ceiling of routing).\n"
        if self.routing:
            text += "\n" + self.routing_markdown()
        return text

    def routing_markdown(self) -> str:
        choices = sorted({c for row in self.routing.values() for c in row}, key=_choice_order(self.conditions))
        lines = ["Routing (tasks of each domain sent to each adapter):", "",
                 "| domain | " + " | ".join(choices) + " | chosen adapter passed |",
                 "|---|" + "---:|" * (len(choices) + 1)]
        for domain in self.domains:
            row = self.routing.get(domain, {})
            hit, checked = self.routing_hits.get(domain, (0, 0))
            shown = f"{hit}/{checked}" if checked else "-"
            lines.append(f"| {domain} | " + " | ".join(str(row.get(c, 0)) for c in choices) + f" | {shown} |")
        return "\n".join(lines) + "\n"


def summarize(results: Sequence[TaskResult], conditions: Sequence[str], domains: Sequence[str]) -> EvalTable:
    by_key = {(r.condition, r.domain, r.seed): r for r in results}
    cells: dict[tuple[str, str], Cell] = {}
    for condition in conditions:
        _fill(cells, condition, [r for r in results if r.condition == condition], domains)
    rows = list(conditions)
    singles = [c for c in conditions if c != ROUTED]
    if len(singles) >= 2:
        tasks = sorted({(r.domain, r.seed) for r in results if r.condition in singles})
        best = [max((by_key[(c, d, s)] for c in singles if (c, d, s) in by_key), key=lambda r: (r.success, r.reward))
                for d, s in tasks]
        _fill(cells, ORACLE, best, domains)
        rows.append(ORACLE)
    routing: dict[str, dict[str, int]] = {}
    hits: dict[str, tuple[int, int]] = {}
    for r in results:
        if r.condition != ROUTED or r.route is None:
            continue
        choice = str(r.route["choice"])
        routing.setdefault(r.domain, {}).setdefault(choice, 0)
        routing[r.domain][choice] += 1
        own = by_key.get((choice, r.domain, r.seed))
        if own is not None:
            hit, checked = hits.get(r.domain, (0, 0))
            hits[r.domain] = (hit + int(own.success), checked + 1)
    return EvalTable(conditions=tuple(rows), domains=tuple(domains), cells=cells, routing=routing,
                     routing_hits=hits)


def _fill(cells: dict[tuple[str, str], Cell], condition: str, results: Sequence[TaskResult],
          domains: Sequence[str]) -> None:
    for domain in domains:
        mine = [r for r in results if r.domain == domain]
        cells[(condition, domain)] = Cell(tasks=len(mine), passed=sum(r.success for r in mine),
                                          reward_sum=sum(r.reward for r in mine))
    cells[(condition, "overall")] = Cell(tasks=len(results), passed=sum(r.success for r in results),
                                         reward_sum=sum(r.reward for r in results))


def _rate(cell: Cell) -> str:
    return f"{100 * cell.pass_rate:.1f}% ({cell.passed}/{cell.tasks})"


def _choice_order(conditions: Sequence[str]) -> Any:
    order = {c: i for i, c in enumerate(conditions)}
    return lambda choice: (order.get(choice, len(order)), choice)
