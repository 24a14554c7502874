"""Every shipped `.rubric` example type-checks (environments included), and the four reference rubrics keep their
five operators per category."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracec.dsl.check import check
from tracec.dsl.parse import parse_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = sorted(EXAMPLES.glob("**/*.rubric"))
FIVE_BY_CATEGORY = {
    "household.rubric": "alfworld_pick",
    "webshop.rubric": "webshop_buy",
    "search_qa.rubric": "search_answer",
    "customer_service.rubric": "service_order",
}


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_checks(path: Path) -> None:
    checked = check(parse_file(str(path)))
    assert checked.rubrics or checked.capabilities or checked.environments or checked.schemas


@pytest.mark.parametrize("name", sorted(FIVE_BY_CATEGORY))
def test_reference_rubrics_have_five_operators_per_category(name: str) -> None:
    checked = check(parse_file(str(EXAMPLES / name)))
    rubric = checked.rubrics[FIVE_BY_CATEGORY[name]]
    counts = {c: sum(o.category == c for o in rubric.operators) for c in ("evidence", "execution", "invalidity")}
    assert counts == {"evidence": 5, "execution": 5, "invalidity": 5}


def test_customer_service_has_capabilities() -> None:
    checked = check(parse_file(str(EXAMPLES / "customer_service.rubric")))
    assert set(checked.capabilities) == {"precondition_verification", "identity_verification"}
