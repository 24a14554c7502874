"""Every rubric shipped in examples/ has a test that plays its target and checks its Invalidity operators
(`rubric_checks.assert_invalidity_profile`): a new example rubric without one fails here."""

from __future__ import annotations

from pathlib import Path

from tracec.dsl.check import check
from tracec.dsl.parse import parse_file

TESTS = Path(__file__).resolve().parents[1]
EXAMPLES = TESTS.parent / "examples"


def test_every_shipped_rubric_has_an_invalidity_test() -> None:
    with_rubrics = {p.name for p in EXAMPLES.rglob("*.rubric") if check(parse_file(str(p))).rubrics}
    tests = [test for test in TESTS.rglob("test_*.py") if test != Path(__file__)]
    tested = {name for test in tests if "assert_invalidity_profile(" in (text := test.read_text())
              for name in with_rubrics if name in text}
    assert with_rubrics == {"customer_service.rubric", "household.rubric", "search_qa.rubric", "tau2.rubric",
                            "textworld.rubric", "textworld_blind.rubric", "toolenv.rubric", "toolsandbox.rubric",
                            "webshop.rubric"}
    assert tested == with_rubrics, f"no invalidity test for {sorted(with_rubrics - tested)}"
