"""The benchmark's similarity measures: of one cell to a target value, and of a database snapshot to target rows.

Column measures (0..1): `exact` (None matches only None), `contains` (the target text occurs in the cell),
`rouge_l` (ROUGE-L F), `one` (always 1), `close` (numbers within the column's tolerance) and `tool_trace` (some
trace of the message calls the target tool with the target arguments, each within its tolerance; arguments the
target leaves out are free; the target may list alternatives).

Snapshot measures: `snapshot` pairs the snapshot's rows one to one with the target rows, a row's similarity the
geometric mean of its columns', the snapshot's the geometric mean of the rows' under the best pairing (0 when
the row counts differ or no pairing avoids a zero). `addition`, `removal` and `update` first check the snapshot
against a reference snapshot (every reference row kept; or removed rows only; or the same row count) and then
measure only the rows that differ. `guardrail` is 1 when a database equals the reference, rows in order.
`tool_trace_dependant` fills the target with values extracted from the reference message's tool trace (a
timestamp the agent read, say) and keeps the best fill.
Left out: polars' null propagation (a null cell compared with a value scores 0 here, not null).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tracec.trace_rl.envs.toolsandbox.rouge import rouge_l

MeasureKind = Literal["exact", "contains", "rouge_l", "one", "close", "tool_trace"]
MEASURE_KINDS = ("exact", "contains", "rouge_l", "one", "close", "tool_trace")
SANDBOX_COLUMNS = ("sandbox_message_index", "sender", "recipient", "content", "openai_tool_call_id",
                   "openai_function_name", "conversation_active", "tool_call_exception", "tool_trace", "visible_to")
MAX_TARGET_ROWS = 12  # rows are paired by exhaustive search over subsets
_MISSING = object()  # an argument the call's trace does not have


@dataclass(frozen=True, kw_only=True)
class ColumnMeasure:
    kind: MeasureKind
    atol: Mapping[str, float] = field(default_factory=dict)  # `close` and `tool_trace`: tolerance by name

    def __call__(self, column: str, cell: Any, target: Any) -> float:
        if self.kind == "exact":
            return float(cell is None) if target is None else float(cell is not None and cell == target)
        if self.kind == "contains":
            return float(isinstance(cell, str) and str(target) in cell)
        if self.kind == "rouge_l":
            return rouge_l(str(target), cell) if isinstance(cell, str) else 0.0
        if self.kind == "one":
            return 1.0
        if self.kind == "close":
            return float(is_close(target, cell, self.atol.get(column)))
        return float(self._trace_matches(cell, target))

    def _trace_matches(self, cell: Any, target: Any) -> bool:
        if not cell:
            return False
        wanted = json.loads(target) if isinstance(target, str) else target
        for golden in wanted if isinstance(wanted, list) else [wanted]:
            for trace in cell:
                if trace["tool_name"] == golden["tool_name"] and all(
                        is_close(trace["arguments"].get(name, _MISSING), value, self.atol.get(name))
                        for name, value in golden["arguments"].items()):
                    return True
        return False


def is_close(value: Any, reference: Any, atol: float | None) -> bool:
    if atol is not None and isinstance(value, (int, float)) and isinstance(reference, (int, float)):
        return abs(value - reference) <= atol
    return bool(value == reference)


EXACT, ROUGE, ONE = ColumnMeasure(kind="exact"), ColumnMeasure(kind="rouge_l"), ColumnMeasure(kind="one")
DEFAULT_MEASURES: Mapping[str, Mapping[str, ColumnMeasure]] = {
    "sandbox": {"sandbox_message_index": EXACT, "sender": EXACT, "recipient": EXACT, "content": ROUGE,
                "openai_tool_call_id": ONE, "openai_function_name": ONE, "conversation_active": EXACT,
                "tool_call_exception": ONE, "tool_trace": ColumnMeasure(kind="tool_trace"), "visible_to": EXACT},
    "setting": {name: EXACT for name in ("device_id", "cellular", "wifi", "location_service", "low_battery_mode",
                                         "latitude", "longitude")},
    "contact": {"person_id": EXACT, "name": EXACT, "phone_number": EXACT, "relationship": ROUGE, "is_self": EXACT},
    "messaging": {"message_id": EXACT, "sender_person_id": EXACT, "sender_phone_number": EXACT,
                  "recipient_person_id": EXACT, "recipient_phone_number": EXACT, "content": ROUGE,
                  "creation_timestamp": EXACT},
    "reminder": {"reminder_id": EXACT, "content": ROUGE, "creation_timestamp": EXACT, "reminder_timestamp": EXACT,
                 "latitude": EXACT, "longitude": EXACT},
}

Rows = Sequence[Mapping[str, Any]]
Measures = Mapping[str, ColumnMeasure]


def snapshot_similarity(snapshot: Rows, target: Rows, measures: Measures) -> float:
    if len(snapshot) != len(target):
        return 0.0
    if not target:
        return 1.0
    if any(column not in row for row in snapshot for column in target[0]):
        return 0.0
    # cost[t][s]: minus the log of target row t's similarity to snapshot row s (inf for a zero)
    cost = [[_row_cost(row, wanted, measures) for row in snapshot] for wanted in target]
    total = _cheapest_pairing(cost)
    return 0.0 if math.isinf(total) else math.exp(-total / len(target))


def addition_similarity(snapshot: Rows, target: Rows, measures: Measures, reference: Rows) -> float:
    """The snapshot is the reference plus the target rows."""
    if sum(row == kept for row in snapshot for kept in reference) != len(reference):
        return 0.0
    return snapshot_similarity([row for row in snapshot if row not in reference], target, measures)


def removal_similarity(snapshot: Rows, target: Rows, measures: Measures, reference: Rows) -> float:
    """The snapshot is the reference less the target rows."""
    return addition_similarity(reference, target, measures, snapshot)


def update_similarity(snapshot: Rows, target: Rows, measures: Measures, reference: Rows) -> float:
    """The snapshot is the reference with the target rows changed."""
    if len(snapshot) != len(reference):
        return 0.0
    return snapshot_similarity([row for row in snapshot if row not in reference], target, measures)


def guardrail_similarity(snapshot: Rows, reference: Rows) -> float:
    return float(list(snapshot) == list(reference))


def tool_trace_dependant_similarity(message: Rows, target: Rows, measures: Measures, reference: Rows, *,
                                    fill_to: str, extractor: str) -> float:
    """The target message, with values read from the reference message's traces filled in, best fill."""
    traces = reference[0].get("tool_trace") if reference else None
    if not traces:
        return 0.0
    extracted: list[dict[str, Any]] = []
    for trace in traces:
        try:
            extracted.extend(EXTRACTORS[extractor](trace))
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    best = 0.0
    try:
        for values in extracted:
            filled = dict(target[0])
            if fill_to == "tool_trace":
                wanted = filled["tool_trace"]
                candidates = wanted if isinstance(wanted, list) else [wanted]
                filled["tool_trace"] = [variant for candidate in candidates for variant in (
                    {**candidate, "arguments": {**candidate["arguments"], **values}},
                    {**candidate, "arguments": {**values, **candidate["arguments"]}})]
            else:
                filled["content"] = str(filled["content"]).format(**values)
            best = max(best, snapshot_similarity(message, [filled], measures))
    except (IndexError, KeyError, ValueError):
        return 0.0
    return best


def _row_cost(row: Mapping[str, Any], wanted: Mapping[str, Any], measures: Measures) -> float:
    costs = []
    for column, value in wanted.items():
        similarity = measures[column](column, row[column], value)
        if similarity <= 0.0:
            return math.inf
        costs.append(-math.log(similarity))
    return sum(costs) / len(costs) if costs else 0.0


def _cheapest_pairing(cost: list[list[float]]) -> float:
    """The least total cost of pairing every target row with its own snapshot row (inf when none is finite)."""
    n = len(cost)
    if n > MAX_TARGET_ROWS:
        raise ValueError(f"a target of {n} rows is over the {MAX_TARGET_ROWS} the pairing search takes")
    best = {0: 0.0}  # used snapshot rows (bit mask) -> least cost of pairing the first popcount target rows
    for t in range(n):
        following: dict[int, float] = {}
        for used, total in best.items():
            for s in range(n):
                if not used & (1 << s) and not math.isinf(cost[t][s]):
                    key = used | (1 << s)
                    following[key] = min(following.get(key, math.inf), total + cost[t][s])
        best = following
    return min(best.values(), default=math.inf)


Extractor = Callable[[Mapping[str, Any]], list[dict[str, Any]]]
# The benchmark's extractors that the transcribed scenarios use (the others read web tools' answers).
EXTRACTORS: Mapping[str, Extractor] = {
    "result_to_timestamp0": lambda trace: [{"timestamp_0": float(trace["result"])}],
    "result_to_timestamp1": lambda trace: [{"timestamp_1": float(trace["result"])}],
    "result_to_reminder_timestamp_lowerbound": lambda trace: [
        {"reminder_timestamp_lowerbound": float(trace["result"])}],
    "days": lambda trace: [{"days": int(trace["result"]["days"])}],
}
