"""The `calculate` tool both tau2 domains share: + - * / and parentheses over decimal numbers, no eval.

Same contract as the benchmark's: only the characters `0-9 + - * / ( ) .` and spaces are allowed, and the
answer is the value rounded to two decimals, written as a Python float (`"4.0"`). Left out: exponent syntax,
`**`, `//` (the benchmark's character set already excludes letters, and `**`/`//` are not arithmetic a user
asks for).
"""

from __future__ import annotations

import re

from tracec.trace_rl.envs.tau2.toolkit import ToolError

_ALLOWED = set("0123456789+-*/(). ")
_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*|\.\d+)|(.))")
_MAX_DEPTH = 64


def calculate(expression: str) -> str:
    if not all(char in _ALLOWED for char in expression):
        raise ToolError("Invalid characters in expression")
    tokens = [number or op for number, op in _TOKEN.findall(expression) if number or op.strip()]
    parser = _Parser(tokens)
    value = parser.expression(0)
    if parser.pos != len(tokens):
        raise ToolError(f"Invalid expression: unexpected `{tokens[parser.pos]}`")
    return str(round(value, 2))


class _Parser:
    """expression := term (('+'|'-') term)*;  term := factor (('*'|'/') factor)*;
    factor := ('+'|'-') factor | number | '(' expression ')'.
    """

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0

    def expression(self, depth: int) -> float:
        value = self.term(depth)
        while self._peek() in ("+", "-"):
            op = self._take()
            rhs = self.term(depth)
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self, depth: int) -> float:
        value = self.factor(depth)
        while self._peek() in ("*", "/"):
            op = self._take()
            rhs = self.factor(depth)
            if op == "*":
                value *= rhs
            elif rhs == 0:
                raise ToolError("division by zero")
            else:
                value /= rhs
        return value

    def factor(self, depth: int) -> float:
        if depth > _MAX_DEPTH:
            raise ToolError("Invalid expression: too deeply nested")
        token = self._peek()
        if token is None:
            raise ToolError("Invalid expression: it ends too early")
        self.pos += 1
        if token in ("+", "-"):
            value = self.factor(depth + 1)
            return value if token == "+" else -value
        if token == "(":
            value = self.expression(depth + 1)
            if self._peek() != ")":
                raise ToolError("Invalid expression: missing `)`")
            self.pos += 1
            return value
        if token[0].isdigit() or token[0] == ".":
            return float(token)
        raise ToolError(f"Invalid expression: unexpected `{token}`")

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> str:
        token = self.tokens[self.pos]
        self.pos += 1
        return token
