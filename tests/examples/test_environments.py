"""The shipped capability environments never draw a nonsensical task, over many seeds: what a task names exists,
is what the task says it is, and is the only row that fits the description."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tracec.trace_rl.envs.capability import Scenario, load_environment

ENVS = Path(__file__).resolve().parents[2] / "examples" / "envs"
SEEDS = range(1500)  # cancel_trip drew a trip from a city to itself in about 3% of seeds


def _rows(scenario: Scenario, table: str, **equal: Any) -> list[dict[str, Any]]:
    return [row for row in scenario.db.rows[table] if all(row[k] == v for k, v in equal.items())]


def _trip(s: Scenario) -> None:
    me, trip = s.lets["me"], s.lets["target"]
    for row in s.db.rows["trips"]:  # the task's trip, and every other one the agent may list
        assert row["origin"] != row["dest"], f"trip {row['id']} goes from {row['origin']} to itself"
    described = _rows(s, "trips", user=me["id"], origin=trip["origin"], dest=trip["dest"], day=trip["day"],
                      status="active")
    assert described == [trip], "the description fits another active trip"


def _visit(s: Scenario) -> None:
    me, visit = s.lets["me"], s.lets["visit"]
    by_id = visit["id"] in s.task  # the task may name the visit by its id as well as its day
    described = [row for row in _rows(s, "visits", patient=me["id"], day=visit["day"])
                 if not by_id or row["id"] == visit["id"]]
    assert described == [visit], "the description fits another visit of that day"
    assert visit["status"] == "booked" and s.lets["new"] > visit["day"]


def _bill(s: Scenario) -> None:
    me, chk, sav, bill = (s.lets[k] for k in ("me", "chk", "sav", "bill"))
    assert chk["owner"] == sav["owner"] == bill["customer"] == me["id"] and bill["status"] == "open"
    assert chk["balance"] < bill["amount"] <= sav["balance"], "the transfer must be needed and possible"


def _line(s: Scenario) -> None:
    line = s.lets["line"]
    assert not line["roaming"] or line["spend_lock"], "the pass must be blocked, or there is nothing to recover from"


def _orders(s: Scenario) -> None:
    me, x, y, open_ = (s.lets[k] for k in ("me", "x", "y", "open"))
    assert x["id"] != y["id"] and {x["status"], y["status"]} == {"pending", "shipped"}
    assert (x["customer"] == y["customer"] == me["id"] and open_["status"] == "pending"
            and open_["id"] in (x["id"], y["id"]))


def _room(s: Scenario) -> None:
    me, room = s.lets["me"], s.lets["room"]
    assert room["status"] == "free" and 1 <= me["nights"] <= 30 and room["id"] in s.task


SENSE: dict[str, Callable[[Scenario], None]] = {
    "structured_data_reasoning.rubric": _trip,
    "datetime_reasoning.rubric": _visit,
    "multi_step_completion.rubric": _bill,
    "permission_error_recovery.rubric": _line,
    "precondition_verification.rubric": _orders,
    "tool_calling_precision.rubric": _room,
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
