"""ToolSandbox's headline numbers per condition and category, from the trajectory records an evaluation wrote.

    table = category_table({"base": records, "routed": routed_records})
    table.markdown()   # | condition | category | scenarios | mean similarity | perfect | mean turns |

Each record is a `ToolSandboxEnvironment.trajectory()`: its `evaluation` is read back into an `Evaluation` and
`milestones.summarize` gives the numbers, over all the records (`all`) and over those of each category (a scenario
counts in every category it has, as the benchmark's per-category table counts it). The pass rate of `tracec
evaluate`'s own table is the perfect rate of `all`, its mean reward the mean similarity.
Left out: the benchmark's tool-augmentation columns (no augmented scenarios are transcribed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracec.trace_rl.envs.toolsandbox.milestones import Evaluation, Summary, summarize
from tracec.trace_rl.envs.toolsandbox.scenarios import CATEGORIES

ALL = "all"


@dataclass(frozen=True, kw_only=True)
class CategoryTable:
    conditions: tuple[str, ...]
    categories: tuple[str, ...]  # `all` first, then the categories the records have, in CATEGORIES' order
    summaries: Mapping[tuple[str, str], Summary]  # (condition, category)

    def markdown(self) -> str:
        lines = ["ToolSandbox (a scenario counts in each of its categories; perfect: similarity 1):", "",
                 "| condition | category | scenarios | mean similarity | perfect | mean turns |",
                 "|---|---|---:|---:|---:|---:|"]
        for condition in self.conditions:
            for category in self.categories:
                s = self.summaries[(condition, category)]
                if s.count:
                    lines.append(f"| {condition} | {category} | {s.count} | {s.mean_similarity:.3f} | "
                                 f"{100 * s.perfect_rate:.1f}% | {s.mean_turn_count:.1f} |")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {"conditions": list(self.conditions), "categories": list(self.categories),
                "table": {c: {k: self.summaries[(c, k)].__dict__ for k in self.categories} for c in self.conditions}}


def category_table(records: Mapping[str, Sequence[Mapping[str, Any]]]) -> CategoryTable:
    """The summaries of each condition's records (condition -> its ToolSandbox trajectory records)."""
    present = {category for rows in records.values() for r in rows for category in r["categories"]}
    categories = (ALL, *(c for c in CATEGORIES if c in present))
    summaries: dict[tuple[str, str], Summary] = {}
    for condition, rows in records.items():
        evaluated = [(Evaluation.from_record(r["evaluation"]), set(r["categories"])) for r in rows]
        for category in categories:
            summaries[(condition, category)] = summarize(
                [e for e, mine in evaluated if category == ALL or category in mine])
    return CategoryTable(conditions=tuple(records), categories=categories, summaries=summaries)
