"""Environment expressions and generators: Kleene logic over missing values, the built-in functions, and seeded
tables that respect their declared ranges."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.dsl.parse import parse_expr
from tracec.trace_rl.envs.capability import compile_environment
from tracec.trace_rl.envs.capability.database import Database
from tracec.trace_rl.envs.capability.expr import Frame, Names, add_days, compile_expr, show
from tracec.trace_rl.envs.capability.generate import key_prefixes

ROW = {"id": "U1", "n": 3, "x": None, "tag": "b", "day": "2024-02-27", "flag": True}
NAMES = Names(columns=frozenset(ROW), lets=frozenset({"me"}), tables=frozenset({"users"}))
DB = Database({"users": [dict(ROW), {**ROW, "id": "U2"}]}, {"users": "id"})


def value(text: str, params: dict | None = None):  # type: ignore[no-untyped-def, type-arg]
    frame = Frame(DB, {"me": DB.rows["users"][1]}, params)
    return compile_expr(parse_expr(text), NAMES)(ROW, frame)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("x == 1", None), ("x != 1", None), ("not (x == 1)", None), ("x + 1", None), ("-x", None),
        ("x == 1 and false", False), ("false and x == 1", False), ("x == 1 and true", None),
        ("x == 1 or true", True), ("true or x == 1", True), ("x == 1 or false", None),
        ("n / 0", None), ("n / 2", 1.5), ("n * 2 - 1", 5), ("abs(1 - n)", 2), ("min(n, 2)", 2), ("max(n, x)", None),
        ("tag in {a, b}", True), ("tag in {a, c}", False), ("x in {a, b}", None), ("tag in {a, me.x}", None),
        ("tag in {b, me.x}", True), ("tag == b", True), ("lower(\"AbC\")", "abc"), ("contains(day, \"-02-\")", True),
        ("count(users)", 2), ("count({1, 2, 2})", 2), ("users[$u].n", 3),
        ("users[\"U9\"].n", None), ("me.id", "U2"), ("add_days(day, 3)", "2024-03-01"), ("add_days(tag, 3)", None),
        ("day < \"2024-03-01\"", True), ("n < tag", None), ("$missing == 1", None), ("flag and n > 2", True),
    ],
)
def test_expression_values(text: str, expected: object) -> None:
    assert value(text, {"u": "U1"}) == expected


def test_show_and_add_days() -> None:
    assert [show(v) for v in (None, True, False, 2.0, 2.5, 121.50000000000001, -0.001, "x", 7)] == [
        "none", "true", "false", "2", "2.5", "121.5", "0", "x", "7"]
    assert add_days("2024-12-30", 3) == "2025-01-02" and add_days("2024-02-28", 1) == "2024-02-29"
    assert add_days("next tuesday", 1) is None and add_days("9999-12-31", 1) is None


def test_key_prefixes_are_unique_and_short() -> None:
    class T:
        def __init__(self, name: str) -> None:
            self.name = name

    tables = tuple(T(n) for n in ("users", "trips", "tickets", "tix", "t"))
    assert key_prefixes(tables) == {"users": "U", "trips": "T", "tickets": "TI", "tix": "TIX", "t": "T2"}  # type: ignore[arg-type]


GENERATED = compile_environment("""
environment gen "every generator" {
  table users(id: key, name: name, city: city, day: date, n: int -5..5, f: float 0.5..2.5, \
e: enum(a, b), ok: bool) rows 1..40
  table items(code: key, owner: ref users, m: int 7..7) rows 0..6
  let u = pick(users)
  task "{u.name} {u.id}"
  tool see(x: key) -> users where id == $x
  solution see(u.id)
  report u.name
  reward report
}
""")


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=2**62))
def test_generated_tables_respect_their_declarations(seed: int) -> None:
    db = GENERATED.scenario(seed).db
    users, items = db.rows["users"], db.rows["items"]
    assert 1 <= len(users) <= 40 and 0 <= len(items) <= 6
    assert len({u["id"] for u in users}) == len(users) and len({u["name"] for u in users}) == len(users)
    for user in users:
        assert user["id"][0] == "U" and 1000 <= int(user["id"][1:]) < 10000
        assert -5 <= user["n"] <= 5 and 0.5 <= user["f"] <= 2.5 and round(user["f"], 2) == user["f"]
        assert user["e"] in ("a", "b") and isinstance(user["ok"], bool) and isinstance(user["city"], str)
        assert datetime.date(2024, 1, 1) <= datetime.date.fromisoformat(user["day"]) <= datetime.date(2025, 12, 31)
    keys = {u["id"] for u in users}
    assert all(item["owner"] in keys and item["code"][0] == "I" and item["m"] == 7 for item in items)
    assert GENERATED.scenario(seed).db.digest() == db.digest()
