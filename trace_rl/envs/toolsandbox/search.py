"""The benchmark's database search: every given criterion filters the rows in turn, and a search with none given
is refused.

A criterion is exact (`==`), fuzzy (WRatio at or above a threshold; the rows come back best match first, at most
5, as the benchmark's `process.extract` returns them) or a bound (`>=` a lower bound, `<=` an upper one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tracec.trace_rl.envs.toolsandbox.fuzzy import extract
from tracec.trace_rl.envs.toolsandbox.toolkit import NOT_GIVEN, ToolError
from tracec.trace_rl.envs.toolsandbox.world import Row


@dataclass(frozen=True)
class Criterion:
    column: str
    value: Any
    how: Literal["exact", "fuzzy", "at_least", "at_most"] = "exact"
    threshold: float = 90.0


def search(rows: Sequence[Row], criteria: Sequence[Criterion]) -> list[dict[str, Any]]:
    if all(criterion.value is NOT_GIVEN for criterion in criteria):
        names = ", ".join(repr(criterion.column) for criterion in criteria)
        raise ToolError("ValueError", "No search criteria are given. At least one search criteria should be "
                                      f"provided among ({names})")
    kept = list(rows)
    for criterion in criteria:
        if criterion.value is NOT_GIVEN:
            continue
        if criterion.how == "fuzzy":
            kept = [kept[i] for i in extract(str(criterion.value), [row[criterion.column] for row in kept],
                                             criterion.threshold)]
        else:
            kept = [row for row in kept if _keeps(row[criterion.column], criterion)]
    return [dict(row) for row in kept]


def _keeps(cell: Any, criterion: Criterion) -> bool:
    if criterion.how == "exact":
        return bool(cell == criterion.value) and cell is not None
    if cell is None:
        return False
    return bool(cell >= criterion.value) if criterion.how == "at_least" else bool(cell <= criterion.value)


def the_row(rows: Sequence[Row], column: str, value: Any) -> Row:
    """The one row whose `column` is `value`, as the benchmark's updates find it: a NoDataError when there is none,
    a DuplicateError when there are more."""
    matches = [row for row in rows if row[column] == value]
    if not matches:
        raise ToolError("NoDataError", f"No db entry matching {column}={value!r} found")
    if len(matches) > 1:
        raise ToolError("DuplicateError", f"More than 1 entry with {column}={value!r} found")
    return matches[0]


def without(rows: Sequence[Row], column: str, value: Any) -> tuple[Row, ...]:
    """`rows` less those whose `column` is `value`; a NoDataError when there is none, as the benchmark's removals."""
    rest = tuple(row for row in rows if row[column] != value)
    if len(rest) == len(rows):
        raise ToolError("NoDataError", f"No db entry matching {column}={value!r} found")
    return rest
