"""Typing of the expressions inside an `environment` block: names resolve to a column of the row (inside `where`),
a `let`, a table, or an enum member of the other operand; rows, table lookups, `$params`, comparisons, arithmetic,
and the environment functions. A mixin of the environment checker, which supplies `error`, `tables` and `limits`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracec.dsl import ast
from tracec.dsl import operators as ops
from tracec.dsl import types as T
from tracec.dsl.env_model import Limits, ParamInfo, TableInfo
from tracec.dsl.errors import Loc, did_you_mean
from tracec.dsl.types import Type

# Functions of environments: name -> (fewest, most) arguments; abs, min and max are the rubric language's.
FUNCTIONS: dict[str, tuple[int, int | None]] = {"lower": (1, 1), "count": (1, 1), "contains": (2, 2),
                                                "add_days": (2, 2), **ops.SHARED_ARITY}


@dataclass(frozen=True)
class Scope:
    """What names mean where an expression stands."""

    lets: dict[str, Type | None]
    row: TableInfo | None = None  # the row a `where` reads
    params: dict[str, ParamInfo] | None = None  # None outside a tool
    rewarding: bool = False  # inside `reward`: only scores and numbers


class EnvExpressions:
    """Expression methods of the environment checker."""

    error: Any
    tables: dict[str, TableInfo]
    all_lets: dict[str, Loc]
    limits: Limits

    def key(self, expr: ast.Expr, scope: Scope) -> None:
        got = self.expr(expr, scope)
        if got is not None and got.kind not in ("entity", "string"):
            self.error(expr.loc, f"a row is looked up by its key (an entity), not by {shown_type(got)}")

    def condition(self, expr: ast.Expr, scope: Scope, what: str) -> None:
        got = self.expr(expr, scope)
        if got is not None and got.kind != "bool":
            self.error(expr.loc, f"{what} must be a bool, not {shown_type(got)}")

    def scalar(self, expr: ast.Expr, scope: Scope, what: str) -> None:
        got = self.expr(expr, scope)
        if got is not None and got.kind in ("row", "table", "set"):
            self.error(expr.loc, f"{what} needs a value such as `row.column`, not a {got}")

    def template(self, template: ast.Template, scope: Scope) -> None:
        self.string("".join(p for p in template.parts if isinstance(p, str)), template.loc)
        for part in template.parts:
            if not isinstance(part, str):
                self.scalar(part, scope, "an interpolation `{...}`")

    def string(self, text: str, loc: Loc) -> None:
        if len(text) > self.limits.max_string:
            self.error(loc, f"a string of {len(text)} characters; the limit is {self.limits.max_string}")

    def expr(self, expr: ast.Expr, scope: Scope, hint: Type | None = None) -> Type | None:
        if hint is FAILED_HINT and isinstance(expr, ast.Name) and self.resolve(expr.id, scope) is None:
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
            rule = ops.logic("not", [got]) if expr.op == "not" else ops.negative(got)
            return self.ruled(expr, [expr.operand], rule)
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

    def resolve(self, name: str, scope: Scope) -> tuple[str, Type | None] | None:
        """What a bare name means here, in the interpreter's order: column, let, table."""
        if scope.row is not None and (column := scope.row.column(name)) is not None:
            return "column", column.type
        if name in scope.lets:
            return "let", scope.lets[name]
        if name in self.tables:
            return "table", Type("table", table=name)
        return None

    def name(self, expr: ast.Name, scope: Scope, hint: Type | None) -> Type | None:
        meaning = self.resolve(expr.id, scope)
        member = hint is not None and hint.kind == "enum" and expr.id in hint.members
        if meaning is not None:
            if member:
                self.error(expr.loc, f"`{expr.id}` is both a {meaning[0]} and a member of {shown_type(hint)}; "
                                     f"rename the {meaning[0]}")
                return None
            return meaning[1]
        if member:
            return hint
        if hint is not None and hint.kind == "enum":
            self.error(expr.loc,
                       f"`{expr.id}` is not a member of {shown_type(hint)}{did_you_mean(expr.id, hint.members)}")
        elif expr.id in self.all_lets:
            self.error(expr.loc, f"`{expr.id}` is used before its `let` (line {self.all_lets[expr.id].line})")
        else:
            columns = [c.name for c in scope.row.columns] if scope.row else []
            candidates = [*columns, *scope.lets, *self.tables]
            self.error(expr.loc, f"unknown name `{expr.id}`{did_you_mean(expr.id, candidates)}")
        return None

    def param(self, expr: ast.Param, scope: Scope) -> Type | None:
        if scope.params is None:
            self.error(expr.loc, f"`${expr.id}` is a tool parameter; it has no value outside a tool")
            return None
        if expr.id not in scope.params:
            known = [f"${p}" for p in scope.params]
            self.error(expr.loc, f"unknown parameter `${expr.id}`{did_you_mean('$' + expr.id, known)}")
            return None
        return scope.params[expr.id].type

    def attr(self, expr: ast.Attr, scope: Scope) -> Type | None:
        base = self.expr(expr.base, scope)
        if base is None:
            return None
        if base.kind != "row":
            self.error(expr.loc, f"`.{expr.field}` reads a column of a row, not of {shown_type(base)}")
            return None
        table = self.tables[base.table]
        column = table.column(expr.field)
        if column is None:
            names = [c.name for c in table.columns]
            self.error(expr.loc, f"table `{table.name}` has no column `{expr.field}`{did_you_mean(expr.field, names)}")
            return None
        return column.type

    def index(self, expr: ast.Index, scope: Scope) -> Type | None:
        base = self.expr(expr.base, scope)
        self.key(expr.key, scope)
        if base is None:
            return None
        if base.kind != "table":
            self.error(expr.loc, f"only a table can be indexed with `[...]`, not {shown_type(base)}")
            return None
        if self.tables[base.table].key is None:
            self.error(expr.loc, f"table `{base.table}` has no `key` column to look rows up by")
            return None
        return Type("row", table=base.table)

    def ruled(self, expr: ast.Expr, operands: list[ast.Expr], result: Type | ops.Problem) -> Type | None:
        """A rule's result type, or its problem reported at the operand it names (else at the expression)."""
        if isinstance(result, Type):
            return result
        self.error((expr if result.operand is None else operands[result.operand]).loc, result.message)
        return None

    def binary(self, expr: ast.Binary, scope: Scope) -> Type | None:
        op = expr.op
        if op in ("and", "or"):
            left, right = self.expr(expr.left, scope), self.expr(expr.right, scope)
            ok = [self.ruled(e, [e], ops.logic(op, [t])) for e, t in ((expr.left, left), (expr.right, right)) if t]
            return T.BOOL if left and right and all(ok) else None
        if op == "in":
            return self.membership(expr, scope)
        if isinstance(expr.left, ast.Name) and self.resolve(expr.left.id, scope) is None and not scope.rewarding:
            right = self.expr(expr.right, scope)
            left = self.expr(expr.left, scope, right or FAILED_HINT)
        else:
            left = self.expr(expr.left, scope)
            right = self.expr(expr.right, scope, left or FAILED_HINT)
        if left is None or right is None:
            return None
        for side, got in ((expr.left, left), (expr.right, right)):
            if got.kind == "text":
                self.error(side.loc, "`text` can only be read by contains() or shown in a string")
                return None
        return self.ruled(expr, [expr.left, expr.right], ops.binary(op, left, right, order_dates=True))

    def membership(self, expr: ast.Binary, scope: Scope) -> Type | None:
        left = self.expr(expr.left, scope)
        if not isinstance(expr.right, ast.SetLiteral):
            self.expr(expr.right, scope)
            self.error(expr.right.loc, "`in` needs a set literal `{a, b}` on its right")
            return None
        ok = left is not None
        for item in expr.right.items:
            got = self.expr(item, scope, left or FAILED_HINT)
            if left is not None and got is not None and not T.comparable(left, got):
                self.error(item.loc, f"a set of {shown_type(left)} cannot hold {shown_type(got)}")
                ok = False
        return T.BOOL if ok else None

    def call(self, expr: ast.Call, scope: Scope) -> Type | None:
        func, args = expr.func, expr.args
        allowed = ("abs", "min", "max") if scope.rewarding else tuple(FUNCTIONS)
        if func not in allowed:
            where = " in `reward`" if scope.rewarding and func in FUNCTIONS else ""
            self.error(expr.loc, f"unknown function `{func}`{where}{did_you_mean(func, allowed)}")
            return None
        problem = ops.arity(func, len(args), *FUNCTIONS[func])
        if problem is not None:
            self.error(expr.loc, problem.message)
            return None
        if func == "count":
            if isinstance(args[0], ast.SetLiteral):
                for item in args[0].items:
                    self.scalar(item, scope, "a set item")
                return T.INT
            got = self.expr(args[0], scope)
            if got is not None and got.kind != "table":
                self.error(args[0].loc, f"count() takes a table or a set literal `{{...}}`, not {shown_type(got)}")
            return T.INT
        argument_types = [self.expr(arg, scope) for arg in args]
        if func in ops.SHARED_ARITY:
            if any(t is None for t in argument_types):
                return None
            return self.ruled(expr, list(args), ops.numeric_call(func, argument_types))  # type: ignore[arg-type]
        want = {"lower": ("text",), "contains": ("text", "text"), "add_days": ("text", "int")}[func]
        for arg, type_, kind in zip(args, argument_types, want):
            fits = ({"text": textual(type_) or type_.kind == "text", "int": type_ == T.INT}[kind]
                    if type_ is not None else True)
            if not fits:
                wanted = "a date" if func == "add_days" and kind == "text" else _WANTED[kind]
                self.error(arg.loc, f"{func}() takes {wanted}, not {shown_type(type_)}")
                return None
        if any(t is None for t in argument_types):
            return None
        if func in ("lower", "add_days"):
            return T.ENTITY
        return T.BOOL  # contains


FAILED_HINT = Type("enum", ("?",))  # a hint whose expression failed to type
_WANTED = {"text": "text", "int": "a whole number"}


def shown_type(type_: Type | None) -> str:
    """A type in a message; row and table types name their table in backticks already."""
    return "`None`" if type_ is None else ops.shown(type_)


def textual(type_: Type | None) -> bool:
    return type_ is not None and type_.kind in ("entity", "string")


def assignable(got: Type, want: Type) -> bool:
    if want.kind == "text" and (textual(got) or got.kind == "text"):
        return True
    return T.comparable(got, want) or (got.kind == "int" and want.kind == "float")


def written(ref: ast.TypeRef) -> str:
    return f"{ref.name}({', '.join(ref.args)})" if ref.args else ref.name
