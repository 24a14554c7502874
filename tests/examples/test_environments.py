"""The shipped capability environments never draw a nonsensical task, over many seeds: what a task names exists,
is what the task says it is, and is the only row that fits the description."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tracec.trace_rl.envs.capability import Scenario, load_environment

ENVS = Path(__file__).resolve().parents[2] / "examples" / "envs"
SEEDS = range(1500)  # cancel_trip once drew a trip from a city to itself in about 3% of seeds


def _rows(scenario: Scenario, table: str, **equal: Any) -> list[dict[str, Any]]:
    return [row for row in scenario.db.rows[table] if all(row[k] == v for k, v in equal.items())]


def _trip(s: Scenario) -> None:
    me, trip = s.lets["me"], s.lets["target"]
    for row in s.db.rows["reservations"]:  # the task's flight, and every other one the agent may list
        assert row["origin"] != row["destination"], f"reservation {row['id']} goes from {row['origin']} to itself"
    described = _rows(s, "reservations", user=me["id"], origin=trip["origin"], destination=trip["destination"],
                      day=trip["day"], status="active")
    assert described == [trip], "the description fits another active reservation"


def _flight(s: Scenario) -> None:
    me, flight = s.lets["me"], s.lets["flight"]
    gap = datetime.date.fromisoformat(flight["day"]) - datetime.date.fromisoformat(s.lets["since"])
    assert gap.days == 7 * me["weeks"] + me["days"] and s.lets["since"] in s.task
    same = _rows(s, "flights", origin=flight["origin"], destination=flight["destination"], day=flight["day"])
    assert same == [flight] and flight["origin"] != flight["destination"], "the search finds another flight"


def _bags_after_refund(s: Scenario) -> None:
    me, card, a, b = (s.lets[k] for k in ("me", "g", "a", "b"))
    assert a["user"] == b["user"] == card["user"] == me["id"] and a["payment"] == card["id"] and a["id"] != b["id"]
    assert a["status"] == b["status"] == "active"
    assert card["balance"] < 50 * me["bags"] <= card["balance"] + a["price"], "the refund must be needed and enough"


def _locked(s: Scenario) -> None:
    order, alt = s.lets["o"], s.lets["alt"]
    assert order["status"] == "pending" and order["locked"], "the cancel must be blocked: else nothing to recover"
    assert alt["user"] == order["user"] and not alt["locked"]


def _orders(s: Scenario) -> None:
    me, x, y, open_ = (s.lets[k] for k in ("me", "x", "y", "open"))
    assert x["id"] != y["id"] and {x["status"], y["status"]} == {"pending", "delivered"}
    assert (x["user"] == y["user"] == me["id"] and open_["status"] == "pending"
            and open_["id"] in (x["id"], y["id"]))


def _bags(s: Scenario) -> None:
    me, reservation, payment = s.lets["me"], s.lets["r"], s.lets["p"]
    assert reservation["status"] == "active" and reservation["user"] == payment["user"] == me["id"]
    assert 0 <= me["nonfree"] <= me["total"] <= 9 and reservation["id"] in s.task and payment["id"] in s.task


SENSE: dict[str, Callable[[Scenario], None]] = {
    "structured_data_reasoning.rubric": _trip,
    "datetime_reasoning.rubric": _flight,
    "multi_step_completion.rubric": _bags_after_refund,
    "permission_error_recovery.rubric": _locked,
    "precondition_verification.rubric": _orders,
    "tool_calling_precision.rubric": _bags,
}


def test_every_shipped_environment_has_its_sense_check() -> None:
    assert sorted(SENSE) == sorted(p.name for p in ENVS.glob("*.rubric"))


@pytest.mark.parametrize("name", sorted(SENSE))
def test_no_seed_draws_a_nonsensical_task(name: str) -> None:
    program = load_environment(str(ENVS / name))
    for seed in SEEDS:
        scenario = program.scenario(seed)
        try:
            SENSE[name](scenario)
        except AssertionError as error:
            raise AssertionError(f"{name}, seed {seed}: {scenario.task}\n{error}") from None
