"""Environment expressions compiled once into Python closures, so that a step costs a few calls, not a tree walk.

A compiled expression is `fn(row, frame) -> value`: `row` is the row a `where` reads (None elsewhere), `frame`
holds the database, the `let` values and the tool call's parameters. Values are str, int, float, bool, a row (a
dict) or None for missing. Logic and numbers are those of the rubric language, from the one definition in
`tracec.compiler.values`: Kleene logic (`false and unknown = false`), any comparison or arithmetic with a missing
operand is missing, an int result beyond 64 bits, a float result that is not finite and `x / 0` are missing, and an
int compares with a float exactly; a condition holds only when it is definitely true. A tool parameter that is no
value of the language (an int beyond 64 bits, a NaN) is missing. Names resolve as the checker resolved them: a
column of the row, else a `let`, else a table, else an enum member (a string).
Left out: regexes and transition facts, which the checker keeps out of environments.
"""

from __future__ import annotations

import datetime
import functools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracec.compiler import values as V
from tracec.dsl import ast
from tracec.trace_rl.envs.capability.database import Database

Fn = Callable[[dict | None, "Frame"], Any]


class Frame:
    """Everything an expression may read besides the current row."""

    __slots__ = ("db", "lets", "params")

    def __init__(self, db: Database, lets: dict[str, Any], params: dict[str, Any] | None = None):
        self.db, self.lets, self.params = db, lets, params or {}


@dataclass(frozen=True, kw_only=True)
class Names:
    """The names visible where an expression stands, to resolve bare names at compile time."""

    columns: frozenset[str] = frozenset()
    lets: frozenset[str] = frozenset()
    tables: frozenset[str] = frozenset()


def compile_expr(expr: ast.Expr, names: Names) -> Fn:
    return _Compiler(names).compile(expr)


def compile_template(template: ast.Template, names: Names) -> Callable[[dict | None, Frame], str]:
    parts = [part if isinstance(part, str) else compile_expr(part, names) for part in template.parts]
    if all(isinstance(p, str) for p in parts):
        text = "".join(parts)  # type: ignore[arg-type]
        return lambda row, fr: text

    def render(row: dict | None, fr: Frame) -> str:
        return "".join(p if isinstance(p, str) else show(p(row, fr)) for p in parts)

    return render


def show(value: Any) -> str:
    """A value as the agent reads it: floats with at most two decimals, booleans lower case, missing as `none`."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:.2f}".rstrip("0").rstrip(".")
        return "0" if text == "-0" else text
    return str(value)


def add_days(day: str, count: int) -> str | None:
    try:
        return (datetime.date.fromisoformat(day) + datetime.timedelta(days=count)).isoformat()
    except (ValueError, TypeError, OverflowError):
        return None


_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "+": V.add, "-": V.subtract, "*": V.multiply,
}


def _language_value(value: Any) -> Any:
    """A parameter as a value of the language: an int beyond 64 bits or a float that is not finite is missing."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if V.fits_int64(value) else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


class _Compiler:
    def __init__(self, names: Names):
        self.names = names

    def compile(self, expr: ast.Expr) -> Fn:
        method = getattr(self, type(expr).__name__.lower())
        return method(expr)

    def literal(self, expr: ast.Literal) -> Fn:
        value = expr.value
        return lambda row, fr: value

    def name(self, expr: ast.Name) -> Fn:
        name = expr.id
        if name in self.names.columns:
            return lambda row, fr: row[name]  # type: ignore[index]
        if name in self.names.lets:
            return lambda row, fr: fr.lets[name]
        if name in self.names.tables:
            return lambda row, fr: fr.db.rows[name]
        return lambda row, fr: name  # an enum member

    def param(self, expr: ast.Param) -> Fn:
        name = expr.id
        return lambda row, fr: _language_value(fr.params.get(name))

    def score(self, expr: ast.Score) -> Fn:
        kind = expr.kind
        return lambda row, fr: fr.lets[kind]

    def attr(self, expr: ast.Attr) -> Fn:
        base, field = self.compile(expr.base), expr.field

        def attr(row: dict | None, fr: Frame) -> Any:
            found = base(row, fr)
            return None if found is None else found.get(field)

        return attr

    def index(self, expr: ast.Index) -> Fn:
        assert isinstance(expr.base, ast.Name), "the checker lets only a table be indexed"
        table, key = expr.base.id, self.compile(expr.key)

        def index(row: dict | None, fr: Frame) -> Any:
            value = key(row, fr)
            return fr.db.index[table].get(value) if isinstance(value, str) else None

        return index

    def unary(self, expr: ast.Unary) -> Fn:
        operand = self.compile(expr.operand)
        if expr.op == "not":
            return lambda row, fr: V.kleene_not(operand(row, fr))
        return lambda row, fr: None if (v := operand(row, fr)) is None else V.negate(v)

    def binary(self, expr: ast.Binary) -> Fn:
        op = expr.op
        left, right = self.compile(expr.left), self.compile(expr.right)
        if op == "and":
            return _and(left, right)
        if op == "or":
            return _or(left, right)
        if op == "in":
            return self.membership(left, expr.right)
        if op == "/":
            return _divide(left, right)
        fn = _OPERATORS[op]
        if op == "==" and (fast := self.column_equals(expr)) is not None:
            return fast

        def binary(row: dict | None, fr: Frame) -> Any:
            a = left(row, fr)
            if a is None:
                return None
            b = right(row, fr)
            if b is None:
                return None
            try:
                return fn(a, b)
            except TypeError:  # an ordering of unlike values is unknown, never a crash
                return None

        return binary

    def column_equals(self, expr: ast.Binary) -> Fn | None:
        """`column == $param` and `column == constant`, the usual `where`, in one closure instead of three."""
        if not (isinstance(expr.left, ast.Name) and expr.left.id in self.names.columns):
            return None
        column, right = expr.left.id, expr.right
        if isinstance(right, ast.Param):
            param = right.id
            return lambda row, fr: (
                None if (a := row[column]) is None or (b := fr.params.get(param)) is None else a == b  # type: ignore[index]
            )
        if isinstance(right, ast.Literal) or (isinstance(right, ast.Name) and not self._resolves(right)):
            value = right.value if isinstance(right, ast.Literal) else right.id
            return lambda row, fr: None if (a := row[column]) is None else a == value  # type: ignore[index]
        return None

    def membership(self, left: Fn, items_expr: ast.Expr) -> Fn:
        assert isinstance(items_expr, ast.SetLiteral), "the checker allows only a set literal after `in`"
        if all(isinstance(i, (ast.Literal, ast.Name)) and not self._resolves(i) for i in items_expr.items):
            constant = frozenset(i.value if isinstance(i, ast.Literal) else i.id for i in items_expr.items)  # type: ignore[union-attr]
            return lambda row, fr: None if (v := left(row, fr)) is None else v in constant
        items = [self.compile(i) for i in items_expr.items]

        def membership(row: dict | None, fr: Frame) -> Any:
            value = left(row, fr)
            if value is None:
                return None
            found = [item(row, fr) for item in items]
            if value in found:
                return True
            return None if None in found else False

        return membership

    def _resolves(self, expr: ast.Expr) -> bool:
        names = self.names
        return isinstance(expr, ast.Name) and expr.id in names.columns | names.lets | names.tables

    def setliteral(self, expr: ast.SetLiteral) -> Fn:
        items = [self.compile(i) for i in expr.items]
        return lambda row, fr: {item(row, fr) for item in items}

    def call(self, expr: ast.Call) -> Fn:
        args = [self.compile(a) for a in expr.args]
        func = expr.func
        if func == "count":
            only = args[0]
            return lambda row, fr: len(only(row, fr))
        if func == "lower":
            return _strict(lambda s: s.lower(), args)
        if func == "abs":
            return _strict(V.absolute, args)
        if func in ("min", "max"):
            pair = V.minimum if func == "min" else V.maximum
            return _strict(lambda *xs: functools.reduce(pair, xs), args)
        if func == "contains":
            return _strict(lambda text, needle: str(needle) in text, args)
        assert func == "add_days", f"unchecked function {func}"
        return _strict(add_days, args)


def _strict(fn: Callable[..., Any], args: list[Fn]) -> Fn:
    """Call `fn` on the arguments' values; any missing argument makes the result missing."""

    def call(row: dict | None, fr: Frame) -> Any:
        values = [a(row, fr) for a in args]
        return None if None in values else fn(*values)

    return call


def _and(left: Fn, right: Fn) -> Fn:
    def conj(row: dict | None, fr: Frame) -> Any:
        a = left(row, fr)
        return False if a is False else V.kleene_and(a, right(row, fr))  # the right side only when it can matter

    return conj


def _or(left: Fn, right: Fn) -> Fn:
    def disj(row: dict | None, fr: Frame) -> Any:
        a = left(row, fr)
        return True if a is True else V.kleene_or(a, right(row, fr))

    return disj


def _divide(left: Fn, right: Fn) -> Fn:
    def divide(row: dict | None, fr: Frame) -> Any:
        a, b = left(row, fr), right(row, fr)
        return None if a is None or b is None else V.divide(a, b)

    return divide
