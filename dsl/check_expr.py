"""Types the expressions of rubrics and capabilities: resolves names against a schema and the bindings, checks
operand types, and records on a `Typing` what the compiler needs (each node's type, which bare names are enum members).

One `ExprChecker` types the expressions of one place: a binding (`bind` mode: the instruction only), a transition
(`transition` mode: facts of s_t, a_t, s_t+1) or an episode (`episode` mode, capability blocks: facts only inside an
aggregate). Errors go to the `report` callback, so the declaration checker collects every error of a file at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tracec.dsl import ast
from tracec.dsl import operators as ops
from tracec.dsl import types as T
from tracec.dsl.errors import Loc, did_you_mean
from tracec.dsl.regex import RegexSyntaxError, compile_regex
from tracec.dsl.types import Type


@dataclass(frozen=True)
class CheckedSchema:
    name: str
    state: dict[str, Type]
    action: dict[str, Type]

    def side(self, side: str) -> dict[str, Type]:
        return self.action if side == "act" else self.state


@dataclass
class Typing:
    """Per-node facts the checker found: types, and which bare names are enum members."""

    types: dict[int, Type] = field(default_factory=dict)
    enum_members: set[int] = field(default_factory=set)

    def type_of(self, node: Any) -> Type:
        return self.types[id(node)]



class ExprChecker:
    """Types expressions in one place: a binding (`bind`), a transition (`transition`) or an episode (`episode`,
    the capability blocks, where facts are read only inside an aggregate)."""

    def __init__(self, report: Callable[[Loc, str], None], schema: CheckedSchema, binds: dict[str, Type],
                 typing: Typing, mode: str):
        self.error, self.schema, self.binds, self.typing, self.mode = report, schema, binds, typing, mode
        self.in_aggregate = False

    def expr(self, expr: ast.Expr, expected: Type | None = None) -> Type | None:
        got = self._expr(expr, expected)
        if got is not None:
            self.typing.types[id(expr)] = got
        return got

    def _expr(self, expr: ast.Expr, expected: Type | None) -> Type | None:
        if isinstance(expr, ast.Literal):
            value = expr.value
            if isinstance(value, bool):
                return T.BOOL
            if isinstance(value, int):
                return T.INT
            return T.FLOAT if isinstance(value, float) else T.STRING
        if isinstance(expr, ast.Regex):
            try:
                compile_regex(expr.pattern, expr.ignore_case)
            except RegexSyntaxError as error:
                self.error(expr.loc, f"bad regex /{expr.pattern}/: {error}")
            return T.REGEX
        if isinstance(expr, ast.Name):
            return self.name(expr, expected)
        if isinstance(expr, ast.Fact):
            return self.fact(expr)
        if isinstance(expr, ast.Unary):
            return self.unary(expr)
        if isinstance(expr, ast.Binary):
            return self.binary(expr)
        if isinstance(expr, ast.Call):
            return self.call(expr)
        if isinstance(expr, ast.SetLiteral):
            self.error(expr.loc, "a set literal `{...}` can only follow `in`")
            return None
        if isinstance(expr, ast.Score):
            self.error(expr.loc, f"`{expr.kind}` is a score of an environment's `reward`; it means nothing in a rubric")
            return None
        what = {ast.Param: "a tool parameter", ast.Attr: "a row column", ast.Index: "a table lookup"}
        self.error(expr.loc, f"{what.get(type(expr), 'this')} belongs in an environment, not in a rubric")
        return None

    # ------------------------------------------------------------------ leaves
    def name(self, expr: ast.Name, expected: Type | None) -> Type | None:
        member = expected is not None and expected.kind == "enum" and expr.id in expected.members
        if expr.id in self.binds:
            if member:
                self.error(expr.loc, f"`{expr.id}` is both a binding and a member of `{expected}`; rename the binding")
                return None
            if self.mode == "bind":
                self.error(expr.loc, "a binding is computed from the instruction only, not from other bindings")
                return None
            return self.binds[expr.id]
        if member:
            self.typing.enum_members.add(id(expr))
            return expected
        if expr.id == "instruction":
            return T.TEXT
        if expected is not None and expected.kind == "enum":
            self.error(expr.loc,
                       f"`{expr.id}` is not a member of `{expected}`{did_you_mean(expr.id, expected.members)}")
            return None
        if self.mode == "bind":
            self.error(expr.loc, f"unknown name `{expr.id}`; a binding reads only `instruction`")
            return None
        hint = did_you_mean(expr.id, [*self.binds, "instruction"])
        if expected is not None and expected.kind == "entity" and not hint.startswith("; did you mean"):
            hint = f'; an entity literal is a string: write "{expr.id}"'
        elif not hint.startswith("; did you mean"):
            # With nothing close, list the bindings, or say what a bare name can be when there are none.
            hint = did_you_mean(expr.id, list(self.binds)) if self.binds else (
                "; a bare name is a binding (declared with `bind`) or a member of the enum it is compared with"
            )
        self.error(expr.loc, f"unknown name `{expr.id}`{hint}")
        return None

    def fact(self, expr: ast.Fact) -> Type | None:
        if self.mode == "bind":
            self.error(expr.loc, "a binding is computed once per episode, from the instruction; it cannot read facts")
            return None
        if self.mode == "episode" and not self.in_aggregate:
            self.error(expr.loc, "a capability reads facts only inside any(...), all(...) or count(...)")
            return None
        fields = self.schema.side(expr.side)
        if expr.field not in fields:
            part = "action" if expr.side == "act" else "state"
            self.error(
                expr.loc,
                f"unknown field `{expr.field}` of the {part} of schema `{self.schema.name}`"
                f"{did_you_mean(expr.field, fields)}",
            )
            return None
        return fields[expr.field]

    # ------------------------------------------------------------------ operators
    def unary(self, expr: ast.Unary) -> Type | None:
        got = self.expr(expr.operand)
        if got is None:
            return None
        if got.kind == "text":
            return self.want(expr.operand, got, "bool" if expr.op == "not" else "number", "")
        return self.ruled(expr, [expr.operand], ops.logic("not", [got]) if expr.op == "not" else ops.negative(got))

    def ruled(self, expr: ast.Expr, operands: list[ast.Expr], result: Type | ops.Problem) -> Type | None:
        """A rule's result type, or its problem reported at the operand it names (else at the expression)."""
        if isinstance(result, Type):
            return result
        where = expr if result.operand is None else operands[result.operand]
        self.error(where.loc, result.message)
        return None

    def want(self, expr: ast.Expr, got: Type, kind: str, where: str) -> Type | None:
        if got.kind == kind:
            return got
        if got.kind == "text":
            self.error(expr.loc, "`text` can only be read by contains() or matches()")
        else:
            self.error(expr.loc, f"{where} needs a {kind}, not `{got}`")
        return None

    def binary(self, expr: ast.Binary) -> Type | None:
        op = expr.op
        if op in ("and", "or"):
            left, right = self.expr(expr.left), self.expr(expr.right)
            typed = [(e, t) for e, t in ((expr.left, left), (expr.right, right)) if t is not None]
            ok = [self.ruled(e, [e], ops.logic(op, [t])) if t.kind != "text" else self.want(e, t, "bool", "")
                  for e, t in typed]
            return T.BOOL if left and right and all(ok) else None
        if op == "in":
            return self.membership(expr)
        left, right = self.operands(expr)
        if left is None or right is None:
            return None
        for side, got in ((expr.left, left), (expr.right, right)):
            if got.kind == "text":
                self.error(side.loc, "`text` can only be read by contains() or matches()")
                return None
        return self.ruled(expr, [expr.left, expr.right], ops.binary(op, left, right))

    def operands(self, expr: ast.Binary) -> tuple[Type | None, Type | None]:
        """Type both sides; a bare name that is no binding takes its enum from the other side. When that side has
        an error already, the name is left alone: reporting it as unknown too would only repeat the first error."""
        if isinstance(expr.left, ast.Name) and expr.left.id not in self.binds:
            right = self.expr(expr.right)
            return (self.expr(expr.left, right), right) if right is not None else (None, None)
        left = self.expr(expr.left)
        if left is None and isinstance(expr.right, ast.Name) and expr.right.id not in self.binds:
            return None, None
        return left, self.expr(expr.right, left)

    def membership(self, expr: ast.Binary) -> Type | None:
        if isinstance(expr.right, ast.SetLiteral):
            left = self.expr(expr.left)
            if left is None:
                return None
            if left.kind == "text":
                self.error(expr.left.loc, "`text` can only be read by contains() or matches()")
                return None
            ok = True
            for item in expr.right.items:
                got = self.expr(item, left)
                if got is not None and not T.comparable(left, got):
                    self.error(item.loc, f"a set of `{left}` cannot hold `{got}`")
                    ok = False
            return T.BOOL if ok else None
        left, right = self.expr(expr.left), self.expr(expr.right)
        if left is None or right is None:
            return None
        if right.kind != "set":
            self.error(expr.right.loc, f"`in` needs a set on its right, not `{right}`")
            return None
        if left.kind not in ("entity", "string"):
            self.error(expr.left.loc, f"sets hold entities; `{left}` cannot be in one")
            return None
        return T.BOOL

    # ------------------------------------------------------------------ calls
    def call(self, expr: ast.Call) -> Type | None:
        handler = getattr(self, f"call_{expr.func}", None)
        if handler is None:
            known = [name[5:] for name in dir(self) if name.startswith("call_") and name != "call_"]
            self.error(expr.loc, f"unknown function `{expr.func}`{did_you_mean(expr.func, known)}")
            return None
        return handler(expr)

    def arity(self, expr: ast.Call, fewest: int, most: int | None = -1) -> bool:
        """Whether the call has `fewest` to `most` arguments (exactly `fewest` by default); else an error."""
        problem = ops.arity(expr.func, len(expr.args), fewest, fewest if most == -1 else most)
        if problem is not None:
            self.error(expr.loc, problem.message)
        return problem is None

    def only_in_bind(self, expr: ast.Call) -> bool:
        if self.mode != "bind":
            self.error(expr.loc, f"`{expr.func}` computes a binding; use it in a `bind` line")
            return False
        return True

    def call_match(self, expr: ast.Call) -> Type | None:
        if not (self.only_in_bind(expr) and self.arity(expr, 3)):
            return None
        text, regex, group = expr.args
        got = [self.expr(text), self.expr(regex), self.expr(group)]
        if got[0] is not None and got[0].kind not in ("text", "string"):
            self.error(text.loc, f"match() reads text, not `{got[0]}`")
        if got[1] is not None and got[1].kind != "regex":
            self.error(regex.loc, "match() needs a regex literal /.../ as its second argument")
        if not (isinstance(group, ast.Literal) and type(group.value) is int and group.value >= 0):
            self.error(group.loc, "match() needs a group number (an integer >= 0) as its third argument")
        elif isinstance(regex, ast.Regex) and got[1] is not None:
            groups = _group_count(regex.pattern)
            if groups is not None and group.value > groups:
                self.error(group.loc, f"the regex has {groups} group{'s' if groups != 1 else ''}; "
                                      f"there is no group {group.value}")
        return T.STRING

    def call_lower(self, expr: ast.Call) -> Type | None:
        if not (self.only_in_bind(expr) and self.arity(expr, 1)):
            return None
        got = self.expr(expr.args[0])
        if got is not None and got.kind not in ("text", "string"):
            self.error(expr.args[0].loc, f"lower() takes text, not `{got}`")
            return None
        return got

    def call_changed(self, expr: ast.Call) -> Type | None:
        if not self.arity(expr, 1):
            return None
        arg = expr.args[0]
        if not isinstance(arg, ast.Name):
            self.error(arg.loc, "changed() takes the name of a state field, as in `changed(location)`")
            return None
        got = self.fact(ast.Fact("next", arg.id, loc=arg.loc))
        if got is None:
            return None
        if got.kind == "text":
            self.error(arg.loc,
                       f"changed() cannot read the text field `{arg.id}`; test it with contains() or matches()")
            return None
        self.typing.types[id(arg)] = got
        return T.BOOL

    def call_contains(self, expr: ast.Call) -> Type | None:
        if not self.arity(expr, 2):
            return None
        text, needle = expr.args
        if not self.text_source(expr.func, text):
            return None
        got = self.expr(needle)
        if got is None:
            return None
        simple = isinstance(needle, (ast.Literal, ast.Name, ast.Fact))
        if got.kind not in ("string", "entity") or not simple:
            self.error(needle.loc, "contains() looks for a string literal, an entity binding or an entity fact")
            return None
        return T.BOOL

    def call_matches(self, expr: ast.Call) -> Type | None:
        if not self.arity(expr, 2):
            return None
        text, regex = expr.args
        ok = self.text_source(expr.func, text)
        got = self.expr(regex)
        if got is not None and got.kind != "regex":
            self.error(regex.loc, "matches() needs a regex literal /.../ as its second argument")
            return None
        return T.BOOL if ok and got is not None else None

    def text_source(self, func: str, text: ast.Expr) -> bool:
        got = self.expr(text)
        if got is None:
            return False
        if got.kind != "text" or not isinstance(text, (ast.Fact, ast.Name)):
            self.error(text.loc,
                       f"{func}() reads a text fact (like `next.feedback`) as its first argument, not `{got}`")
            return False
        return True

    def call_count(self, expr: ast.Call) -> Type | None:
        if not self.arity(expr, 1):
            return None
        if self.mode == "episode" and not self.in_aggregate:
            return self.aggregate(expr)
        got = self.expr(expr.args[0])
        if got is not None and got.kind != "set":
            self.error(expr.args[0].loc, f"count() takes a set, not `{got}`")
            return None
        return T.INT if got is not None else None

    def call_any(self, expr: ast.Call) -> Type | None:
        return self.aggregate(expr)

    def call_all(self, expr: ast.Call) -> Type | None:
        return self.aggregate(expr)

    def aggregate(self, expr: ast.Call) -> Type | None:
        if self.mode != "episode" or self.in_aggregate:
            where = "inside another aggregate" if self.in_aggregate else "outside a capability"
            self.error(expr.loc, f"`{expr.func}(...)` aggregates over an episode; it cannot stand {where}")
            return None
        if not self.arity(expr, 1):
            return None
        self.in_aggregate = True
        got = self.expr(expr.args[0])
        self.in_aggregate = False
        if got is not None and got.kind != "bool":
            self.error(expr.args[0].loc, f"`{expr.func}(...)` aggregates a bool per transition, not `{got}`")
            return None
        return (T.INT if expr.func == "count" else T.BOOL) if got is not None else None

    def call_abs(self, expr: ast.Call) -> Type | None:
        if not self.arity(expr, *ops.SHARED_ARITY[expr.func]):
            return None
        got = [self.expr(arg) for arg in expr.args]
        for arg, t in zip(expr.args, got):
            if t is not None and t.kind == "text":
                self.error(arg.loc, "`text` can only be read by contains() or matches()")
                return None
        if any(t is None for t in got):
            return None
        return self.ruled(expr, list(expr.args), ops.numeric_call(expr.func, got))  # type: ignore[arg-type]

    call_min = call_max = call_abs


def _group_count(pattern: str) -> int | None:
    try:
        return int(compile_regex(pattern).groups)
    except RegexSyntaxError:
        return None
