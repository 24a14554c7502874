"""ToolSandbox's scenarios as data: `scenarios.json` beside this module, read into frozen dataclasses.

A scenario extends a base state (`base`, or a variant with switches flipped) with the user's task and first
message, the tools the agent may call (allowed less denied), milestones (snapshot constraints the trajectory
should meet, in the order of their DAG; the edges default to a chain) and minefields (constraints it must never
meet). `gold` is a sequence of tool calls and messages to the user that reaches every milestone, and
`user_replies` the user's fixed answers to the gold agent's messages, one per message but the last.

Values the benchmark computes at load time are written as placeholders and resolved against the clock:
`{"$now": "year"}`, `{"$datetime": [2024, 3, 22, 17]}` (a wall-clock time), `{"$datetime": {"day": "tomorrow",
"hour": 17}}` (see `Clock.day_at`), `"inf"` for an infinite tolerance and `{current_year}` in the task text.
A gold call's argument `{"$result": i}` (or `[i, key]`) is the result of the gold's i-th call, read at replay;
a gold message is formatted with the results as `r0, r1, ...` (`"It is {r2[days]} days"`).
A malformed file is a `ScenarioError` naming the file, the scenario and the field.

`select_scenarios(scenarios, chosen)` reads a selection as configs and the command line give it: each entry a
scenario's name or a category, standing for the scenarios named or in the category, in file order (none: all).
`shipped_scenarios()` is this file's set, read once (package data, against the default clock).
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.toolsandbox.catalog import all_tools
from tracec.trace_rl.envs.toolsandbox.clock import Clock
from tracec.trace_rl.envs.toolsandbox.similarity import (
    DEFAULT_MEASURES,
    EXTRACTORS,
    MAX_TARGET_ROWS,
    MEASURE_KINDS,
    ColumnMeasure,
)
from tracec.trace_rl.envs.toolsandbox.world import DATABASES, base_world

SCENARIOS_FILE = Path(__file__).with_name("scenarios.json")
BASE_SCENARIO_COUNT = 129  # the benchmark's base scenarios, before its tool augmentations
AGENT_PROMPT = ("Don't make assumptions about what values to plug into functions. Ask for clarification if a user "
                "request is ambiguous.")
USER_INSTRUCTION = """\
You are no longer an assistant. From now on role play as a user (User A) talking to another user (User B).
Make sure you follow these instructions:

0. DO NOT act as if you (User A) are an assistant. ALWAYS treat yourself as a user (User A).
    Do not ask questions to the other user (User B).
1. Answer any question User B asks you (User A) accurately. Use only the information provided.
    Do not make up false information.
2.  Use natural, short, casual language.
3.  If User B says it could not complete the task, either provide more information
    you (User A) posses, or ask it to use the tools it figure it out itself if you (User A)
    do not posses information that could help.
4.  Allow User B to turn off low battery mode, turn on cellular service, wifi or location service
    in order to complete the task.
5.  When User B completed the task, even if you (User A) don't have enough information to validate the
    correctness, break out of role playing and use the provided tool named `end_conversation` to stop
    the conversation.
6.  When User B cannot complete the request after 5 tries, break out of role playing and
     use the provided tool named `end_conversation` to stop the conversation.

Answer User B's questions given the following task you (User A) want User B to complete: """
CATEGORIES = ("single_tool_call", "multiple_tool_call", "single_user_turn", "multiple_user_turn",
              "state_dependency", "canonicalization", "insufficient_information")
MEASURES = ("snapshot", "addition", "removal", "update", "tool_trace_dependant")
_ALL_DATABASES = ("sandbox", *DATABASES)


class ScenarioError(ValueError):
    """A scenarios file that cannot be read, with its path, the scenario and the field at fault."""


@dataclass(frozen=True, kw_only=True)
class Constraint:
    database: str  # sandbox (one message) or a world database
    measure: str  # MEASURES
    target: tuple[Mapping[str, Any], ...]
    measures: Mapping[str, ColumnMeasure]  # by column: the database's defaults with the scenario's overrides
    reference: int | None = None  # the milestone whose snapshot is the reference; -1: the first user message
    fill_to: str | None = None  # tool_trace_dependant: `tool_trace` or `content`
    extractor: str | None = None  # tool_trace_dependant: a name in similarity.EXTRACTORS


@dataclass(frozen=True, kw_only=True)
class Milestone:
    constraints: tuple[Constraint, ...]
    guardrail_only: tuple[str, ...] | None = None  # the databases guarded (None: all)
    guardrail_exclude: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class GoldStep:
    call: str | None = None
    arguments: Mapping[str, Any] | None = None
    say: str | None = None


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    base: str
    categories: tuple[str, ...]
    user_task: str
    first_message: str
    tools: tuple[str, ...]
    denied_tools: tuple[str, ...]
    milestones: tuple[Milestone, ...]
    milestone_edges: tuple[tuple[int, int], ...]
    minefields: tuple[Milestone, ...]
    minefield_edges: tuple[tuple[int, int], ...]
    gold: tuple[GoldStep, ...]
    user_replies: tuple[str, ...]

    @property
    def user_instruction(self) -> str:
        """What the simulated user is told: the benchmark's role-play instruction and the task."""
        return USER_INSTRUCTION + self.user_task


@dataclass(frozen=True, kw_only=True)
class ScenarioSet:
    scenarios: Mapping[str, Scenario]  # in file order
    left_out: Mapping[str, str]  # base scenario -> the web tool its score depends on

    def get(self, name: str) -> Scenario:
        try:
            return self.scenarios[name]
        except KeyError:
            if name in self.left_out:
                raise KeyError(f"ToolSandbox scenario {name!r} is left out: its score needs the web tool "
                               f"{self.left_out[name]}, out of reach offline") from None
            raise KeyError(f"unknown ToolSandbox scenario {name!r} ({len(self.scenarios)} transcribed; "
                           f"e.g. {', '.join(list(self.scenarios)[:3])})") from None


def load_scenarios(path: Path | str | None = None, *, clock: Clock | None = None) -> ScenarioSet:
    source = SCENARIOS_FILE if path is None else Path(path)
    try:
        raw = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ScenarioError(f"{source}: cannot read scenarios: {err}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("scenarios"), list):
        raise ScenarioError(f"{source}: expected an object with a `scenarios` list")
    reader = _Reader(source, clock or Clock())
    scenarios: dict[str, Scenario] = {}
    for position, entry in enumerate(raw["scenarios"]):
        scenario = reader.scenario(entry, position)
        if scenario.name in scenarios:
            raise ScenarioError(f"{source}: scenario {scenario.name!r} appears twice")
        scenarios[scenario.name] = scenario
    left_out = raw.get("left_out", {})
    if not isinstance(left_out, dict) or not all(isinstance(v, str) for v in left_out.values()):
        raise ScenarioError(f"{source}: `left_out` must map scenario names to the web tool they need")
    return ScenarioSet(scenarios=scenarios, left_out=dict(left_out))


@functools.cache
def shipped_scenarios() -> ScenarioSet:
    """The scenarios of `scenarios.json` beside this module, read once: package data, never changed."""
    return load_scenarios()


def select_scenarios(scenarios: ScenarioSet, chosen: Sequence[str]) -> tuple[str, ...]:
    """The names of the scenarios `chosen` stands for (each entry a scenario's name or a category), in file order;
    every scenario when `chosen` is empty. A ValueError names an entry that is neither, with the nearest match."""
    unknown = [entry for entry in chosen if entry not in scenarios.scenarios and entry not in CATEGORIES]
    if unknown:
        near = difflib.get_close_matches(unknown[0], [*scenarios.scenarios, *CATEGORIES], n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        left_out = (f" ({unknown[0]!r} is left out: its score needs the web tool {scenarios.left_out[unknown[0]]})"
                    if unknown[0] in scenarios.left_out else "")
        raise ValueError(f"no ToolSandbox scenario or category {unknown[0]!r}{left_out}; {hint}name scenarios "
                         f"(e.g. {', '.join(list(scenarios.scenarios)[:2])}) or categories ({', '.join(CATEGORIES)})")
    wanted = set(chosen)
    return tuple(name for name, scenario in scenarios.scenarios.items()
                 if not wanted or name in wanted or wanted.intersection(scenario.categories))


class _Reader:
    def __init__(self, source: Path, clock: Clock) -> None:
        self.source, self.clock, self.tools = source, clock, all_tools()
        self.where = str(source)

    def fail(self, message: str) -> ScenarioError:
        return ScenarioError(f"{self.where}: {message}")

    def scenario(self, entry: Any, position: int) -> Scenario:
        self.where = f"{self.source}: scenario #{position}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise self.fail("expected an object with a `name`")
        self.where = f"{self.source}: scenario {entry['name']!r}"
        try:
            base_world(str(entry.get("base")), self.clock)
        except ValueError as err:
            raise self.fail(f"base: {err}") from None
        categories = self.strings(entry, "categories")
        unknown = sorted(set(categories) - set(CATEGORIES))
        if unknown:
            raise self.fail(f"categories: unknown {', '.join(unknown)}; expected some of {', '.join(CATEGORIES)}")
        tools, denied = self.strings(entry, "tools"), self.strings(entry, "denied_tools", required=False)
        for name in (*tools, *denied):
            if name not in self.tools:
                raise self.fail(f"tools: unknown tool {name!r}")
        milestones = tuple(self.milestone(m, f"milestones[{i}]") for i, m in enumerate(self.list(entry, "milestones")))
        minefields = tuple(self.milestone(m, f"minefields[{i}]")
                           for i, m in enumerate(self.list(entry, "minefields", required=False)))
        scenario = Scenario(
            name=entry["name"], base=entry["base"], categories=categories,
            user_task=self.text(entry, "user_task").replace("{current_year}", str(self.clock.datetime(
                self.clock.now).year)),
            first_message=self.text(entry, "first_message"), tools=tools, denied_tools=denied,
            milestones=milestones, milestone_edges=self.edges(entry, "milestone_edges", len(milestones)),
            minefields=minefields, minefield_edges=self.edges(entry, "minefield_edges", len(minefields)),
            gold=tuple(self.gold_step(step, i) for i, step in enumerate(self.list(entry, "gold"))),
            user_replies=self.strings(entry, "user_replies", required=False))
        self.check_references(scenario.milestones, scenario.milestone_edges, "milestones")
        self.check_references(scenario.minefields, scenario.minefield_edges, "minefields")
        self.check_gold(scenario)
        return scenario

    def milestone(self, raw: Any, where: str) -> Milestone:
        if not isinstance(raw, dict) or not isinstance(raw.get("constraints"), list) or not raw["constraints"]:
            raise self.fail(f"{where}: expected an object with a non-empty `constraints` list")
        only = raw.get("guardrail_only")
        exclude = raw.get("guardrail_exclude", [])
        for name in [*(only or []), *exclude]:
            if name not in _ALL_DATABASES:
                raise self.fail(f"{where}: unknown guardrail database {name!r}")
        return Milestone(constraints=tuple(self.constraint(c, f"{where}.constraints[{i}]")
                                           for i, c in enumerate(raw["constraints"])),
                         guardrail_only=None if only is None else tuple(only), guardrail_exclude=tuple(exclude))

    def constraint(self, raw: Any, where: str) -> Constraint:
        if not isinstance(raw, dict):
            raise self.fail(f"{where}: expected an object")
        database, measure = raw.get("db"), raw.get("measure")
        if database not in _ALL_DATABASES:
            raise self.fail(f"{where}: db must be one of {', '.join(_ALL_DATABASES)}, got {database!r}")
        if measure not in MEASURES:
            raise self.fail(f"{where}: measure must be one of {', '.join(MEASURES)}, got {measure!r}")
        target = raw.get("target")
        if not isinstance(target, list) or not target or not all(isinstance(row, dict) for row in target):
            raise self.fail(f"{where}: target must be a non-empty list of rows")
        if len(target) > MAX_TARGET_ROWS or len({tuple(sorted(row)) for row in target}) != 1:
            raise self.fail(f"{where}: target rows must share their columns, at most {MAX_TARGET_ROWS} rows")
        defaults = DEFAULT_MEASURES[database]
        unknown = sorted(set(target[0]) - set(defaults))
        if unknown:
            raise self.fail(f"{where}: {database} has no column(s) {', '.join(unknown)}")
        measures = dict(defaults)
        for column, spec in raw.get("columns", {}).items():
            if column not in defaults:
                raise self.fail(f"{where}: columns: {database} has no column {column!r}")
            measures[column] = self.column_measure(spec, f"{where}.columns.{column}")
        reference = raw.get("reference")
        if measure != "snapshot" and reference is None:
            raise self.fail(f"{where}: a {measure} constraint needs a `reference` milestone")
        fill_to, extractor = raw.get("fill_to"), raw.get("extractor")
        if measure == "tool_trace_dependant" and (database != "sandbox" or fill_to not in ("tool_trace", "content")
                                                  or extractor not in EXTRACTORS):
            raise self.fail(f"{where}: tool_trace_dependant needs db sandbox, fill_to tool_trace or content and an "
                            f"extractor among {', '.join(EXTRACTORS)}")
        return Constraint(database=database, measure=measure, target=tuple(self.resolve(row) for row in target),
                          measures=measures, reference=reference, fill_to=fill_to, extractor=extractor)

    def column_measure(self, spec: Any, where: str) -> ColumnMeasure:
        kind: Any = spec.get("measure") if isinstance(spec, dict) else spec
        atol: Any = spec.get("atol", {}) if isinstance(spec, dict) else {}
        if kind not in MEASURE_KINDS or not isinstance(atol, dict):
            raise self.fail(f"{where}: expected one of {', '.join(MEASURE_KINDS)} or {{measure, atol}}")
        return ColumnMeasure(kind=kind, atol={name: float(value) for name, value in atol.items()})

    def edges(self, entry: dict[str, Any], key: str, count: int) -> tuple[tuple[int, int], ...]:
        raw = entry.get(key)
        if raw is None:
            return tuple((i, i + 1) for i in range(count - 1))
        edges = tuple((int(a), int(b)) for a, b in raw)
        if any(not (0 <= a < count and 0 <= b < count) or a == b for a, b in edges):
            raise self.fail(f"{key}: every edge must join two of the {count} nodes")
        if len(topological_order(count, edges)) != count:
            raise self.fail(f"{key}: the edges form a cycle")
        return edges

    def check_references(self, nodes: tuple[Milestone, ...], edges: tuple[tuple[int, int], ...], what: str) -> None:
        """A reference must be -1 or an ancestor: the benchmark's search has mapped it by then."""
        for i, node in enumerate(nodes):
            ancestors = _ancestors(i, edges)
            for constraint in node.constraints:
                if constraint.reference not in (None, -1) and constraint.reference not in ancestors:
                    raise self.fail(f"{what}[{i}]: reference {constraint.reference} is not an ancestor")

    def gold_step(self, raw: Any, position: int) -> GoldStep:
        if isinstance(raw, dict) and isinstance(raw.get("say"), str):
            return GoldStep(say=raw["say"])
        if isinstance(raw, dict) and raw.get("call") in self.tools and isinstance(raw.get("arguments", {}), dict):
            return GoldStep(call=raw["call"], arguments=self.resolve(raw.get("arguments", {})))
        raise self.fail(f"gold[{position}]: expected {{say}} or {{call, arguments}} with a known tool")

    def check_gold(self, scenario: Scenario) -> None:
        says = sum(step.say is not None for step in scenario.gold)
        if not scenario.gold or scenario.gold[-1].say is None or says != len(scenario.user_replies) + 1:
            raise self.fail(f"gold: must end with a message to the user and have one user reply per message but "
                            f"the last ({says} messages, {len(scenario.user_replies)} replies)")
        allowed = set(scenario.tools) - set(scenario.denied_tools)
        for step in scenario.gold:
            if step.call is not None and step.call not in allowed:
                raise self.fail(f"gold: calls {step.call!r}, which the scenario does not allow")

    def resolve(self, value: Any) -> Any:
        """The value with the clock's placeholders filled in (`$result` is left for replay)."""
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if not isinstance(value, dict):
            return value
        if "$now" in value:
            if value["$now"] != "year":
                raise self.fail(f"unknown placeholder {value!r}")
            return self.clock.datetime(self.clock.now).year
        if "$datetime" in value:
            spec = value["$datetime"]
            try:
                if isinstance(spec, list):
                    return self.clock.timestamp(*spec)
                return self.clock.day_at(spec["day"], spec["hour"])
            except (TypeError, ValueError, KeyError) as err:
                raise self.fail(f"bad placeholder {value!r}: {err}") from None
        return {key: self.resolve(item) for key, item in value.items()}

    def list(self, entry: dict[str, Any], key: str, *, required: bool = True) -> list[Any]:
        value = entry.get(key, None if required else [])
        if not isinstance(value, list):
            raise self.fail(f"{key}: expected a list")
        return value

    def strings(self, entry: dict[str, Any], key: str, *, required: bool = True) -> tuple[str, ...]:
        values = self.list(entry, key, required=required)
        if not all(isinstance(value, str) for value in values):
            raise self.fail(f"{key}: expected a list of strings")
        return tuple(values)

    def text(self, entry: dict[str, Any], key: str) -> str:
        value = entry.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(f"{key}: expected a non-empty string")
        return value


def topological_order(count: int, edges: tuple[tuple[int, int], ...]) -> list[int]:
    """Kahn's order, the lowest ready node first; shorter than `count` when the edges have a cycle."""
    indegree = [0] * count
    for _, b in edges:
        indegree[b] += 1
    ready = sorted(i for i in range(count) if indegree[i] == 0)
    order = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for a, b in edges:
            if a == node:
                indegree[b] -= 1
                if indegree[b] == 0:
                    ready = sorted([*ready, b])
    return order


def _ancestors(node: int, edges: tuple[tuple[int, int], ...]) -> set[int]:
    found: set[int] = set()
    frontier = [node]
    while frontier:
        current = frontier.pop()
        for a, b in edges:
            if b == current and a not in found:
                found.add(a)
                frontier.append(a)
    return found
