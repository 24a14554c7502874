"""The environment checker: every error path with its exact message and location, all errors in one pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracec.dsl import ast
from tracec.dsl.check_env import check_environment
from tracec.dsl.env_model import DEFAULT_LIMITS, CheckedEnvironment, Limits
from tracec.dsl.errors import Source
from tracec.dsl.parse import parse

REPO = Path(__file__).resolve().parents[2]

VALID = """\
environment e "d" {
  table users(id: key, name: name, tier: enum(gold, silver)) rows 2..5
  table trips(id: key, user: ref users, day: date, status: enum(active, cancelled), price: int 1..9) rows 3..9
  let me = pick(users)
  let trip = pick(trips where user == me.id and status == active)
  task "Hi, I'm {me.name}: cancel {trip.id}."
  tool find(name: name) -> users where name == $name
  tool cancel(trip: key)
    require trips[$trip].status == active else "trip {$trip} is not active"
    set trips[$trip].status = cancelled
  solution find(me.name); cancel(trip.id)
  report trip.price
  reward 0.5 * state + 0.5 * report
}
"""


def check(text: str, limits: Limits = DEFAULT_LIMITS) -> tuple[CheckedEnvironment | None, list[str]]:
    module = parse(text, "t.rubric")
    env = module.decls[0]
    assert isinstance(env, ast.Environment)
    checked, diagnostics = check_environment(env, Source("t.rubric", text), limits=limits)
    return checked, [f"{d.loc.line}:{d.loc.column}: {d.message}" for d in sorted(diagnostics)]


def errors(text: str) -> list[str]:
    return check(text)[1]


def edit(old: str, new: str) -> str:
    assert old in VALID, old
    return VALID.replace(old, new, 1)


def test_valid_environment_resolves_types_keys_and_tools() -> None:
    checked, problems = check(VALID)
    assert problems == []
    assert checked is not None
    users, trips = checked.tables
    assert (users.key, trips.key) == ("id", "id")
    assert str(trips.column("status").type) == "enum(active, cancelled)"  # type: ignore[union-attr]
    assert [t.signature() for t in checked.tools] == ["find(name: name) -> rows of users",
                                                      "cancel(trip: key) changes trips"]
    assert [str(t) for t in checked.let_types] == ["row of `users`", "row of `trips`"]


@pytest.mark.parametrize("path", sorted((REPO / "examples" / "envs").glob("*.rubric")), ids=lambda p: p.stem)
def test_shipped_environments_check(path: Path) -> None:
    assert errors(path.read_text()) == []


@pytest.mark.parametrize(
    "old, new, expected",
    [
        # tables and generators
        ("rows 2..5", "rows 5..2", "2:9: rows 5..2: the lower bound is above the upper bound"),
        ("rows 2..5", "rows 2..5000", "2:9: rows 2..5000: at most 1000 rows a table"),
        ("name: name,", "name: nmae,", "2:30: unknown generator `nmae`; did you mean `name`?"),
        ("price: int 1..9", "price: int 9..1", "3:92: `int 9..1`: the lower bound is above the upper bound"),
        ("price: int 1..9", "price: int 1.5..9", "3:92: `int 1.5..9` needs whole numbers; use `float` for decimals"),
        ("price: int 1..9", "price: int", "3:92: `int` is written `int 1..100`"),
        ("price: int 1..9", "price: date 1..9", "3:92: `date` is written `date`"),
        ("tier: enum(gold, silver)", "tier: enum(gold, gold)", "2:42: enum member `gold` is listed twice"),
        ("tier: enum(gold, silver)", "tier: enum(gold, where)",
         "2:42: `where` is a reserved word and cannot name an enum member"),
        ("user: ref users", "user: ref usrs", "3:30: `ref usrs`: unknown table `usrs`; did you mean `users`?"),
        ("tier: enum(gold, silver)", "tier: ref trips",
         "2:42: `ref trips`: a `ref` points to a table declared before `users`"),
        ("users(id: key,", "users(id: key, id2: key,", "2:24: table `users` already has a key column `id`"),
        ("users(id: key, name: name,", "users(id: key, name: name, name: city,",
         "2:36: column `name` of `users` is declared twice (first at line 2)"),
        ("  let me", "  table where(a: bool) rows 1..2\n  let me",
         "4:9: `where` is a reserved word and cannot name a table"),
        # lets and picks
        ("status == active)", "status == actve)",
         "5:59: `actve` is not a member of `enum(active, cancelled)`; did you mean `active`?"),
        ("let me = pick(users)", "let me = pick(usrs)", "4:12: unknown table `usrs`; did you mean `users`?"),
        ("let me = pick(users)", "let me = pick(users where tier)",
         "4:29: the `where` condition must be a bool, not `enum(gold, silver)`"),
        ("let me = pick(users)", "let me = pick(users where tier == 3)",
         "4:29: cannot compare `enum(gold, silver)` with `int`"),
        ("  task", "  let users = 3\n  task", "6:7: `users` is already a table (line 2)"),
        ("  task", "  let me = 3\n  task", "6:7: let `me` is declared twice (first at line 4)"),
        ("let me = pick(users)", "let me = pick(users where id == trip.id)",
         "4:35: `trip` is used before its `let` (line 5)"),
        ("let me = pick(users)", "let me = pick(users where nme == \"x\")",
         "4:29: unknown name `nme`; did you mean `name`?"),
        ("user == me.id", "user == me.nam", "5:39: table `users` has no column `nam`; did you mean `name`?"),
        # task, tools, requires, sets
        ("{me.name}:", "{me}:",
         "6:18: an interpolation `{...}` needs a value such as `row.column`, not a row of `users`"),
        ("{me.name}:", "{$x}:", "6:18: `$x` is a tool parameter; it has no value outside a tool"),
        ("name == $name", "name == $nme", "7:48: unknown parameter `$nme`; did you mean `$name`?"),
        ("tool find(name: name)", "tool find(name: nam)", "7:19: unknown parameter type `nam`; did you mean `name`?"),
        ("tool find(name: name)", "tool find(name: name, name: int)",
         "7:25: parameter `name` of `find` is declared twice"),
        ("tool find(name: name) -> users where name == $name", "tool find(pick: name) -> users where name == $pick",
         "7:13: `pick` is a reserved word and cannot name a parameter"),
        ("-> users where", "-> usrs where", "7:25: unknown table `usrs`; did you mean `users`?"),
        ("status == active else", "status == \"active\" else",
         "9:13: cannot compare `enum(active, cancelled)` with `string`; write the enum member without quotes"),
        ("require trips[$trip].status == active", "require trips[$trip].price",
         "9:13: a `require` condition must be a bool, not `int`"),
        ("status = cancelled", "status = cancelld",
         "10:31: `cancelld` is not a member of `enum(active, cancelled)`; did you mean `cancelled`?"),
        ("set trips[$trip].status = cancelled", "set trips[$trip].id = \"x\"",
         "10:5: `trips.id` is the key column; it cannot be set"),
        ("set trips[$trip].status = cancelled", "set trips[$trip].stat = cancelled",
         "10:5: table `trips` has no column `stat`; did you mean `status`?"),
        ("set trips[$trip].status = cancelled", "set trips[$trip].price = \"x\"",
         "10:30: cannot set `trips.price` (int) to `string`"),
        ("set trips[$trip].status = cancelled", "set trips[3].status = cancelled",
         "10:15: a row is looked up by its key (an entity), not by `int`"),
        ("trips[$trip].status == active else", "me[$trip].status == active else",
         "9:13: only a table can be indexed with `[...]`, not row of `users`"),
        # solution, report, reward
        ("cancel(trip.id)", "cancel(trip.id, 2)", "11:27: `cancel` takes 1 argument (trip: key), got 2"),
        ("cancel(trip.id)", "cancle(trip.id)", "11:27: unknown tool `cancle`; did you mean `cancel`?"),
        ("cancel(trip.id)", "cancel(trip.price)", "11:34: argument `trip` of `cancel` is `key`, not `int`"),
        ("cancel(trip.id)", "cancel($trip)", "11:34: `$trip` is a tool parameter; it has no value outside a tool"),
        ("report trip.price", "report trip",
         "12:10: `report` needs a value such as `row.column`, not a row of `trips`"),
        ("report trip.price", "report state",
         "12:10: `state` is a score of the environment; it can only be used in `reward`"),
        ("0.5 * report", "0.5 * me.price", "13:30: `reward` reads only `state`, `report` and numbers"),
        ("0.5 * report", "lower(report)",
         "13:24: unknown function `lower` in `reward`; expected one of `abs`, `max`, `min`"),
        ("reward 0.5 * state + 0.5 * report", "reward state == 1", "13:10: `reward` must be a number, not `bool`"),
        # expressions
        ("user == me.id", "user == prev.x", "5:39: `prev.x` is a transition fact; it belongs in a rubric"),
        ("user == me.id", "user == /x/", "5:39: a regex belongs in a rubric; an environment compares values"),
        ("user == me.id", "day < 3", "5:31: `<` compares two numbers or two dates, not `entity` and `int`"),
        ("user == me.id", "price in 3", "5:40: `in` needs a set literal `{a, b}` on its right"),
        ("user == me.id", "status in {active, gone}",
         "5:50: `gone` is not a member of `enum(active, cancelled)`; expected one of `active`, `cancelled`"),
        ("user == me.id", "price + \"a\" > 1", "5:31: `+` needs numbers, not `string`"),
        ("user == me.id", "lowr(user) == \"a\"", "5:31: unknown function `lowr`; did you mean `lower`?"),
        ("user == me.id", "min(price) > 1", "5:31: `min` takes at least 2 arguments, got 1"),
        ("user == me.id", "abs(user) > 1", "5:35: abs() takes a number, not `entity`"),
        ("user == me.id", "add_days(day, 1.5) == day", "5:45: add_days() takes a whole number, not `float`"),
        ("user == me.id", "count(me) > 1", "5:37: count() takes a table or a set literal `{...}`, not row of `users`"),
        ("user == me.id", "{user} == me.id", "5:31: a set literal `{...}` can only follow `in` or be counted"),
    ],
)
def test_error(old: str, new: str, expected: str) -> None:
    assert errors(edit(old, new)) == [expected]


def test_missing_task_solution_and_reward_are_each_reported() -> None:
    text = 'environment e "d" {\n  table t(id: key) rows 1..2\n}\n'
    assert errors(text) == [
        "1:13: environment `e` has no `reward`",
        "1:13: environment `e` has no `solution`",
        "1:13: environment `e` has no `task`",
    ]


def test_second_task_and_reserved_environment_name() -> None:
    text = VALID.replace('environment e "d"', 'environment pick "d"').replace("  report", '  task "again"\n  report')
    assert errors(text) == [
        "1:13: `pick` is a reserved word and cannot name an environment",
        "12:3: an environment has one `task`; this is the second",
    ]


def test_name_that_is_both_a_column_and_an_enum_member_is_ambiguous() -> None:
    text = edit("price: int 1..9", "price: int 1..9, active: bool")
    assert errors(text) == [
        "5:59: `active` is both a column and a member of `enum(active, cancelled)`; rename the column",
    ]


def test_every_error_is_reported_in_one_pass() -> None:
    text = (VALID.replace("name: name,", "name: nmae,").replace("status == active)", "status == actve)")
            .replace("cancel(trip.id)", "cancle(trip.id)").replace("$name", "$nme"))
    assert errors(text) == [
        "2:30: unknown generator `nmae`; did you mean `name`?",
        "5:59: `actve` is not a member of `enum(active, cancelled)`; did you mean `active`?",
        "7:48: unknown parameter `$nme`; did you mean `$name`?",
        "11:27: unknown tool `cancle`; did you mean `cancel`?",
    ]


def test_limits_on_tables_tools_and_solution_length() -> None:
    small = Limits(max_tables=1, max_tools=1, max_solution=1, max_string=10)
    assert check(VALID, small)[1] == [
        "3:9: too many tables: 2; the limit is 1",
        "6:8: a string of 18 characters; the limit is 10",
        "8:8: too many tools: 2; the limit is 1",
        "9:48: a string of 19 characters; the limit is 10",
        "11:3: the solution has 2 calls; the limit is 1",
    ]


def test_diagnostics_format_with_caret() -> None:
    module = parse(edit("status == active)", "status == actve)"), "t.rubric")
    env = module.decls[0]
    assert isinstance(env, ast.Environment)
    _, diagnostics = check_environment(env, Source("t.rubric", module.source))
    assert diagnostics[0].format().splitlines() == [
        "t.rubric:5:59: error: `actve` is not a member of `enum(active, cancelled)`; did you mean `active`?",
        "      let trip = pick(trips where user == me.id and status == actve)",
        "                                                              ^^^^^",
    ]
