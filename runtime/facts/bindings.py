"""Bindings: what a rubric's `bind NAME = EXPR` gives for one episode, from its instruction.

A binding expression is made of the ops `instruction`, `const`, `match` (an RE2 search, one group) and `lower`;
`evaluate_binding` computes it and `convert` puts the text in the binding's type. Either may give MISSING: a pattern
that did not match, a group that did not take part, or text that does not convert (LANGUAGE.md, "Missing facts").
The fact builder (`fact_batch`) evaluates each binding once per distinct instruction. `Regexes` compiles
each pattern once per batch.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import re2
from tracec.compiler.ir import Node
from tracec.dsl.types import Type
from tracec.runtime.facts.columns import INT64_RANGE


class _Missing(enum.Enum):
    MISSING = "missing"


MISSING = _Missing.MISSING  # a binding that did not match, or whose text did not convert to its type

class Regexes:
    """Compiled RE2 patterns by (pattern, ignore_case), so that a batch compiles each pattern once."""

    def __init__(self) -> None:
        self._compiled: dict[tuple[str, bool], Any] = {}

    def get(self, pattern: str, ignore_case: bool) -> Any:
        key = (pattern, ignore_case)
        if key not in self._compiled:
            options = re2.Options()
            options.case_sensitive = not ignore_case
            options.log_errors = False  # the checker has already validated the pattern
            self._compiled[key] = re2.compile(pattern, options)
        return self._compiled[key]


def evaluate_binding(expr: Node, instruction: str, regexes: Regexes | None = None) -> Any:
    """The value of a binding expression (ops `instruction`, `const`, `match`, `lower`), or MISSING."""
    op = expr.op
    if op == "instruction":
        return instruction
    if op == "const":
        return expr.value
    inner = evaluate_binding(expr.args[0], instruction, regexes)
    if inner is MISSING:
        return MISSING
    if op == "lower":
        return str.lower(inner)
    if op == "match":
        pattern, ignore_case, group = expr.value
        # On UTF-8 bytes: the same match, without the wrapper turning byte offsets into character offsets.
        found = (regexes or Regexes()).get(pattern, ignore_case).search(inner.encode("utf-8"))
        text = found.group(group) if found is not None else None
        return MISSING if text is None else text.decode("utf-8")
    raise ValueError(f"`{op}` is not a binding op")


def convert(value: Any, type_: Type) -> Any:
    """A bound value in the binding's type (entities stay strings, enums become member indices), or MISSING."""
    kind = type_.kind
    if value is MISSING or (kind in ("entity", "text") and not isinstance(value, str)):
        return MISSING
    if kind in ("entity", "text"):
        return value
    if kind == "enum":
        return type_.members.index(value) if value in type_.members else MISSING
    if kind == "bool":
        return value if isinstance(value, bool) else {"true": True, "false": False}.get(value, MISSING)
    # Numbers: a constant of the right kind, or text parsed with Python's int() / float() syntax.
    if not isinstance(value, str) and type(value) not in ((int,) if kind == "int" else (int, float)):
        return MISSING
    try:
        number = int(value) if kind == "int" else float(value)
    except (ValueError, OverflowError):
        return MISSING
    if kind == "int":
        return number if INT64_RANGE[0] <= number < INT64_RANGE[1] else MISSING
    return number if math.isfinite(number) else MISSING
