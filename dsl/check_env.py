"""The environment checker: names, generators, types and limits of one `environment` block, every error in one pass.

It resolves what the interpreter needs to compile the block (column and parameter types, key columns) and leaves
the syntax tree as it is: inside a `where`, a bare name is a column of the row, else a `let`, else a table, else an
enum member of the other operand; the checker rejects the names that could mean two things, so the interpreter can
resolve them in that order without looking again. Left out: warnings (an unused parameter is not an error) and
any run-time property (whether a pick finds a row, whether the gold solution scores 1: that is validation's job).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracec.dsl import ast
from tracec.dsl import types as T
from tracec.dsl.reporter import Reporter
from tracec.dsl.errors import Diagnostic, Loc, Source, did_you_mean
from tracec.dsl.types import Type

ENTITY_KINDS = ("key", "name", "city", "date")  # generators (and parameter types) whose values are entities
_USAGE = {
    "key": "key", "name": "name", "city": "city", "date": "date", "bool": "bool", "int": "int 1..100",
    "float": "float 0.0..1.0", "enum": "enum(a, b)", "ref": "ref <table>",
}
PARAM_TYPES = (*ENTITY_KINDS, "entity", "text", "int", "float", "bool", "enum")
FUNCTIONS = {"lower": (1,), "abs": (1,), "min": (2, 3, 4), "max": (2, 3, 4), "count": (1,), "contains": (2,),
             "add_days": (2,)}


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Bounds that keep an LLM-written environment cheap to run; the checker and the interpreter enforce them."""

    max_rows: int = 1000
    max_tables: int = 16
    max_columns: int = 32
    max_tools: int = 32
    max_lets: int = 32
    max_solution: int = 64
    max_steps: int = 30
    max_string: int = 4096  # string literals, argument values, rendered task text
    max_text: int = 16384  # one agent turn


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, kw_only=True)
class ColumnInfo:
    name: str
    generator: ast.Generator
    type: Type


@dataclass(frozen=True, kw_only=True)
class TableInfo:
    name: str
    columns: tuple[ColumnInfo, ...]
    key: str | None  # the `key` column, if the table has one
    rows: tuple[int, int]
    loc: Loc

    def column(self, name: str) -> ColumnInfo | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True, kw_only=True)
class ParamInfo:
    name: str
    type: Type
    written: str  # as declared: `key`, `date`, `enum(a, b)`


@dataclass(frozen=True, kw_only=True)
class ToolInfo:
    name: str
    params: tuple[ParamInfo, ...]
    body: ast.Query | ast.Mutation
    loc: Loc

    @property
    def kind(self) -> str:
        return "query" if isinstance(self.body, ast.Query) else "mutate"

    def signature(self) -> str:
        params = ", ".join(f"{p.name}: {p.written}" for p in self.params)
        if isinstance(self.body, ast.Query):
            return f"{self.name}({params}) -> rows of {self.body.table}"
        return f"{self.name}({params}) changes {', '.join(dict.fromkeys(a.table for a in self.body.assigns))}"


@dataclass(frozen=True, kw_only=True)
class CheckedEnvironment:
    name: str
    description: str
    capability: str | None
    tables: tuple[TableInfo, ...]
    lets: tuple[ast.Let, ...]
    let_types: tuple[Type, ...]
    task: ast.Task
    tools: tuple[ToolInfo, ...]
    solution: ast.Solution
    report: tuple[ast.Expr, ...]
    reward: ast.Expr
    source: Source

    def table(self, name: str) -> TableInfo:
        return next(t for t in self.tables if t.name == name)

    def tool(self, name: str) -> ToolInfo | None:
        return next((t for t in self.tools if t.name == name), None)


def check_environment(
    env: ast.Environment, source: Source, *, limits: Limits = DEFAULT_LIMITS
) -> tuple[CheckedEnvironment | None, list[Diagnostic]]:
    """Check one environment; returns the checked form (None when anything is wrong) and every diagnostic."""
    checker = _EnvChecker(source, limits)
    checked = checker.environment(env)
    return (None if checker.errors else checked), checker.errors


@dataclass(frozen=True)
class _Scope:
    """What names mean where an expression stands."""

    lets: dict[str, Type | None]
    row: TableInfo | None = None  # the row a `where` reads
    params: dict[str, ParamInfo] | None = None  # None outside a tool
    rewarding: bool = False  # inside `reward`: only scores and numbers


class _EnvChecker(Reporter):
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
            if isinstance(item, (ast.EnvCapability, ast.Task, ast.Solution, ast.Report, ast.Reward)):
                if type(item) in single:
                    word = {ast.EnvCapability: "capability", ast.Task: "task", ast.Solution: "solution",
                            ast.Report: "report", ast.Reward: "reward"}[type(item)]
                    self.error(item.loc, f"an environment has one `{word}`; this is the second")
                single.setdefault(type(item), item)
        for cls, word in ((ast.Task, "task"), (ast.Solution, "solution"), (ast.Reward, "reward")):
            if cls not in single:
                self.error(env.loc, f"environment `{env.name}` has no `{word}`")
        table_decls = [i for i in env.items if isinstance(i, ast.Table)]
        tool_decls = [i for i in env.items if isinstance(i, ast.Tool)]
        let_decls = [i for i in env.items if isinstance(i, ast.Let)]
        for items, most, what in ((table_decls, self.limits.max_tables, "tables"),
                                  (tool_decls, self.limits.max_tools, "tools"), (let_decls, self.limits.max_lets, "lets")):
            if len(items) > most:
                self.error(items[most].loc, f"too many {what}: {len(items)}; the limit is {most}")
        self.declare_tables(table_decls)
        lets = self.declare_lets(let_decls)
        tools = self.declare_tools(tool_decls, lets)
        everything = _Scope(lets)
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
            got = self.expr(reward.expr, _Scope({}, rewarding=True))
            if got is not None and not got.numeric:
                self.error(reward.expr.loc, f"`reward` must be a number, not {_t(got)}")
        capability = single.get(ast.EnvCapability)
        if isinstance(capability, ast.EnvCapability):
            self.name_ok(capability.name, capability.loc, "capability")
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
        )

    def declare_tables(self, decls: list[ast.Table]) -> None:
        seen: dict[str, Loc] = {}
        order = {t.name: i for i, t in reversed(list(enumerate(decls)))}
        for index, decl in enumerate(decls):
            self.name_ok(decl.name, decl.loc, "table")
            fresh = self.unique(seen, decl.name, decl.loc, "table")
            if decl.rows_min > decl.rows_max:
                self.error(decl.loc, f"rows {decl.rows_min}..{decl.rows_max}: the lower bound is above the upper bound")
            if decl.rows_max > self.limits.max_rows:
                self.error(decl.loc, f"rows {decl.rows_min}..{decl.rows_max}: at most {self.limits.max_rows} rows a table")
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
                                                   rows=(decl.rows_min, decl.rows_max), loc=decl.loc)

    def generator(self, gen: ast.Generator, table: str, index: int, order: dict[str, int],
                  decls: list[ast.Table]) -> Type | None:
        kind, args = gen.kind, gen.args
        if kind not in _USAGE:
            self.error(gen.loc, f"unknown generator `{kind}`{did_you_mean(kind, list(_USAGE))}")
            return None
        numbers = len(args) == 2 and all(isinstance(a, (int, float)) for a in args)
        names = bool(args) and all(isinstance(a, str) for a in args)
        shape_ok = {"int": numbers, "float": numbers, "enum": names, "ref": names and len(args) == 1}.get(kind, not args)
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
                got = self.pick(decl.value, _Scope(dict(lets)))
            else:
                got = self.expr(decl.value, _Scope(dict(lets)))
                if got is not None and got.kind in ("table", "set"):
                    self.error(decl.value.loc, f"a `let` holds a value or a picked row, not a {got.kind}")
                    got = None
            lets[decl.name] = got
        return lets

    def pick(self, pick: ast.Pick, scope: _Scope) -> Type | None:
        table = self.known_table(pick.table, pick.loc)
        if table is None:
            return None
        if pick.where is not None:
            self.condition(pick.where, _Scope(scope.lets, row=table), "the `where` condition")
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
                                               written=_written(param.type))
            scope = _Scope(lets, params=params)
            if isinstance(decl.body, ast.Query):
                table = self.known_table(decl.body.table, decl.body.loc)
                if table is not None and decl.body.where is not None:
                    self.condition(decl.body.where, _Scope(lets, row=table, params=params), "the `where` condition")
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
    def solution(self, solution: ast.Solution, tools: dict[str, ToolInfo], scope: _Scope) -> None:
        if len(solution.calls) > self.limits.max_solution:
            self.error(solution.loc, f"the solution has {len(solution.calls)} calls; the limit is {self.limits.max_solution}")
        for call in solution.calls:
            tool = tools.get(call.tool)
            if tool is None:
                self.error(call.loc, f"unknown tool `{call.tool}`{did_you_mean(call.tool, list(tools))}")
                for arg in call.args:
                    self.expr(arg, scope, _FAILED)
                continue
            if len(call.args) != len(tool.params):
                params = ", ".join(f"{p.name}: {p.written}" for p in tool.params)
                plural = "" if len(tool.params) == 1 else "s"
                self.error(call.loc, f"`{tool.name}` takes {len(tool.params)} argument{plural} ({params}), "
                                     f"got {len(call.args)}")
            for arg, param in zip(call.args, tool.params):
                got = self.expr(arg, scope, param.type)
                if got is not None and not _assignable(got, param.type):
                    self.error(arg.loc, f"argument `{param.name}` of `{tool.name}` is `{param.written}`, not {_t(got)}")

    def assign(self, assign: ast.Assign, scope: _Scope) -> None:
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
        got = self.expr(assign.value, scope, column.type if column else _FAILED)
        if column is not None and got is not None and not _assignable(got, column.type):
            self.error(assign.value.loc, f"cannot set `{assign.table}.{column.name}` ({column.type}) to {_t(got)}")

    def key(self, expr: ast.Expr, scope: _Scope) -> None:
        got = self.expr(expr, scope)
        if got is not None and got.kind not in ("entity", "string"):
            self.error(expr.loc, f"a row is looked up by its key (an entity), not by {_t(got)}")

    def condition(self, expr: ast.Expr, scope: _Scope, what: str) -> None:
        got = self.expr(expr, scope)
        if got is not None and got.kind != "bool":
            self.error(expr.loc, f"{what} must be a bool, not {_t(got)}")

    def scalar(self, expr: ast.Expr, scope: _Scope, what: str) -> None:
        got = self.expr(expr, scope)
        if got is not None and got.kind in ("row", "table", "set"):
            self.error(expr.loc, f"{what} needs a value such as `row.column`, not a {got}")

    def template(self, template: ast.Template, scope: _Scope) -> None:
        self.string("".join(p for p in template.parts if isinstance(p, str)), template.loc)
        for part in template.parts:
            if not isinstance(part, str):
                self.scalar(part, scope, "an interpolation `{...}`")

    def string(self, text: str, loc: Loc) -> None:
        if len(text) > self.limits.max_string:
            self.error(loc, f"a string of {len(text)} characters; the limit is {self.limits.max_string}")

    # ------------------------------------------------------------------ expressions
    def expr(self, expr: ast.Expr, scope: _Scope, hint: Type | None = None) -> Type | None:
        if hint is _FAILED and isinstance(expr, ast.Name) and self.resolve(expr.id, scope) is None:
            return None  # an enum member whose enum is unknown: the other side's error is enough
        if scope.rewarding and isinstance(expr, (ast.Name, ast.Param, ast.Attr, ast.Index, ast.SetLiteral)):
            self.error(expr.loc, "`reward` reads only `state`, `report` and numbers")
            return None
        if isinstance(expr, ast.Literal):
            value = expr.value
            if isinstance(value, str):
                self.string(value, expr.loc)
                return T.STRING
            return T.BOOL if isinstance(value, bool) else T.INT if isinstance(value, int) else T.FLOAT
        if isinstance(expr, ast.Name):
            return self.name(expr, scope, hint)
        if isinstance(expr, ast.Param):
            return self.param(expr, scope)
        if isinstance(expr, ast.Attr):
            return self.attr(expr, scope)
        if isinstance(expr, ast.Index):
            return self.index(expr, scope)
        if isinstance(expr, ast.Unary):
            got = self.expr(expr.operand, scope)
            if got is None:
                return None
            if expr.op == "not":
                return self.want_bool(expr.operand, got, "`not`")
            if not got.numeric:
                self.error(expr.loc, f"unary `-` needs a number, not {_t(got)}")
                return None
            return got
        if isinstance(expr, ast.Binary):
            return self.binary(expr, scope)
        if isinstance(expr, ast.Call):
            return self.call(expr, scope)
        if isinstance(expr, ast.Score):
            if not scope.rewarding:
                self.error(expr.loc, f"`{expr.kind}` is a score of the environment; it can only be used in `reward`")
                return None
            return T.INT
        if isinstance(expr, ast.SetLiteral):
            self.error(expr.loc, "a set literal `{...}` can only follow `in` or be counted")
        elif isinstance(expr, ast.Fact):
            self.error(expr.loc, f"`{expr.side}.{expr.field}` is a transition fact; it belongs in a rubric")
        else:
            self.error(expr.loc, "a regex belongs in a rubric; an environment compares values")
        return None

    def resolve(self, name: str, scope: _Scope) -> tuple[str, Type | None] | None:
        """What a bare name means here, in the interpreter's order: column, let, table."""
        if scope.row is not None and (column := scope.row.column(name)) is not None:
            return "column", column.type
        if name in scope.lets:
            return "let", scope.lets[name]
        if name in self.tables:
            return "table", Type("table", table=name)
        return None

    def name(self, expr: ast.Name, scope: _Scope, hint: Type | None) -> Type | None:
        meaning = self.resolve(expr.id, scope)
        member = hint is not None and hint.kind == "enum" and expr.id in hint.members
        if meaning is not None:
            if member:
                self.error(expr.loc, f"`{expr.id}` is both a {meaning[0]} and a member of {_t(hint)}; rename the {meaning[0]}")
                return None
            return meaning[1]
        if member:
            return hint
        if hint is not None and hint.kind == "enum":
            self.error(expr.loc, f"`{expr.id}` is not a member of {_t(hint)}{did_you_mean(expr.id, hint.members)}")
        elif expr.id in self.all_lets:
            self.error(expr.loc, f"`{expr.id}` is used before its `let` (line {self.all_lets[expr.id].line})")
        else:
            columns = [c.name for c in scope.row.columns] if scope.row else []
            candidates = [*columns, *scope.lets, *self.tables]
            self.error(expr.loc, f"unknown name `{expr.id}`{did_you_mean(expr.id, candidates)}")
        return None

    def param(self, expr: ast.Param, scope: _Scope) -> Type | None:
        if scope.params is None:
            self.error(expr.loc, f"`${expr.id}` is a tool parameter; it has no value outside a tool")
            return None
        if expr.id not in scope.params:
            known = [f"${p}" for p in scope.params]
            self.error(expr.loc, f"unknown parameter `${expr.id}`{did_you_mean('$' + expr.id, known)}")
            return None
        return scope.params[expr.id].type

    def attr(self, expr: ast.Attr, scope: _Scope) -> Type | None:
        base = self.expr(expr.base, scope)
        if base is None:
            return None
        if base.kind != "row":
            self.error(expr.loc, f"`.{expr.field}` reads a column of a row, not of {_t(base)}")
            return None
        table = self.tables[base.table]
        column = table.column(expr.field)
        if column is None:
            names = [c.name for c in table.columns]
            self.error(expr.loc, f"table `{table.name}` has no column `{expr.field}`{did_you_mean(expr.field, names)}")
            return None
        return column.type

    def index(self, expr: ast.Index, scope: _Scope) -> Type | None:
        base = self.expr(expr.base, scope)
        self.key(expr.key, scope)
        if base is None:
            return None
        if base.kind != "table":
            self.error(expr.loc, f"only a table can be indexed with `[...]`, not {_t(base)}")
            return None
        if self.tables[base.table].key is None:
            self.error(expr.loc, f"table `{base.table}` has no `key` column to look rows up by")
            return None
        return Type("row", table=base.table)

    def want_bool(self, expr: ast.Expr, got: Type, where: str) -> Type | None:
        if got.kind == "bool":
            return got
        self.error(expr.loc, f"{where} needs a bool, not {_t(got)}")
        return None

    def binary(self, expr: ast.Binary, scope: _Scope) -> Type | None:
        op = expr.op
        if op in ("and", "or"):
            left, right = self.expr(expr.left, scope), self.expr(expr.right, scope)
            ok = [self.want_bool(e, t, f"`{op}`") for e, t in ((expr.left, left), (expr.right, right)) if t]
            return T.BOOL if left and right and all(ok) else None
        if op == "in":
            return self.membership(expr, scope)
        if isinstance(expr.left, ast.Name) and self.resolve(expr.left.id, scope) is None and not scope.rewarding:
            right = self.expr(expr.right, scope)
            left = self.expr(expr.left, scope, right or _FAILED)
        else:
            left = self.expr(expr.left, scope)
            right = self.expr(expr.right, scope, left or _FAILED)
        if left is None or right is None:
            return None
        for side, got in ((expr.left, left), (expr.right, right)):
            if got.kind == "text":
                self.error(side.loc, "`text` can only be read by contains() or shown in a string")
                return None
        if op in ("==", "!="):
            if not T.comparable(left, right):
                hint = "; write the enum member without quotes" if {left.kind, right.kind} == {"enum", "string"} else ""
                self.error(expr.loc, f"cannot compare {_t(left)} with {_t(right)}{hint}")
                return None
            return T.BOOL
        if op in ("<", "<=", ">", ">="):
            if (left.numeric and right.numeric) or (_textual(left) and _textual(right)):
                return T.BOOL
            self.error(expr.loc, f"`{op}` compares two numbers or two dates, not {_t(left)} and {_t(right)}")
            return None
        if not (left.numeric and right.numeric):
            bad = left if not left.numeric else right
            self.error(expr.loc, f"`{op}` needs numbers, not {_t(bad)}")
            return None
        return T.FLOAT if op == "/" or T.FLOAT in (left, right) else T.INT

    def membership(self, expr: ast.Binary, scope: _Scope) -> Type | None:
        left = self.expr(expr.left, scope)
        if not isinstance(expr.right, ast.SetLiteral):
            self.expr(expr.right, scope)
            self.error(expr.right.loc, "`in` needs a set literal `{a, b}` on its right")
            return None
        ok = left is not None
        for item in expr.right.items:
            got = self.expr(item, scope, left or _FAILED)
            if left is not None and got is not None and not T.comparable(left, got):
                self.error(item.loc, f"a set of {_t(left)} cannot hold {_t(got)}")
                ok = False
        return T.BOOL if ok else None

    def call(self, expr: ast.Call, scope: _Scope) -> Type | None:
        func, args = expr.func, expr.args
        allowed = ("abs", "min", "max") if scope.rewarding else tuple(FUNCTIONS)
        if func not in allowed:
            where = " in `reward`" if scope.rewarding and func in FUNCTIONS else ""
            self.error(expr.loc, f"unknown function `{func}`{where}{did_you_mean(func, allowed)}")
            return None
        counts = FUNCTIONS[func]
        if len(args) not in counts:
            shown = f"at least {counts[0]}" if len(counts) > 1 else str(counts[0])
            self.error(expr.loc, f"`{func}` takes {shown} argument{'s' if counts != (1,) else ''}, got {len(args)}")
            return None
        if func == "count":
            if isinstance(args[0], ast.SetLiteral):
                for item in args[0].items:
                    self.scalar(item, scope, "a set item")
                return T.INT
            got = self.expr(args[0], scope)
            if got is not None and got.kind != "table":
                self.error(args[0].loc, f"count() takes a table or a set literal `{{...}}`, not {_t(got)}")
            return T.INT
        got = [self.expr(arg, scope) for arg in args]
        want = {"lower": ("text",), "contains": ("text", "text"), "add_days": ("text", "int")}.get(func, ("number",) * 4)
        for arg, type_, kind in zip(args, got, want):
            fits = {"text": _textual(type_) or type_.kind == "text", "int": type_ == T.INT,
                    "number": type_.numeric}[kind] if type_ is not None else True
            if not fits:
                wanted = "a date" if func == "add_days" and kind == "text" else _WANTED[kind]
                self.error(arg.loc, f"{func}() takes {wanted}, not {_t(type_)}")
                return None
        if any(t is None for t in got):
            return None
        if func in ("lower", "add_days"):
            return T.ENTITY
        if func == "contains":
            return T.BOOL
        return T.FLOAT if T.FLOAT in got else got[0]


_FAILED = Type("enum", ("?",))  # a hint whose expression failed to type
_WANTED = {"text": "text", "int": "a whole number", "number": "a number"}


def _t(type_: Type | None) -> str:
    """A type in a message; row and table types name their table in backticks already."""
    return str(type_) if type_ is not None and type_.kind in ("row", "table") else f"`{type_}`"


def _textual(type_: Type | None) -> bool:
    return type_ is not None and type_.kind in ("entity", "string")


def _assignable(got: Type, want: Type) -> bool:
    if want.kind == "text" and (_textual(got) or got.kind == "text"):
        return True
    return T.comparable(got, want) or (got.kind == "int" and want.kind == "float")


def _written(ref: ast.TypeRef) -> str:
    return f"{ref.name}({', '.join(ref.args)})" if ref.args else ref.name
