"""A checked environment compiled once: tools, picks, task and reward as closures, ready to serve many episodes.

`scenario(seed)` draws the tables, evaluates the `let`s (re-drawing a bounded number of times when a pick finds no
row), renders the task and replays the `solution` on a copy to get the gold state and the values to report.
`call(db, lets, name, arguments)` runs one tool call on a database and says what happened; it never raises on what an
agent wrote: unknown tools, bad arguments and failed `require`s come back as errors the agent reads.
Left out: the conversation (see `episode.py`) and scoring an agent's run (`CapabilityEnvironment.scores`).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracec.dsl import ast
from tracec.dsl.env_model import DEFAULT_LIMITS, CheckedEnvironment, Limits, ParamInfo, ToolInfo
from tracec.dsl.errors import EnvError
from tracec.trace_rl.envs.capability.database import Database
from tracec.trace_rl.envs.capability.expr import Fn, Frame, Names, compile_expr, compile_template, show
from tracec.trace_rl.envs.capability.generate import TableMaker, rng_for
from tracec.trace_rl.envs.capability.guidance import derived_hint
from tracec.trace_rl.envs.toolcall import ToolCall, argument_leaves, render_result

MAX_DRAWS = 32  # re-draws of a scenario whose pick finds no row, before the environment is reported broken


@dataclass(slots=True, kw_only=True)  # not frozen: built on every step, and frozen init is slow
class Outcome:
    """What one tool call did; `observation` is what the agent reads."""

    kind: str  # query | mutate | invalid
    tool: str | None
    accepted: bool
    observation: str
    error: str | None = None
    changed: bool = False
    rows: int | None = None
    revealed: tuple[str, ...] = ()
    target: str | None = None
    args: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One task instance: a pure function of the seed."""

    seed: int
    task: str
    db: Database  # the initial tables; episodes work on a copy
    lets: dict[str, Any]
    gold_calls: tuple[ToolCall, ...]
    gold_digest: str
    report: tuple[Any, ...]  # the values the agent must tell the user


class _Tool:
    """A compiled tool: argument checks, then the query or the requires and assignments."""

    def __init__(self, info: ToolInfo, env: CheckedEnvironment, limits: Limits):
        self.info, self.name, self.kind = info, info.name, info.kind
        self.params = {p.name: p for p in info.params}
        self.max_string = limits.max_string
        self.key_param = next((p.name for p in info.params if p.written == "key"), None)
        lets, tables = frozenset(l.name for l in env.lets), frozenset(t.name for t in env.tables)
        plain = Names(lets=lets, tables=tables)
        body = info.body
        if isinstance(body, ast.Query):
            table = env.table(body.table)
            self.table = table.name
            self.where = compile_expr(body.where, Names(columns=frozenset(c.name for c in table.columns),
                                                        lets=lets, tables=tables)) if body.where else None
            self.reveal = tuple(c.name for c in table.columns if c.generator.kind in ("key", "ref"))
        else:
            self.requires = [(compile_expr(r.cond, plain), compile_template(r.message, plain)) for r in body.requires]
            self.assigns = [(a.table, compile_expr(a.key, plain), a.column, compile_expr(a.value, plain))
                            for a in body.assigns]
            self.reveal_by_table = {t.name: tuple(c.name for c in t.columns if c.generator.kind in ("key", "ref"))
                                    for t in env.tables}

    def bind(self, arguments: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The arguments converted to the declared types, or why they cannot be."""
        for name in arguments:
            if name not in self.params:
                close = difflib.get_close_matches(name, list(self.params), n=1)
                hint = f"; did you mean `{close[0]}`?" if close else ""
                return {}, f"`{self.name}` has no argument `{_clip(name)}`{hint} (it takes {self.info.signature()})"
        values = {}
        for name, param in self.params.items():
            if name not in arguments:
                return {}, f"`{self.name}` needs the argument `{name}` (it takes {self.info.signature()})"
            value, error = _coerce(arguments[name], param, self.max_string)
            if error is not None:
                return {}, f"argument `{name}` of `{self.name}`: {error}"
            values[name] = value
        return values, None

    def run(self, db: Database, lets: dict[str, Any], arguments: dict[str, Any], *, observe: bool = True) -> Outcome:
        """Run the call on `db`; `observe=False` skips rendering the result (the gold replay reads none)."""
        shown = _shown(arguments, self.max_string)
        values, error = self.bind(arguments)
        target = values.get(self.key_param) if self.key_param else None
        if error is not None:
            return _failed(self.kind, self.name, error, shown, target)
        frame = Frame(db, lets, values)
        if self.kind == "query":
            where = self.where
            rows = [row for row in db.rows[self.table] if where is None or where(row, frame) is True]
            revealed = tuple(row[c] for row in rows for c in self.reveal if row[c] is not None)
            return Outcome(kind="query", tool=self.name, accepted=True, observation=render_result(rows),
                           rows=len(rows), revealed=revealed, target=target, args=shown)
        for cond, message in self.requires:
            if cond(None, frame) is not True:
                return _failed("mutate", self.name, message(None, frame), shown, target)
        changes = []
        for table, key, column, value in self.assigns:
            found = key(None, frame)
            row = db.index[table].get(found) if isinstance(found, str) else None
            if row is None:
                return _failed("mutate", self.name, f"no row of `{table}` has the key `{_clip(show(found))}`", shown,
                               target)
            changes.append((table, row, column, value(None, frame)))
        changed = False
        for _, row, column, new in changes:  # all values are computed first: assignments see the state before the call
            changed |= row[column] != new
            row[column] = new
        updated = list({id(row): row for _, row, _, _ in changes}.values())
        revealed = tuple(row[c] for table, row, _, _ in changes for c in self.reveal_by_table[table]
                         if row[c] is not None)
        return Outcome(kind="mutate", tool=self.name, accepted=True, changed=changed, target=target, args=shown,
                       observation=render_result({"ok": True, "updated": updated}) if observe else "",
                       revealed=revealed)


class Program:
    def __init__(self, env: CheckedEnvironment, *, limits: Limits = DEFAULT_LIMITS):
        self.env, self.limits = env, limits
        self.name, self.description, self.capability = env.name, env.description, env.capability
        self.tools = {t.name: _Tool(t, env, limits) for t in env.tools}
        # The guidance hinted rollouts see: the `hint` line, else what the solution's shape says (never its calls).
        self.hint = env.hint or derived_hint([self.tools[c.tool].kind for c in env.solution.calls], bool(env.report))
        row_conditions = {t.name: compile_expr(t.where, Names(columns=frozenset(c.name for c in t.columns)))
                          for t in env.tables if t.where is not None}
        self._maker = TableMaker(env, {name: _of_row(fn) for name, fn in row_conditions.items()})
        tables = frozenset(t.name for t in env.tables)
        self._lets: list[tuple[ast.Let, Fn]] = []
        visible: set[str] = set()
        for let in env.lets:
            if isinstance(let.value, ast.Pick):
                table = env.table(let.value.table)
                names = Names(columns=frozenset(c.name for c in table.columns), lets=frozenset(visible), tables=tables)
                where = compile_expr(let.value.where, names) if let.value.where else (lambda row, fr: True)
                self._lets.append((let, where))
            else:
                self._lets.append((let, compile_expr(let.value, Names(lets=frozenset(visible), tables=tables))))
            visible.add(let.name)
        everything = Names(lets=frozenset(visible), tables=tables)
        self._task = compile_template(env.task.text, everything)
        self._solution = [(call, [compile_expr(a, everything) for a in call.args]) for call in env.solution.calls]
        self._report = [compile_expr(e, everything) for e in env.report]
        self._reward = compile_expr(env.reward, Names())

    # ------------------------------------------------------------------ episodes
    def scenario(self, seed: int) -> Scenario:
        failed: ast.Let | None = None
        for draw in range(MAX_DRAWS):
            db = self._maker.make(seed, draw)
            lets, failed = self._draw_lets(db, seed, draw)
            if failed is None:
                break
        else:
            assert isinstance(failed, ast.Let) and isinstance(failed.value, ast.Pick)
            raise EnvError([self.env.source.diagnostic(
                failed.value.loc, f"`pick({failed.value.table} ...)` found no row in {MAX_DRAWS} draws of seed {seed}; "
                                  "loosen its condition or generate more rows")])
        frame = Frame(db, lets)
        task = self._task(None, frame)
        if len(task) > self.limits.max_string:
            raise self._error(self.env.task.loc, f"the task text has {len(task)} characters on seed {seed}; "
                                                 f"the limit is {self.limits.max_string}")
        gold = db.copy()
        calls = []
        for call, args in self._solution:
            tool = self.tools[call.tool]
            arguments = {p.name: fn(None, Frame(gold, lets)) for p, fn in zip(tool.info.params, args)}
            # A query changes nothing: checking its arguments is all the gold state needs from it.
            error = (tool.bind(arguments)[1] if tool.kind == "query"
                     else tool.run(gold, lets, arguments, observe=False).error)
            if error is not None:
                raise self._error(call.loc, f"the solution's call to `{call.tool}` fails on seed {seed}: {error}")
            calls.append(ToolCall(name=call.tool, arguments=arguments))
        report = tuple(fn(None, Frame(gold, lets)) for fn in self._report)
        for expr, value in zip(self.env.report, report):
            if value is None:
                raise self._error(expr.loc, f"the reported value is missing on seed {seed}")
        return Scenario(seed=seed, task=task, db=db, lets=lets, gold_calls=tuple(calls), gold_digest=gold.digest(),
                        report=report)

    def _draw_lets(self, db: Database, seed: int, draw: int) -> tuple[dict[str, Any], ast.Let | None]:
        rng = rng_for(seed, f"{draw}/picks")
        lets: dict[str, Any] = {}
        frame = Frame(db, lets)
        for let, fn in self._lets:
            if isinstance(let.value, ast.Pick):
                rows = [row for row in db.rows[let.value.table] if fn(row, frame) is True]
                if not rows:
                    return lets, let
                lets[let.name] = dict(rng.choice(rows))  # a snapshot: tools change the tables, not the task
            else:
                lets[let.name] = fn(None, frame)
        return lets, None

    def call(self, db: Database, lets: dict[str, Any], name: str, arguments: dict[str, Any]) -> Outcome:
        tool = self.tools.get(name)
        if tool is None:
            close = difflib.get_close_matches(name, list(self.tools), n=1)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            message = f"unknown tool `{_clip(name, 64)}`{hint}; tools are: {', '.join(self.tools)}"
            return _failed("invalid", _clip(name, 64), message, (), None)
        return tool.run(db, lets, arguments)

    def reward(self, state: float, report: float) -> float:
        value = self._reward(None, Frame(Database({}, {}), {"state": state, "report": report}))
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0

    def _error(self, loc: Any, message: str) -> EnvError:
        return EnvError([self.env.source.diagnostic(loc, message)])


def _failed(kind: str, tool: str | None, error: str, args: tuple[str, ...], target: Any) -> Outcome:
    return Outcome(kind=kind, tool=tool, accepted=False, error=error, observation=render_result({"error": error}),
                   args=args, target=target)


def _shown(arguments: dict[str, Any], most: int) -> tuple[str, ...]:
    """The call's `args` facts, clipped; a string argument, the usual one, is its own only leaf."""
    shown: list[str] = []
    for value in arguments.values():
        if isinstance(value, str):
            shown.append(_clip(value, most))
        else:
            shown.extend(_clip(leaf, most) for leaf in argument_leaves(value))
    return tuple(shown)


def _clip(text: str, most: int = 64) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


def _coerce(value: Any, param: ParamInfo, max_string: int) -> tuple[Any, str | None]:
    """An argument as the parameter's type; agents write `42` for `"42"` and `"3"` for `3`, both are accepted."""
    kind = param.type.kind
    if kind in ("entity", "text", "enum"):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            value = show(value)
        if not isinstance(value, str):
            return None, f"expected a string, got {_kind_of(value)}"
        if len(value) > max_string:
            return None, f"{len(value)} characters; the limit is {max_string}"
        if kind == "enum" and value not in param.type.members:
            return None, f"expected one of {', '.join(param.type.members)}, got `{_clip(value, 40)}`"
        return value, None
    if kind == "bool":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true", None
        return (value, None) if isinstance(value, bool) else (None, f"expected true or false, got {_kind_of(value)}")
    if isinstance(value, str):
        value = _number(value.strip())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None, f"expected a number, got {_kind_of(value)}"
    if kind == "int":
        return (int(value), None) if float(value).is_integer() else (None, f"expected a whole number, got {value}")
    return float(value), None


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _kind_of(value: Any) -> str:
    if isinstance(value, str):
        return f"`{_clip(value, 40)}`"
    return {bool: "a boolean", list: "a list", dict: "an object", type(None): "null"}.get(type(value), show(value))


def _of_row(condition: Fn) -> Callable[[dict[str, Any]], Any]:
    """A row condition as a function of the row alone: it reads no let, parameter or table."""
    nothing = Frame(Database({}, {}), {})
    return lambda row: condition(row, nothing)
