"""Lowering: a checked rubric (syntax tree + types) to IR nodes.

Names become what the checker said they are (enum members become their index, bindings become `bind.NAME` columns),
entity literals become their interned id, `changed(f)` becomes `next.f != prev.f`, `x in {a, b}` becomes an `or` of
equalities and `min`/`max` of many become pairs, both as balanced trees. Text stays symbolic here (`contains` /
`matches` nodes over `text` leaves); the lifting pass turns it into derived bool columns.
"""

from __future__ import annotations

from collections.abc import Callable

from tracec.compiler.ir import Needle, Node, entity_id
from tracec.dsl import ast
from tracec.dsl import types as T
from tracec.dsl.check_expr import CheckedSchema, Typing
from tracec.dsl.types import Type

_COMPARE = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_ARITH = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
_AGGREGATE = {"any": "any", "all": "all", "count": "agg_count"}


def const(value: object, type_: Type) -> Node:
    return Node("const", (), type_, value)


def balanced(items: list[Node], pair: Callable[[Node, Node], Node]) -> Node:
    """Items joined by an associative op as a balanced tree, so that a long set literal or a `min` of many does not
    nest as deep as it is long (every pass recurses over the IR). Kleene `or` is associative, and so are `min` and
    `max`: the value is the same, and the rounding of an int to a float is monotonic, so where the result is a float
    it is the same float."""
    while len(items) > 1:
        items = [pair(items[i], items[i + 1]) if i + 1 < len(items) else items[i] for i in range(0, len(items), 2)]
    return items[0]


class Lowerer:
    """Lowers the expressions of one rubric or capability; `typing` comes from the checker."""

    def __init__(self, schema: CheckedSchema, typing: Typing, bind_types: dict[str, Type]):
        self.schema, self.typing, self.bind_types = schema, typing, bind_types

    def expr(self, expr: ast.Expr) -> Node:
        node = self._expr(expr)
        return Node(node.op, node.args, node.type, node.value, loc=expr.loc)

    def _expr(self, expr: ast.Expr) -> Node:
        type_ = self.typing.type_of(expr)
        if isinstance(expr, ast.Literal):
            if isinstance(expr.value, str):
                return const(entity_id(expr.value), T.ENTITY)
            return const(expr.value, type_)
        if isinstance(expr, ast.Name):
            if id(expr) in self.typing.enum_members:
                return const(type_.members.index(expr.id), type_)
            if expr.id == "instruction":
                return Node("text", (), T.TEXT, "instruction")
            return Node("load", (), type_, f"bind.{expr.id}")
        if isinstance(expr, ast.Fact):
            return self.fact(expr.side, expr.field, type_)
        if isinstance(expr, ast.Unary):
            return Node("not" if expr.op == "not" else "neg", (self.expr(expr.operand),), type_)
        if isinstance(expr, ast.Binary):
            return self.binary(expr, type_)
        if isinstance(expr, ast.Call):
            return self.call(expr, type_)
        raise AssertionError(f"the checker let through {type(expr).__name__}")

    def fact(self, side: str, field: str, type_: Type) -> Node:
        column = f"{side}.{field}"
        if type_.kind == "text":
            return Node("text", (), type_, column)
        return Node("load_set" if type_.kind == "set" else "load", (), type_, column)

    def binary(self, expr: ast.Binary, type_: Type) -> Node:
        if expr.op == "in":
            if isinstance(expr.right, ast.SetLiteral):
                left = self.expr(expr.left)
                tests = [Node("eq", (left, self.expr(item)), T.BOOL) for item in expr.right.items]
                return balanced(tests, lambda a, b: Node("or", (a, b), T.BOOL)) if tests else const(False, T.BOOL)
            return Node("has", (self.expr(expr.left), self.expr(expr.right)), T.BOOL)
        op = {"and": "and", "or": "or", **_COMPARE, **_ARITH}[expr.op]
        return Node(op, (self.expr(expr.left), self.expr(expr.right)), type_)

    def call(self, expr: ast.Call, type_: Type) -> Node:
        func, args = expr.func, expr.args
        if func == "changed":
            field = args[0].id  # type: ignore[union-attr]
            field_type = self.typing.type_of(args[0])
            before, after = self.fact("prev", field, field_type), self.fact("next", field, field_type)
            return Node("ne", (after, before), T.BOOL)
        if func == "contains":
            return Node("contains", (self.expr(args[0]),), T.BOOL, self.needle(args[1]))
        if func == "matches":
            regex = args[1]
            assert isinstance(regex, ast.Regex)
            return Node("matches", (self.expr(args[0]),), T.BOOL, (regex.pattern, regex.ignore_case))
        if func in _AGGREGATE and self.typing.type_of(args[0]).kind == "bool":
            return Node(_AGGREGATE[func], (self.expr(args[0]),), type_)
        if func in ("min", "max"):
            lowered = [self.expr(a) for a in args]
            return balanced(lowered, lambda a, b: Node(func, (a, b), T.FLOAT if T.FLOAT in (a.type, b.type) else T.INT))
        if func in ("count", "abs"):
            return Node(func, (self.expr(args[0]),), type_)
        raise AssertionError(f"the checker let through a call to {func}")

    def needle(self, expr: ast.Expr) -> Needle:
        if isinstance(expr, ast.Literal):
            return Needle("const", str(expr.value))
        if isinstance(expr, ast.Name):
            return Needle("bind", expr.id)
        assert isinstance(expr, ast.Fact)
        return Needle("fact", f"{expr.side}.{expr.field}")

    def bind_expr(self, expr: ast.Expr) -> Node:
        """A binding's value expression, over the binding ops of `tracec.compiler.ir`."""
        type_ = self.typing.type_of(expr)
        if isinstance(expr, ast.Literal):
            return const(expr.value, type_)
        if isinstance(expr, ast.Name):
            return Node("instruction", (), T.TEXT)
        if isinstance(expr, ast.Unary):  # `-` and a number literal: the checker allows no other
            assert isinstance(expr.operand, ast.Literal) and not isinstance(expr.operand.value, (bool, str))
            return const(-expr.operand.value, type_)
        assert isinstance(expr, ast.Call), "the checker allows only literals, instruction, match and lower here"
        if expr.func == "lower":
            return Node("lower", (self.bind_expr(expr.args[0]),), type_)
        regex, group = expr.args[1], expr.args[2]
        assert isinstance(regex, ast.Regex) and isinstance(group, ast.Literal)
        return Node("match", (self.bind_expr(expr.args[0]),), T.STRING, (regex.pattern, regex.ignore_case, group.value))
