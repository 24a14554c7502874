"""The evaluation table: pass rate per domain and overall for each condition, as TRACE's tau2-bench table reports it,
with the union ceiling and the routing confusion table.

A task passes when its reward is 1 (tau2-bench's rule; a TextWorld win; a capability environment's full reward).
Per condition and domain: tasks, passed, pass rate, mean reward (TextWorld's score: 1 for a win, else the share of
the maximum score). Overall pools every task of every domain (164 tasks for airline + retail), so a domain counts
by its size, as in the paper. The oracle row is TRACE's union ceiling: a task counts as passed when base or any
adapter passed it, the best any router could do with these adapters (the baselines, which no router chooses, are
left out of it). The routing tables say where the routed
condition sent each domain's tasks, and how often the adapter it chose passed that task on its own run.

With several trials per task (`evaluate(..., trials=k)`), the table above counts each task's first trial (the paper's
preset: one trial), and pass^k sits beside it as tau2-bench defines it: a task of n trials, c of them passed, has
pass^k = C(c, k) / C(n, k) (the chance that k trials drawn from its n all pass), averaged over the tasks, for
k = 1..n (n the fewest trials any task of the cell has); pass^1 is the mean success over all trials.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb
from typing import Any

# The conditions named by a keyword rather than by an adapter: no adapter, each adapter, the router's choice,
# each baseline built, the router's nucleus mixture of adapters.
BASE, ADAPTERS, ROUTED, BASELINES, MIXTURE = "base", "adapters", "routed", "baselines", "mixture"
CONDITION_KEYWORDS = (BASE, ADAPTERS, ROUTED, BASELINES, MIXTURE)
# The baselines TRACE is compared against (the pipeline's `baselines` step): one adapter each, never a routing
# option, left out of the oracle row.
BASELINE_NAMES = ("multi_grpo", "merge_linear", "merge_ties", "sft_gold")
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
    trial: int = 0  # which of the task's trials (0: the first, the only one of the paper's preset)
    episode_seed: int | None = None  # the trial's episode seed (None: the task seed, as trial 0 always has)


@dataclass(frozen=True, kw_only=True)
class Cell:
    tasks: int
    passed: int
    reward_sum: float
    pass_k: tuple[float, ...] = ()  # pass^1..pass^n over every trial of the cell's tasks (empty for the oracle)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.tasks if self.tasks else 0.0

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.tasks if self.tasks else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "passed": self.passed, "pass_rate": self.pass_rate,
                "mean_reward": self.mean_reward, "pass_k": {str(k): v for k, v in enumerate(self.pass_k, 1)}}


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
        if any(len(cell.pass_k) > 1 for cell in self.cells.values()):
            text += "\n" + self.pass_k_markdown()
        if self.routing:
            text += "\n" + self.routing_markdown()
        return text

    def pass_k_markdown(self) -> str:
        most = max(len(cell.pass_k) for cell in self.cells.values())
        lines = ["pass^k (tau2-bench: per task C(c, k) / C(n, k), c of its n trials passed; averaged over tasks):",
                 "", "| condition | domain | " + " | ".join(f"pass^{k}" for k in range(1, most + 1)) + " |",
                 "|---|---|" + "---:|" * most]
        for condition in self.conditions:
            for domain in (*self.domains, "overall"):
                values = self.cells[(condition, domain)].pass_k
                if values:
                    shown = [f"{values[k]:.3f}" if k < len(values) else "-" for k in range(most)]
                    lines.append(f"| {condition} | {domain} | " + " | ".join(shown) + " |")
        return "\n".join(lines) + "\n"

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


def pass_hat(trials: int, passed: int, k: int) -> float:
    """tau2-bench's pass^k of one task: C(passed, k) / C(trials, k), for 1 <= k <= trials."""
    if not 1 <= k <= trials or not 0 <= passed <= trials:
        raise ValueError(f"pass^{k} of {passed} passed in {trials} trials: need 1 <= k <= trials, 0 <= passed")
    return comb(passed, k) / comb(trials, k)


def pass_k(tasks: Sequence[tuple[int, int]]) -> tuple[float, ...]:
    """pass^1..pass^n averaged over `tasks` (each: its trials, how many passed), n the fewest trials of any."""
    if not tasks:
        return ()
    return tuple(sum(pass_hat(n, c, k) for n, c in tasks) / len(tasks) for k in range(1, min(n for n, _ in tasks) + 1))


def summarize(results: Sequence[TaskResult], conditions: Sequence[str], domains: Sequence[str], *,
              outside_oracle: Sequence[str] = BASELINE_NAMES) -> EvalTable:
    """The table of `results`; the oracle pools every condition but the routed one and `outside_oracle`."""
    every = list(results)
    results = [r for r in every if r.trial == 0]  # the table proper, the oracle and routing: each task's first trial
    by_key = {(r.condition, r.domain, r.seed): r for r in results}
    cells: dict[tuple[str, str], Cell] = {}
    for condition in conditions:
        _fill(cells, condition, [r for r in results if r.condition == condition], domains,
              [r for r in every if r.condition == condition])
    rows = list(conditions)
    singles = [c for c in conditions if c not in (ROUTED, MIXTURE) and c not in outside_oracle]
    if len(singles) >= 2:
        tasks = sorted({(r.domain, r.seed) for r in results if r.condition in singles})
        best = [max((by_key[(c, d, s)] for c in singles if (c, d, s) in by_key), key=lambda r: (r.success, r.reward))
                for d, s in tasks]
        _fill(cells, ORACLE, best, domains, [])
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
          domains: Sequence[str], trials: Sequence[TaskResult]) -> None:
    for domain in domains:
        mine = [r for r in results if r.domain == domain]
        cells[(condition, domain)] = Cell(tasks=len(mine), passed=sum(r.success for r in mine),
                                          reward_sum=sum(r.reward for r in mine),
                                          pass_k=pass_k(_counts([r for r in trials if r.domain == domain])))
    cells[(condition, "overall")] = Cell(tasks=len(results), passed=sum(r.success for r in results),
                                         reward_sum=sum(r.reward for r in results), pass_k=pass_k(_counts(trials)))


def _counts(trials: Sequence[TaskResult]) -> list[tuple[int, int]]:
    """Per task (domain, seed): its trials and how many passed."""
    counts: dict[tuple[str, int], tuple[int, int]] = {}
    for r in trials:
        n, c = counts.get((r.domain, r.seed), (0, 0))
        counts[(r.domain, r.seed)] = (n + 1, c + int(r.success))
    return list(counts.values())


def _rate(cell: Cell) -> str:
    return f"{100 * cell.pass_rate:.1f}% ({cell.passed}/{cell.tasks})"


def _choice_order(conditions: Sequence[str]) -> Any:
    order = {c: i for i, c in enumerate(conditions)}
    return lambda choice: (order.get(choice, len(order)), choice)
