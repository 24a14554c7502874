"""The environment checker: names, generators, types and limits of one `environment` block, every error in one pass.

It resolves what the interpreter needs to compile the block (column and parameter types, key columns) and leaves
the syntax tree as it is: inside a `where`, a bare name is a column of the row, else a `let`, else a table, else an
enum member of the other operand; the checker rejects the names that could mean two things, so the interpreter can
resolve them in that order without looking again. Left out: warnings (an unused parameter is not an error) and
any run-time property (whether a pick finds a row, whether the gold solution scores 1: that is validation's job).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tracec.dsl import ast
from tracec.dsl import types as T
from tracec.dsl.check_env_expr import FAILED_HINT, EnvExpressions, Scope, assignable, shown_type, written
from tracec.dsl.env_model import (
    DEFAULT_LIMITS,
    CheckedEnvironment,
    ColumnInfo,
    Limits,
    ParamInfo,
    TableInfo,
    ToolInfo,
)
from tracec.dsl.errors import Diagnostic, Loc, Source, did_you_mean
from tracec.dsl.reporter import Reporter
from tracec.dsl.types import Type

ENTITY_KINDS = ("key", "name", "city", "date")  # generators (and parameter types) whose values are entities
_USAGE = {
    "key": "key", "name": "name", "city": "city", "date": "date", "bool": "bool", "int": "int 1..100",
    "float": "float 0.0..1.0", "enum": "enum(a, b)", "ref": "ref <table>",
}
PARAM_TYPES = (*ENTITY_KINDS, "entity", "text", "int", "float", "bool", "enum")


def check_environment(
    env: ast.Environment, source: Source, *, limits: Limits = DEFAULT_LIMITS
) -> tuple[CheckedEnvironment | None, list[Diagnostic]]:
    """Check one environment; returns the checked form (None when anything is wrong) and every diagnostic."""
    checker = _EnvChecker(source, limits)
    checked = checker.environment(env)
    return (None if checker.errors else checked), checker.errors


class _EnvChecker(Reporter, EnvExpressions):
    def __init__(self, source: Source, limits: Limits):
        super().__init__(source)
        self.limits = limits
        self.tables: dict[str, TableInfo] = {}
        self.all_lets: dict[str, Loc] = {}

    def unique(self, seen: dict[str, Loc], name: str, loc: Loc, what: str, owner: str = "") -> bool:
        if name in seen:
            self.error(loc, f"{what} `{name}`{owner} is declared twice (first at line {seen[name].line})")
            return False
        seen[name] = loc
        return True

    # ------------------------------------------------------------------ declarations
    def environment(self, env: ast.Environment) -> CheckedEnvironment | None:
        self.name_ok(env.name, env.loc, "environment")
        single: dict[type, ast.EnvItem] = {}
        for item in env.items:
            if isinstance(item, (ast.EnvCapability, ast.Task, ast.Hint, ast.Solution, ast.Report, ast.Reward)):
                if type(item) in single:
                    word = {ast.EnvCapability: "capability", ast.Task: "task", ast.Hint: "hint",
                            ast.Solution: "solution", ast.Report: "report", ast.Reward: "reward"}[type(item)]
                    self.error(item.loc, f"an environment has one `{word}`; this is the second")
                single.setdefault(type(item), item)
        for cls, word in ((ast.Task, "task"), (ast.Solution, "solution"), (ast.Reward, "reward")):
            if cls not in single:
                self.error(env.loc, f"environment `{env.name}` has no `{word}`")
        table_decls = [i for i in env.items if isinstance(i, ast.Table)]
        tool_decls = [i for i in env.items if isinstance(i, ast.Tool)]
        let_decls = [i for i in env.items if isinstance(i, ast.Let)]
        for items, most, what in ((table_decls, self.limits.max_tables, "tables"),
                                  (tool_decls, self.limits.max_tools, "tools"),
                                  (let_decls, self.limits.max_lets, "lets")):
            if len(items) > most:
                self.error(items[most].loc, f"too many {what}: {len(items)}; the limit is {most}")
        self.declare_tables(table_decls)
        lets = self.declare_lets(let_decls)
        tools = self.declare_tools(tool_decls, lets)
        everything = Scope(lets)
        task = single.get(ast.Task)
        if isinstance(task, ast.Task):
            self.template(task.text, everything)
        solution = single.get(ast.Solution)
        if isinstance(solution, ast.Solution):
            self.solution(solution, tools, everything)
        report = single.get(ast.Report)
        if isinstance(report, ast.Report):
            for expr in report.exprs:
                self.scalar(expr, everything, "`report`")
        reward = single.get(ast.Reward)
        if isinstance(reward, ast.Reward):
            got = self.expr(reward.expr, Scope({}, rewarding=True))
            if got is not None and not got.numeric:
                self.error(reward.expr.loc, f"`reward` must be a number, not {shown_type(got)}")
        capability = single.get(ast.EnvCapability)
        if isinstance(capability, ast.EnvCapability):
            self.name_ok(capability.name, capability.loc, "capability")
        hint = single.get(ast.Hint)
        if isinstance(hint, ast.Hint):
            self.hint(hint)
        if self.errors:
            return None
        assert isinstance(task, ast.Task) and isinstance(solution, ast.Solution) and isinstance(reward, ast.Reward)
        return CheckedEnvironment(
            name=env.name, description=env.description,
            capability=capability.name if isinstance(capability, ast.EnvCapability) else None,
            tables=tuple(self.tables.values()), lets=tuple(let_decls),
            let_types=tuple(t for t in lets.values() if t is not None), task=task,
            tools=tuple(tools.values()), solution=solution,
            report=report.exprs if isinstance(report, ast.Report) else (), reward=reward.expr, source=self.source,
            hint=hint.text if isinstance(hint, ast.Hint) else None,
        )

    def hint(self, hint: ast.Hint) -> None:
        # Whether it gives the solution away depends on the seed's calls: validation checks that.
        if not hint.text.strip():
            self.error(hint.loc, "the `hint` is empty; write guidance (what to look at first, what to check before "
                                 "changing anything), or leave the line out")
        elif len(hint.text) > self.limits.max_string:
            self.error(hint.loc, f"the `hint` has {len(hint.text)} characters; the limit is {self.limits.max_string}")

    def declare_tables(self, decls: list[ast.Table]) -> None:
        seen: dict[str, Loc] = {}
        order = {t.name: i for i, t in reversed(list(enumerate(decls)))}
        for index, decl in enumerate(decls):
            self.name_ok(decl.name, decl.loc, "table")
            fresh = self.unique(seen, decl.name, decl.loc, "table")
            if decl.rows_min > decl.rows_max:
                self.error(decl.loc, f"rows {decl.rows_min}..{decl.rows_max}: the lower bound is above the upper bound")
            if decl.rows_max > self.limits.max_rows:
                self.error(decl.loc,
                           f"rows {decl.rows_min}..{decl.rows_max}: at most {self.limits.max_rows} rows a table")
            if len(decl.columns) > self.limits.max_columns:
                self.error(decl.loc, f"too many columns: {len(decl.columns)}; the limit is {self.limits.max_columns}")
            columns: dict[str, ColumnInfo] = {}
            names: dict[str, Loc] = {}
            key = None
            for column in decl.columns:
                self.name_ok(column.name, column.loc, "column")
                if not self.unique(names, column.name, column.loc, "column", f" of `{decl.name}`"):
                    continue
                type_ = self.generator(column.generator, decl.name, index, order, decls)
                if column.generator.kind == "key":
                    if key is not None:
                        self.error(column.loc, f"table `{decl.name}` already has a key column `{key}`")
                    key = key or column.name
                columns[column.name] = ColumnInfo(name=column.name, generator=column.generator, type=type_ or T.ENTITY)
            if fresh:
                self.tables[decl.name] = TableInfo(name=decl.name, columns=tuple(columns.values()), key=key,
                                                   rows=(decl.rows_min, decl.rows_max), loc=decl.loc, where=decl.where)
        tables = {decl.name for decl in decls}
        for decl in decls:
            if decl.where is not None and decl.name in self.tables:
                self.row_condition(decl.where, self.tables[decl.name], tables)

    def row_condition(self, where: ast.Expr, table: TableInfo, tables: set[str]) -> None:
        """A table's `where` reads only its own row (and enum members, literals): rows are generated before any
        `let` exists, and a row must not depend on the order in which other rows are drawn."""
        outside = [node for node in _subexpressions(where)
                   if isinstance(node, ast.Index)
                   or (isinstance(node, ast.Name) and node.id in tables and table.column(node.id) is None)]
        if outside:  # one error: the first reach outside (a lookup `t[k]` also names its table)
            columns = ", ".join(column.name for column in table.columns)
            first = min(outside, key=lambda node: (node.loc.line, node.loc.column))
            self.error(first.loc, f"a table's `where` reads only the columns of its own row ({columns})")
        else:
            self.condition(where, Scope({}, row=table), "the `where` condition")

    def generator(self, gen: ast.Generator, table: str, index: int, order: dict[str, int],
                  decls: list[ast.Table]) -> Type | None:
        kind, args = gen.kind, gen.args
        if kind not in _USAGE:
            self.error(gen.loc, f"unknown generator `{kind}`{did_you_mean(kind, list(_USAGE))}")
            return None
        numbers = len(args) == 2 and all(isinstance(a, (int, float)) for a in args)
        names = bool(args) and all(isinstance(a, str) for a in args)
        shape_ok = {"int": numbers, "float": numbers, "enum": names,
                    "ref": names and len(args) == 1}.get(kind, not args)
        if not shape_ok:
            self.error(gen.loc, f"`{kind}` is written `{_USAGE[kind]}`")
            return None
        if kind in ENTITY_KINDS:
            return T.ENTITY
        if kind == "bool":
            return T.BOOL
        if kind in ("int", "float"):
            low, high = args
            if kind == "int" and not all(type(a) is int for a in args):
                self.error(gen.loc, f"`int {low}..{high}` needs whole numbers; use `float` for decimals")
            elif low > high:  # type: ignore[operator]
                self.error(gen.loc, f"`{kind} {low}..{high}`: the lower bound is above the upper bound")
            return T.INT if kind == "int" else T.FLOAT
        if kind == "enum":
            members = tuple(str(a) for a in args)
            for member in dict.fromkeys(members):
                self.name_ok(member, gen.loc, "enum member")
                if members.count(member) > 1:
                    self.error(gen.loc, f"enum member `{member}` is listed twice")
            return T.enum(*dict.fromkeys(members))
        target = str(args[0])
        if target not in order:
            self.error(gen.loc, f"`ref {target}`: unknown table `{target}`{did_you_mean(target, list(order))}")
        elif order[target] >= index:
            self.error(gen.loc, f"`ref {target}`: a `ref` points to a table declared before `{table}`")
        elif not any(c.generator.kind == "key" for c in decls[order[target]].columns):
            self.error(gen.loc, f"`ref {target}`: table `{target}` has no `key` column to refer to")
        return T.ENTITY

    def declare_lets(self, decls: list[ast.Let]) -> dict[str, Type | None]:
        lets: dict[str, Type | None] = {}  # None: the let's own error is reported; uses of it stay quiet
        for decl in decls:
            self.all_lets.setdefault(decl.name, decl.loc)
        seen: dict[str, Loc] = {}
        for decl in decls:
            self.name_ok(decl.name, decl.loc, "let")
            if decl.name in self.tables:
                self.error(decl.loc, f"`{decl.name}` is already a table (line {self.tables[decl.name].loc.line})")
                continue
            if not self.unique(seen, decl.name, decl.loc, "let"):
                continue
            got: Type | None
            if isinstance(decl.value, ast.Pick):
                got = self.pick(decl.value, Scope(dict(lets)))
            else:
                got = self.expr(decl.value, Scope(dict(lets)))
                if got is not None and got.kind in ("table", "set"):
                    self.error(decl.value.loc, f"a `let` holds a value or a picked row, not a {got.kind}")
                    got = None
            lets[decl.name] = got
        return lets

    def pick(self, pick: ast.Pick, scope: Scope) -> Type | None:
        table = self.known_table(pick.table, pick.loc)
        if table is None:
            return None
        if pick.where is not None:
            self.condition(pick.where, Scope(scope.lets, row=table), "the `where` condition")
        return Type("row", table=table.name)

    def known_table(self, name: str, loc: Loc) -> TableInfo | None:
        if name not in self.tables:
            self.error(loc, f"unknown table `{name}`{did_you_mean(name, list(self.tables))}")
            return None
        return self.tables[name]

    def declare_tools(self, decls: list[ast.Tool], lets: dict[str, Type | None]) -> dict[str, ToolInfo]:
        tools: dict[str, ToolInfo] = {}
        seen: dict[str, Loc] = {}
        for decl in decls:
            self.name_ok(decl.name, decl.loc, "tool")
            fresh = self.unique(seen, decl.name, decl.loc, "tool")
            params: dict[str, ParamInfo] = {}
            for param in decl.params:
                self.name_ok(param.name, param.loc, "parameter")
                if param.name in params:
                    self.error(param.loc, f"parameter `{param.name}` of `{decl.name}` is declared twice")
                    continue
                params[param.name] = ParamInfo(name=param.name, type=self.param_type(param.type) or T.ENTITY,
                                               written=written(param.type))
            scope = Scope(lets, params=params)
            if isinstance(decl.body, ast.Query):
                table = self.known_table(decl.body.table, decl.body.loc)
                if table is not None and decl.body.where is not None:
                    self.condition(decl.body.where, Scope(lets, row=table, params=params), "the `where` condition")
            else:
                for require in decl.body.requires:
                    self.condition(require.cond, scope, "a `require` condition")
                    self.template(require.message, scope)
                for assign in decl.body.assigns:
                    self.assign(assign, scope)
            if fresh:
                tools[decl.name] = ToolInfo(name=decl.name, params=tuple(params.values()), body=decl.body, loc=decl.loc)
        return tools

    def param_type(self, ref: ast.TypeRef) -> Type | None:
        if ref.name == "enum" and ref.args:
            return T.enum(*dict.fromkeys(ref.args))
        if ref.name in PARAM_TYPES and not ref.args and ref.name != "enum":
            return T.PLAIN_TYPES.get(ref.name, T.ENTITY)
        if ref.name == "set":
            self.error(ref.loc, "a tool parameter cannot be a set")
        elif ref.name in PARAM_TYPES:
            self.error(ref.loc, f"`{ref.name}` is written `{'enum(a, b)' if ref.name == 'enum' else ref.name}`")
        else:
            self.error(ref.loc, f"unknown parameter type `{ref.name}`{did_you_mean(ref.name, PARAM_TYPES)}")
        return None

    # ------------------------------------------------------------------ statements
    def solution(self, solution: ast.Solution, tools: dict[str, ToolInfo], scope: Scope) -> None:
        if len(solution.calls) > self.limits.max_solution:
            self.error(solution.loc,
                       f"the solution has {len(solution.calls)} calls; the limit is {self.limits.max_solution}")
        for call in solution.calls:
            tool = tools.get(call.tool)
            if tool is None:
                self.error(call.loc, f"unknown tool `{call.tool}`{did_you_mean(call.tool, list(tools))}")
                for arg in call.args:
                    self.expr(arg, scope, FAILED_HINT)
                continue
            if len(call.args) != len(tool.params):
                params = ", ".join(f"{p.name}: {p.written}" for p in tool.params)
                plural = "" if len(tool.params) == 1 else "s"
                self.error(call.loc, f"`{tool.name}` takes {len(tool.params)} argument{plural} ({params}), "
                                     f"got {len(call.args)}")
            for arg, param in zip(call.args, tool.params):
                got = self.expr(arg, scope, param.type)
                if got is not None and not assignable(got, param.type):
                    self.error(arg.loc, f"argument `{param.name}` of `{tool.name}` is `{param.written}`, "
                                        f"not {shown_type(got)}")

    def assign(self, assign: ast.Assign, scope: Scope) -> None:
        table = self.known_table(assign.table, assign.loc)
        self.key(assign.key, scope)
        column = None
        if table is not None:
            if table.key is None:
                self.error(assign.loc, f"table `{table.name}` has no `key` column; `set` finds its row by key")
            column = table.column(assign.column)
            if column is None:
                names = [c.name for c in table.columns]
                self.error(assign.loc, f"table `{table.name}` has no column `{assign.column}`"
                                       f"{did_you_mean(assign.column, names)}")
            elif column.name == table.key:
                self.error(assign.loc, f"`{table.name}.{column.name}` is the key column; it cannot be set")
        got = self.expr(assign.value, scope, column.type if column else FAILED_HINT)
        if column is not None and got is not None and not assignable(got, column.type):
            self.error(assign.value.loc,
                       f"cannot set `{assign.table}.{column.name}` ({column.type}) to {shown_type(got)}")


def _subexpressions(expr: ast.Expr) -> list[Any]:
    """`expr` and every expression inside it."""
    found: list[Any] = []
    stack: list[Any] = [expr]
    while stack:
        node = stack.pop()
        found.append(node)
        for field in dataclasses.fields(node):
            value = getattr(node, field.name)
            for item in value if isinstance(value, tuple) else (value,):
                if dataclasses.is_dataclass(item) and not isinstance(item, (ast.TypeRef, Loc)):
                    stack.append(item)
    return found
