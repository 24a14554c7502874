"""The language's operations on values: the one definition that the reference interpreter, the constant folder and
the environment evaluator call, and that the code generators (`tracec.compiler.codegen`) emit and are tested against.

Numbers (docs/language.md, "Numbers"):
- `int` is a 64-bit signed integer and `float` an IEEE-754 double (round to nearest even). An operation whose exact
  result does not fit its type is *unknown*, like a missing operand: `+ - *`, unary `-` and `abs` of ints beyond
  [-2^63, 2^63 - 1] (so `abs(INT64_MIN)` is unknown), and float arithmetic whose result is infinite or NaN.
- Mixed `int`/`float` arithmetic converts the int to the nearest float first; `/` is float division of the two
  operands converted so, and `x / 0` (either zero) is unknown. So every known number is finite.
- Comparisons are exact: an int and a float compare as the mathematical numbers they are (`2^53 + 1 == 2.0^53` is
  false), never through a rounding conversion. `-0.0 == 0.0`; as nothing can tell the two apart (dividing by
  either is unknown), they are one value, also in context keys.
- `min`/`max` keep the first operand unless the second is strictly smaller / larger; with a float operand the
  result is a float.

Truth values: Kleene's three-valued logic, unknown written None. The dominant value decides even when the other side
is unknown (`false and unknown = false`, `true or unknown = true`); `not unknown = unknown`.

Left out: sets and entities (membership and equality of interned ids need no definition beyond Python's) and text.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeGuard

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

Number = int | float
Truth = bool | None


def fits_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def _int(value: int) -> int | None:
    return value if fits_int64(value) else None


def _float(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _is_int(value: Number) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def negate(a: Number) -> Number | None:
    return _int(-a) if _is_int(a) else -float(a)


def absolute(a: Number) -> Number | None:
    return _int(abs(a)) if _is_int(a) else abs(float(a))


def add(a: Number, b: Number) -> Number | None:
    if _is_int(a) and _is_int(b):
        return _int(a + b)
    return _float(float(a) + float(b))


def subtract(a: Number, b: Number) -> Number | None:
    if _is_int(a) and _is_int(b):
        return _int(a - b)
    return _float(float(a) - float(b))


def multiply(a: Number, b: Number) -> Number | None:
    if _is_int(a) and _is_int(b):
        return _int(a * b)
    return _float(float(a) * float(b))


def divide(a: Number, b: Number) -> float | None:
    """True division of the operands as floats; unknown for a zero divisor or an infinite quotient."""
    if b == 0:
        return None
    return _float(float(a) / float(b))


def minimum(a: Number, b: Number) -> Number:
    chosen = min(a, b)  # Python compares int with float exactly
    return float(chosen) if not (_is_int(a) and _is_int(b)) else chosen


def maximum(a: Number, b: Number) -> Number:
    chosen = max(a, b)
    return float(chosen) if not (_is_int(a) and _is_int(b)) else chosen


ARITHMETIC: dict[str, Callable[..., Number | None]] = {
    "neg": negate, "abs": absolute, "add": add, "sub": subtract, "mul": multiply, "div": divide,
    "min": minimum, "max": maximum,
}

# Python's comparisons of int with float are exact (CPython compares the mathematical values), as the language's are.
COMPARISONS = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}


def kleene_not(a: Truth) -> Truth:
    return None if a is None else not a


def kleene_and(a: Truth, b: Truth) -> Truth:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def kleene_or(a: Truth, b: Truth) -> Truth:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False

