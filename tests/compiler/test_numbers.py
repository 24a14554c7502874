"""The numeric contract (docs/language.md, "Numbers"): its one definition (`tracec.compiler.values`) against exact
rational arithmetic, and rubric source text through every backend on the values where backends used to disagree
(int64 overflow, ints beyond 2^53 against floats, INT64_MIN, signed zeros, float overflow)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.compiler import interp, numba_backend
from tracec.compiler import values as V
from tracec.compiler.backends import compile_kernel
from tracec.compiler.codegen import MIRRORED, int_range, int_test
from tracec.compiler.pipeline import compile_rubric
from tracec.dsl.check import check_source
from tracec.runtime.facts.fact_batch import Column

MIN, MAX = -(2**63), 2**63 - 1
EDGE_INTS = [MIN, MIN + 1, MIN + 2, -(2**62), -(2**53) - 1, -(2**53), -1, 0, 1, 2, 3, 2**31, 2**32, 2**53 - 1, 2**53,
             2**53 + 1, 2**62 - 1, 2**62, MAX - 1, MAX]
EDGE_FLOATS = [-0.0, 0.0, 5e-324, 1e-300, 0.5, 1.5, 2.5, -2.5, 2.0**53, 2.0**53 + 2, 2.0**62, 2.0**63, -(2.0**63),
               9.3e18, 1e300, 1e308, 1.7976931348623157e308, -1.7976931348623157e308]
INTS = st.one_of(st.sampled_from(EDGE_INTS), st.integers(MIN, MAX), st.integers(-1000, 1000))
FLOATS = st.one_of(st.sampled_from(EDGE_FLOATS), st.floats(allow_nan=False, allow_infinity=False))
NUMBERS = st.one_of(INTS, FLOATS)

# --- the definition against exact arithmetic ---------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(NUMBERS, NUMBERS)
def test_arithmetic_is_exact_or_unknown(a, b):
    both_ints = isinstance(a, int) and isinstance(b, int)
    for op, exact in (("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y)):
        got = V.ARITHMETIC[op](a, b)
        if both_ints:
            want = exact(a, b)
            assert got == (want if MIN <= want <= MAX else None), (op, a, b)
        else:
            want = exact(float(a), float(b))  # IEEE: the int converted to the nearest float first
            assert got == (want if math.isfinite(want) else None) and type(got) in (float, type(None)), (op, a, b)
    quotient = V.divide(a, b)
    if b == 0:
        assert quotient is None
    else:
        want = float(a) / float(b)
        assert quotient == (want if math.isfinite(want) else None)
    for op, pick in (("min", min), ("max", max)):
        got = V.ARITHMETIC[op](a, b)
        want = pick(a, b)  # Python's: the second only when strictly better, exactly compared; a float if one is
        assert got == (want if both_ints else float(want)) and (type(got) is int) == both_ints


@settings(max_examples=400, deadline=None)
@given(INTS, FLOATS)
def test_an_int_and_a_float_compare_as_the_numbers_they_are(a, b):
    exact = (Fraction(a) > Fraction(b)) - (Fraction(a) < Fraction(b))
    want = {"eq": exact == 0, "ne": exact != 0, "lt": exact < 0, "le": exact <= 0, "gt": exact > 0, "ge": exact >= 0}
    for op, holds in want.items():
        assert V.COMPARISONS[op](a, b) is holds
        assert V.COMPARISONS[MIRRORED[op]](b, a) is holds
        test = int_test(op, b)  # what the generators emit against a float constant
        assert (test if isinstance(test, bool) else V.COMPARISONS[test[0]](a, test[1])) is holds, (op, a, b, test)


@settings(max_examples=400, deadline=None)
@given(INTS, INTS, st.sampled_from(["add", "sub", "mul"]), st.booleans())
def test_the_range_checks_against_a_constant_are_exact(x, c, op, constant_first):
    lo, hi = int_range(op, c, constant_first)
    result = V.ARITHMETIC[op](c, x) if constant_first else V.ARITHMETIC[op](x, c)
    assert (lo <= x <= hi) == (result is not None), (op, x, c, constant_first, lo, hi)


def test_neg_and_abs_of_int64_min_are_unknown():
    assert V.negate(MIN) is None and V.absolute(MIN) is None
    assert V.negate(MIN + 1) == MAX and V.absolute(MIN + 1) == MAX and V.negate(-0.0) == 0.0


# --- source text through every backend ---------------------------------------------------------------------------

SCHEMA = "schema s {\n  state { g: int  h: int  x: float  y: float }\n  action { ok: bool }\n}\n"

# (expression, facts of next: g, h, x, y, and its truth: True, False or None for unknown)
CASES = [
    ("next.g * 4611686018427387904 > 0", (3, 0, 0.0, 0.0), None),
    ("next.g * 4611686018427387904 > 0", (1, 0, 0.0, 0.0), True),
    ("next.g == 9007199254740992.0", (2**53 + 1, 0, 0.0, 0.0), False),
    ("next.g == 9007199254740992.0", (2**53, 0, 0.0, 0.0), True),
    ("abs(next.g) > 0", (MIN, 0, 0.0, 0.0), None),
    ("abs(next.g) > 0", (MIN + 1, 0, 0.0, 0.0), True),
    ("-next.g > 0", (MIN, 0, 0.0, 0.0), None),
    ("next.g + next.h > 0", (MAX, 1, 0.0, 0.0), None),
    ("next.g + next.h > 0", (MAX, -1, 0.0, 0.0), True),
    ("next.g - next.h < 0", (MIN, 1, 0.0, 0.0), None),
    ("next.g - next.h < 0", (MIN, -1, 0.0, 0.0), True),
    ("next.g * next.h > 0", (2**32, 2**31, 0.0, 0.0), None),
    ("next.g * next.h == -9223372036854775808", (-(2**32), 2**31, 0.0, 0.0), True),
    ("next.g * next.h == -9223372036854775808", (MIN, 1, 0.0, 0.0), True),
    ("next.g * next.h > 0", (MIN, -1, 0.0, 0.0), None),
    ("next.g * next.h < 0", (3, -3074457345618258603, 0.0, 0.0), None),
    ("next.g * next.h < 0", (3, -3074457345618258602, 0.0, 0.0), True),
    ("next.g * -1 > 0", (MIN, 0, 0.0, 0.0), None),
    ("next.g * 2 > 0", (2**62, 0, 0.0, 0.0), None),
    ("next.g * 2 > 0", (2**62 - 1, 0, 0.0, 0.0), True),
    ("1 - next.g > 0", (MIN + 1, 0, 0.0, 0.0), None),
    ("1 - next.g > 0", (MIN + 2, 0, 0.0, 0.0), True),
    ("(next.g + 1) - 1 == next.g", (MAX, 0, 0.0, 0.0), None),
    ("next.g - 1 < next.g", (MIN, 0, 0.0, 0.0), None),
    ("-9223372036854775808 == next.g", (MIN, 0, 0.0, 0.0), True),
    ("next.g < next.x", (2**53 + 1, 0, 2.0**53, 0.0), False),
    ("next.g > next.x", (2**53 + 1, 0, 2.0**53, 0.0), True),
    ("next.x < next.g", (2**53 + 1, 0, 2.0**53, 0.0), True),
    ("next.g <= next.x", (MAX, 0, 2.0**63, 0.0), True),
    ("next.g == next.x", (MAX, 0, 2.0**63, 0.0), False),
    ("next.g == next.x", (MIN, 0, -(2.0**63), 0.0), True),
    ("next.g >= next.x", (MIN, 0, -(2.0**63), 0.0), True),
    ("next.g < 2.5", (2, 0, 0.0, 0.0), True),
    ("next.g < 2.5", (3, 0, 0.0, 0.0), False),
    ("next.g <= 9223372036854775808.0", (MAX, 0, 0.0, 0.0), True),
    ("next.g >= 9.3e18", (MAX, 0, 0.0, 0.0), False),
    ("next.g > -1e300", (MIN, 0, 0.0, 0.0), True),
    ("next.g != 0.5", (0, 0, 0.0, 0.0), True),
    ("min(next.g, next.x) == next.g", (2**53 + 1, 0, 1e300, 0.0), False),  # the float min is 2^53
    ("max(next.g, next.h) == 9223372036854775807", (MAX, MIN, 0.0, 0.0), True),
    ("next.g / next.h == 0.5", (1, 2, 0.0, 0.0), True),
    ("next.g / 0 > 0", (1, 0, 0.0, 0.0), None),
    ("next.g / 3 == 3002399751580330.5", (2**53 + 1, 0, 0.0, 0.0), True),  # 2^53 / 3 as floats, not (2^53 + 1) / 3
    ("9007199254740993 / next.h == 3002399751580330.5", (0, 3, 0.0, 0.0), True),
    ("next.x / next.y > 0", (0, 0, 1.0, -0.0), None),
    ("next.x / next.y > 0", (0, 0, 1e308, 1e-10), None),  # overflows to infinity
    ("next.x * next.y > 0", (0, 0, 1e308, 10.0), None),
    ("next.x - next.y < 0", (0, 0, -1e308, 1e308), None),
    ("next.x + next.y == 1.7976931348623157e308", (0, 0, 1.7976931348623157e308, 0.0), True),
    ("next.x == 0.0", (0, 0, -0.0, 0.0), True),
    ("next.x < 0.0", (0, 0, -0.0, 0.0), False),
    ("next.x > 0.0", (0, 0, 5e-324, 0.0), True),
    ("next.x * 0.5 > 0.0", (0, 0, 5e-324, 0.0), False),  # underflows to zero: known, and not > 0
    ("next.g + next.h > 0 or true", (MAX, 1, 0.0, 0.0), True),
    ("next.g + next.h > 0 and false", (MAX, 1, 0.0, 0.0), False),
    ("not (next.g + next.h > 0)", (MAX, 1, 0.0, 0.0), None),
]


@pytest.fixture(scope="module")
def program():
    operators = "\n".join(f'  evidence e{i} "": {expr}\n  evidence n{i} "": not ({expr})'
                          for i, (expr, _, _) in enumerate(CASES))
    checked = check_source(SCHEMA + f"rubric r for s {{\n{operators}\n}}\n", "numbers.rubric")
    return compile_rubric(checked.rubrics["r"]).program


def _columns():
    facts = np.array([case[1] for case in CASES], dtype=object)
    n = len(CASES)
    known = np.ones(n, dtype=np.uint8)
    return {
        "next.g": Column(facts[:, 0].astype(np.int64), known), "next.h": Column(facts[:, 1].astype(np.int64), known),
        "next.x": Column(facts[:, 2].astype(np.float64), known),
        "next.y": Column(facts[:, 3].astype(np.float64), known),
    }


def _truths(fired: np.ndarray) -> list[bool | None]:
    out: list[bool | None] = []
    for i in range(len(CASES)):
        yes, no = fired[i, 2 * i], fired[i, 2 * i + 1]
        assert not (yes and no)
        out.append(True if yes else False if no else None)
    return out


@pytest.mark.parametrize("backend", ["interp", "unjitted", "numba", "c"])
def test_every_backend_keeps_the_contract(program, backend):
    columns = _columns()
    if backend == "unjitted":
        fired, _ = numba_backend.run_unjitted(program, columns, len(CASES))
    else:
        fired, _ = compile_kernel(program, backend, None).run(columns, len(CASES))
    got = _truths(fired)
    mismatches = [(CASES[i][0], CASES[i][1], CASES[i][2], got[i]) for i in range(len(CASES)) if got[i] != CASES[i][2]]
    assert not mismatches


def test_a_known_float_that_is_not_finite_is_refused_by_name(program):
    columns = _columns()
    values = columns["next.x"].values.copy()
    values[4] = math.nan
    columns["next.x"] = Column(values, columns["next.x"].known)
    with pytest.raises(ValueError, match=r"column `next.x` holds nan at row 4; a known float must be finite"):
        interp.run(program, columns, len(CASES))
    with pytest.raises(ValueError, match="a known float must be finite"):
        numba_backend.run_unjitted(program, columns, len(CASES))
    unknown = Column(values, np.where(np.arange(len(CASES)) == 4, 0, 1).astype(np.uint8))
    interp.run(program, dict(columns, **{"next.x": unknown}), len(CASES))  # behind a missing flag it is garbage


def test_constant_folding_keeps_overflow_unknown():
    """Folding evaluates by the definition: `9223372036854775807 + 1` has no constant form and stays, so no
    backend meets an integer literal beyond int64."""
    checked = check_source(SCHEMA + 'rubric r for s {\n  evidence e "": 9223372036854775807 + 1 > 0 or act.ok\n'
                           '  evidence f "": 4611686018427387904 * 2 > 0\n'
                           '  evidence g "": -(-9223372036854775808) > 0\n}',
                           "fold.rubric")
    program = compile_rubric(checked.rubrics["r"]).program
    for node in program.operators:
        assert node.op != "const"
    columns = {"act.ok": Column(np.zeros(1, np.uint8), np.ones(1, np.uint8))}
    for backend in ("interp", "numba", "c"):
        fired, _ = compile_kernel(program, backend, None).run(columns, 1)
        assert fired.tolist() == [[0, 0, 0]]
