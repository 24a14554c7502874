"""The typing rules of the operators and functions that rubric and environment expressions share: one core, so a
rule (`min` takes two or more numbers, `/` gives a float, what compares with what) cannot differ between them.

Each rule takes the operand types, already resolved by the checker that calls it (`tracec.dsl.check_expr` for
rubrics and capabilities, `tracec.dsl.check_env_expr` for environments), and gives the result type, or a `Problem`:
the message and which operand it is about. The callers keep what differs by place: how names resolve, which
functions exist there (`changed` and `matches` in rubrics, `add_days` in environments), and that environments also
order dates (entities in ISO form).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracec.dsl import types as T
from tracec.dsl.types import Type

# Functions of both languages: name -> (fewest, most) arguments, None for no upper bound.
SHARED_ARITY: dict[str, tuple[int, int | None]] = {"abs": (1, 1), "min": (2, None), "max": (2, None)}


@dataclass(frozen=True)
class Problem:
    message: str
    operand: int | None = None  # the index of the operand at fault; None for the whole expression


def shown(type_: Type) -> str:
    """A type in a message: row and table types name their table in backticks already."""
    return str(type_) if type_.kind in ("row", "table") else f"`{type_}`"


def arity(func: str, got: int, fewest: int, most: int | None) -> Problem | None:
    if fewest <= got and (most is None or got <= most):
        return None
    if most is None:
        wanted = f"at least {fewest}"
    else:
        wanted = str(fewest) if fewest == most else f"{fewest} to {most}"
    plural = "" if (fewest, most) == (1, 1) else "s"
    return Problem(f"`{func}` takes {wanted} argument{plural}, got {got}")


def logic(op: str, operands: list[Type]) -> Type | Problem:
    """`and`, `or`, `not`: bools."""
    for index, got in enumerate(operands):
        if got.kind != "bool":
            return Problem(f"`{op}` needs a bool, not {shown(got)}", index)
    return T.BOOL


def negative(operand: Type) -> Type | Problem:
    if not operand.numeric:
        return Problem(f"unary `-` needs a number, not {shown(operand)}", 0)
    return operand


def binary(op: str, left: Type, right: Type, *, order_dates: bool = False) -> Type | Problem:
    """`==` `!=` (comparable values), `<` `<=` `>` `>=` (numbers, and dates where `order_dates`), `+` `-` `*` `/`
    (numbers: an int unless a float takes part or the op is `/`)."""
    if op in ("==", "!="):
        if T.comparable(left, right):
            return T.BOOL
        hint = "; write the enum member without quotes" if {left.kind, right.kind} == {"enum", "string"} else ""
        return Problem(f"cannot compare {shown(left)} with {shown(right)}{hint}")
    if op in ("<", "<=", ">", ">="):
        if left.numeric and right.numeric:
            return T.BOOL
        textual = {"entity", "string"}
        if order_dates and left.kind in textual and right.kind in textual:
            return T.BOOL
        if order_dates:
            return Problem(f"`{op}` compares two numbers or two dates, not {shown(left)} and {shown(right)}")
        return Problem(f"`{op}` needs numbers, not {shown(right if left.numeric else left)}")
    if not (left.numeric and right.numeric):
        return Problem(f"`{op}` needs numbers, not {shown(right if left.numeric else left)}")
    return T.FLOAT if op == "/" or T.FLOAT in (left, right) else T.INT


def numeric_call(func: str, operands: list[Type]) -> Type | Problem:
    """`abs(x)` (the type of x), `min(x, y, ...)` / `max(...)` (an int unless a float takes part)."""
    for index, got in enumerate(operands):
        if not got.numeric:
            wanted = "a number" if func == "abs" else "numbers"
            return Problem(f"{func}() takes {wanted}, not {shown(got)}", index)
    if func == "abs":
        return operands[0]
    return T.FLOAT if T.FLOAT in operands else T.INT
