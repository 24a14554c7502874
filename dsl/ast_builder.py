"""Lark tree to syntax tree: `AstBuilder`, the transformer that turns what `tracec.dsl.syntax.parse_tree` returns into
`tracec.dsl.ast` nodes, each with its location.

String escapes (`\\"`, `\\\\`) and template interpolations (`{expr}`, `{{`, `}}`) are decoded here, and integer and
float literals checked against 64 bits, so a bad one is reported where it is written. These errors are collected in
`errors`, not raised: `tracec.dsl.parse` raises them all at once, after `finish`.
"""

from __future__ import annotations

import math
from typing import Any

from lark import Token, Transformer, v_args
from tracec.dsl import ast
from tracec.dsl.errors import Loc, ParseError, Source
from tracec.dsl.syntax import END_OF_FILE, parse_tree


def _position(token: Token) -> tuple[int, int]:
    """Line and column of a lexed token (Lark types them as optional; its lexer always sets them)."""
    assert token.line is not None and token.column is not None, token
    return token.line, token.column


def _loc(meta: Any) -> Loc:
    if isinstance(meta, Token):
        line, column = _position(meta)
        assert meta.end_line is not None and meta.end_column is not None, meta
        return Loc(line, column, meta.end_line, meta.end_column)
    if getattr(meta, "empty", True):
        return Loc(0, 0, 0, 0)
    return Loc(meta.line, meta.column, meta.end_line, meta.end_column)


@v_args(meta=True)
class AstBuilder(Transformer):
    """Lark tree to AST. Escapes and templates are decoded here; their errors are collected, not raised."""

    def __init__(self, source: Source):
        super().__init__(visit_tokens=False)
        self.source = source
        self.errors: list = []
        # 2^63 literals, kept whole only so that `-9223372036854775808` can be the int64 minimum; by id.
        self.unsigned_min: dict[int, ast.Literal] = {}

    def finish(self) -> None:
        """Report the 2^63 literals that no unary minus took."""
        for literal in self.unsigned_min.values():
            self.errors.append(self.source.diagnostic(literal.loc,
                                                      "integer `9223372036854775808` does not fit in 64 bits"))
        self.unsigned_min.clear()

    # ------------------------------------------------------------------ strings
    def _string(self, token: Token) -> str:
        return self._decode(token, 1, len(token.value) - 1, braces=False)

    def _decode(self, token: Token, start: int, end: int, braces: bool) -> str:
        """The text of `token.value[start:end]` with escapes (and, in templates, doubled braces) decoded; a bad
        escape is reported at its own column."""
        raw, out, i = token.value, [], start
        line, column = _position(token)
        while i < end:
            char = raw[i]
            if char == "\\":
                escaped = raw[i + 1]
                if escaped in '"\\':
                    out.append(escaped)
                else:
                    col = column + i
                    self.errors.append(
                        self.source.diagnostic(
                            Loc(line, col, line, col + 2),
                            f"unknown escape `\\{escaped}` (strings know only `\\\"` and `\\\\`)",
                        )
                    )
                i += 2
                continue
            out.append(char)
            i += 2 if braces and raw.startswith(char * 2, i) and char in "{}" else 1
        return "".join(out)

    def _template(self, token: Token) -> ast.Template:
        """Split a string into text and `{expr}` parts; `{{` and `}}` stand for braces."""
        raw = token.value
        line, column = _position(token)
        parts: list[str | ast.Expr] = []
        text_start, i, end = 1, 1, len(raw) - 1  # the text run being read starts at text_start
        while i < end:
            char = raw[i]
            if raw.startswith("{{", i) or raw.startswith("}}", i) or char == "\\":
                i += 2
            elif char == "{":
                close = raw.find("}", i, end)
                if close < 0:
                    message = "unclosed `{` in string (write `{{` for a brace)"
                    self.errors.append(self.source.diagnostic(Loc.point(line, column + i), message))
                    end = i
                    break
                if i > text_start:
                    parts.append(self._decode(token, text_start, i, braces=True))
                parts.append(self._fragment(raw[i + 1 : close], line, column + i + 1))
                i = text_start = close + 1
            elif char == "}":
                message = "unmatched `}` in string (write `}}` for a brace)"
                self.errors.append(self.source.diagnostic(Loc.point(line, column + i), message))
                i += 1
            else:
                i += 1
        if end > text_start:
            parts.append(self._decode(token, text_start, end, braces=True))
        return ast.Template(tuple(parts), loc=_loc(token))

    def _fragment(self, text: str, line: int, column: int) -> ast.Expr:
        # Padding puts the fragment where it stands in the file, so its locations need no shifting.
        padded = "\n" * (line - 1) + " " * (column - 1) + text
        try:
            tree = parse_tree(padded, "expr", Source(self.source.path, padded))
        except ParseError as error:
            for d in error.diagnostics:
                loc, message = d.loc, d.message
                if message.startswith(END_OF_FILE):  # the fragment ends at its `}` (Lark: 1:1, or its last token)
                    loc, message = Loc.point(line, column + len(text)), "unexpected `}`" + message[len(END_OF_FILE):]
                self.errors.append(self.source.diagnostic(loc, message))
            return ast.Literal("", loc=Loc.point(line, column))
        return self.transform(tree)

    # ------------------------------------------------------------------ numbers
    def _int(self, token: Token, negative: bool = False) -> int:
        """An integer literal; one outside 64 bits is reported here, so no later stage meets it."""
        digits = token.value.lstrip("0") or "0"
        # Count digits first: int() refuses strings of more than 4300 digits.
        if len(digits) > 19 or int(digits) > 2**63 - (0 if negative else 1):
            shown = token.value if len(token.value) <= 24 else token.value[:20] + "..."
            self.errors.append(self.source.diagnostic(_loc(token), f"integer `{shown}` does not fit in 64 bits"))
            return 0
        return int(digits)

    def _float(self, token: Token) -> float:
        value = float(token.value)
        if math.isinf(value):
            shown = token.value if len(token.value) <= 24 else token.value[:20] + "..."
            self.errors.append(self.source.diagnostic(_loc(token), f"number `{shown}` is too large for a 64-bit float"))
            return 0.0
        return value

    # ------------------------------------------------------------------ types
    def type_plain(self, meta, children):
        return ast.TypeRef(str(children[0]), (), loc=_loc(meta))

    def type_args(self, meta, children):
        return ast.TypeRef(str(children[0]), tuple(str(c) for c in children[1:]), loc=_loc(meta))

    def type_set(self, meta, children):
        return ast.TypeRef("set", (str(children[0]),), loc=_loc(meta))

    # ------------------------------------------------------------------ declarations
    def start(self, meta, children):
        return children

    def field(self, meta, children):
        return ast.FieldDecl(str(children[0]), children[1], loc=_loc(children[0]))

    def state_fields(self, meta, children):
        return tuple(children)

    action_fields = state_fields

    def schema(self, meta, children):
        name, state, action = children
        return ast.Schema(str(name), state, action, loc=_loc(name))

    def rubric(self, meta, children):
        name, schema, *items = children
        return ast.Rubric(str(name), str(schema), tuple(items), loc=_loc(name), schema_loc=_loc(schema))

    def bind(self, meta, children):
        name, type_, value = children
        return ast.Bind(str(name), type_, value, loc=_loc(name))

    def category(self, meta, children):
        return children[0]

    def operator(self, meta, children):
        category, name, description, expr = children
        return ast.Operator(str(category), str(name), self._string(description), expr, loc=_loc(name))

    def budget_entry(self, meta, children):
        category, value = children
        return ast.BudgetEntry(str(category), float(value.value), loc=_loc(category))

    def budget(self, meta, children):
        return ast.Budget(tuple(children), loc=_loc(meta))

    def lambda_(self, meta, children):
        return ast.Setting("lambda", float(children[0].value), loc=_loc(meta))

    def gamma_(self, meta, children):
        return ast.Setting("gamma", float(children[0].value), loc=_loc(meta))

    def step_scale(self, meta, children):
        return ast.StepScale(str(children[0]), loc=_loc(children[0]))

    def context(self, meta, children):
        return ast.Context(tuple(children), loc=_loc(meta))

    def capability(self, meta, children):
        name, description, schema, needed, present = children
        return ast.Capability(
            str(name), self._string(description), str(schema), needed, present, loc=_loc(name), schema_loc=_loc(schema)
        )

    def environment(self, meta, children):
        name, description, *items = children
        return ast.Environment(str(name), self._string(description), tuple(items), loc=_loc(name))

    def env_capability(self, meta, children):
        return ast.EnvCapability(str(children[0]), loc=_loc(children[0]))

    def table(self, meta, children):
        name, *columns, low, high, where = children
        return ast.Table(str(name), tuple(columns), self._int(low), self._int(high), where, loc=_loc(name))

    def column(self, meta, children):
        return ast.Column(str(children[0]), children[1], loc=_loc(children[0]))

    def gen_plain(self, meta, children):
        return ast.Generator(str(children[0]), (), loc=_loc(meta))

    def gen_range(self, meta, children):
        kind, low, high = children
        return ast.Generator(str(kind), (low.value, high.value), loc=_loc(meta))

    def gen_enum(self, meta, children):
        return ast.Generator(str(children[0]), tuple(str(c) for c in children[1:]), loc=_loc(meta))

    def gen_ref(self, meta, children):
        return ast.Generator(str(children[0]), (str(children[1]),), loc=_loc(meta))

    def let(self, meta, children):
        return ast.Let(str(children[0]), children[1], loc=_loc(children[0]))

    def pick(self, meta, children):
        return ast.Pick(str(children[0]), children[1], loc=_loc(meta))

    def task(self, meta, children):
        return ast.Task(self._template(children[0]), loc=_loc(meta))

    def hint(self, meta, children):
        return ast.Hint(self._string(children[0]), loc=_loc(meta))

    def tool(self, meta, children):
        name, *params, body = children
        return ast.Tool(str(name), tuple(p for p in params if p is not None), body, loc=_loc(name))

    def param(self, meta, children):
        return ast.ToolParam(str(children[0]), children[1], loc=_loc(children[0]))

    def query(self, meta, children):
        return ast.Query(str(children[0]), children[1], loc=_loc(meta))

    def mutation(self, meta, children):
        requires = tuple(c for c in children if isinstance(c, ast.Require))
        assigns = tuple(c for c in children if isinstance(c, ast.Assign))
        return ast.Mutation(requires, assigns, loc=_loc(meta))

    def require(self, meta, children):
        return ast.Require(children[0], self._template(children[1]), loc=_loc(meta))

    def assign(self, meta, children):
        table, key, column, value = children
        return ast.Assign(str(table), key, str(column), value, loc=_loc(meta))

    def solution(self, meta, children):
        return ast.Solution(tuple(children), loc=_loc(meta))

    def solution_call(self, meta, children):
        name, *args = children
        return ast.SolutionCall(str(name), tuple(a for a in args if a is not None), loc=_loc(name))

    def report(self, meta, children):
        return ast.Report(tuple(children), loc=_loc(meta))

    def reward(self, meta, children):
        return ast.Reward(children[0], loc=_loc(meta))

    # ------------------------------------------------------------------ expressions
    def or_(self, meta, children):
        return ast.Binary("or", children[0], children[1], loc=_loc(meta))

    def and_(self, meta, children):
        return ast.Binary("and", children[0], children[1], loc=_loc(meta))

    def not_(self, meta, children):
        return ast.Unary("not", children[0], loc=_loc(meta))

    def compare(self, meta, children):
        left, op, right = children
        return ast.Binary(str(op.children[0]), left, right, loc=_loc(meta))

    def in_(self, meta, children):
        return ast.Binary("in", children[0], children[1], loc=_loc(meta))

    def arith(self, meta, children):
        left, op, right = children
        return ast.Binary(str(op.children[0]), left, right, loc=_loc(meta))

    def neg(self, meta, children):
        operand = children[0]
        if self.unsigned_min.pop(id(operand), None) is not None:
            return ast.Literal(-(2**63), loc=_loc(meta))  # the one int64 that is written as a negation
        return ast.Unary("-", operand, loc=_loc(meta))

    def attr(self, meta, children):
        return ast.Attr(children[0], str(children[1]), loc=_loc(meta))

    def index(self, meta, children):
        return ast.Index(children[0], children[1], loc=_loc(meta))

    def name(self, meta, children):
        return ast.Name(str(children[0]), loc=_loc(children[0]))

    def param_ref(self, meta, children):
        return ast.Param(str(children[0])[1:], loc=_loc(children[0]))

    def fact(self, meta, children):
        side, field_ = children
        return ast.Fact(str(side.children[0]), str(field_), loc=_loc(meta))

    def call(self, meta, children):
        name, *args = children
        return ast.Call(str(name), tuple(a for a in args if a is not None), loc=_loc(meta))

    def set_literal(self, meta, children):
        return ast.SetLiteral(tuple(c for c in children if c is not None), loc=_loc(meta))

    def string(self, meta, children):
        return ast.Literal(self._string(children[0]), loc=_loc(children[0]))

    def regex(self, meta, children):
        token = children[0]
        text = str(token)
        ignore_case = text.endswith("i")
        body = text[1:-2] if ignore_case else text[1:-1]
        return ast.Regex(body, ignore_case, loc=_loc(token))

    def int_(self, meta, children):
        token = children[0]
        if token.value.lstrip("0") == str(2**63):
            literal = ast.Literal(2**63, loc=_loc(token))
            self.unsigned_min[id(literal)] = literal
            return literal
        return ast.Literal(self._int(token), loc=_loc(token))

    def float_(self, meta, children):
        return ast.Literal(self._float(children[0]), loc=_loc(children[0]))

    def neg_int(self, meta, children):
        return ast.Literal(-self._int(children[0], negative=True), loc=_loc(meta))

    def neg_float(self, meta, children):
        return ast.Literal(-self._float(children[0]), loc=_loc(meta))

    def true(self, meta, children):
        return ast.Literal(True, loc=_loc(meta))

    def false(self, meta, children):
        return ast.Literal(False, loc=_loc(meta))

    def state_score(self, meta, children):
        return ast.Score("state", loc=_loc(meta))

    def report_score(self, meta, children):
        return ast.Score("report", loc=_loc(meta))
