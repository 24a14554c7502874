"""Validation of environments: the six shipped ones pass over 100 seeds; broken ones fail with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracec.trace_rl.envs.capability import compile_environment, load_environment
from tracec.trace_rl.envs.capability.validate import validate

REPO = Path(__file__).resolve().parents[3]
ENVS = sorted((REPO / "examples" / "envs").glob("*.rubric"))
TRIPS = (REPO / "tests" / "data" / "cancel_trip.rubric").read_text()


def test_each_shipped_environment_isolates_its_own_capability() -> None:
    capabilities = [load_environment(str(path)).capability for path in ENVS]
    assert capabilities == [path.stem for path in ENVS] and len(set(capabilities)) == 6


@pytest.mark.parametrize("path", ENVS, ids=lambda p: p.stem)
def test_shipped_environment_validates(path: Path) -> None:
    report = validate(load_environment(str(path)), seeds=100)
    assert report.ok, report.render()
    assert report.gold_mean == 1.0 and report.null_mean < 1.0 and report.random_mean < 1.0
    assert report.distinct_tasks >= 90 and report.seeds == 100


def test_render_shows_the_reports_figures_and_the_verdict() -> None:
    report = validate(compile_environment(TRIPS), seeds=5)
    lines = report.render().splitlines()
    name, seeds, gold, null, rand, distinct = lines[1].split()
    assert (name, int(seeds), int(distinct)) == (report.environment, report.seeds, report.distinct_tasks)
    assert [float(v) for v in (gold, null, rand)] == pytest.approx([report.gold_mean, report.null_mean,
                                                                    report.random_mean], abs=5e-4)
    assert lines[2] == "ok" and report.ok


@pytest.mark.parametrize(
    "old, new, reason",
    [
        ("reward 0.6 * state + 0.4 * report", "reward 0.5 * state + 0.4 * report",
         "seed 0: the gold solution scores 0.900 (state 1, report 1)"),
        ("; cancel(target.id)\n  report target.price\n  reward 0.6 * state + 0.4 * report", "\n  reward state",
         "seed 0: doing nothing scores 1; the task needs no change and no answer"),
        (('task "Hi, I\'m {me.name}. Please cancel my trip from {target.origin} to {target.dest} on {target.day}, '
          'and tell me the refund."'),
         'task "Please cancel my trip."',
         "only 1 distinct tasks in 10 seeds (need 90%); the task text should name what the seed picked"),
        ("status == active)", "status == active and price > 900)",
         ("seed 0: <string>:9:16: error: `pick(trips ...)` found no row in 32 draws of seed 0; "
          "loosen its condition or generate more rows")),
        ("set trips[$trip].status = cancelled", "set trips[$trip].status = active",
         "seed 0: doing nothing scores 1; the task needs no change and no answer"),
    ],
)
def test_broken_environment_fails_with_its_reason(old: str, new: str, reason: str) -> None:
    assert old in TRIPS
    text = TRIPS.replace(old, new)
    if "price > 900" in new or "status = active" in new:
        text = text.replace("  report target.price\n", "").replace("0.6 * state + 0.4 * report", "state")
    report = validate(compile_environment(text), seeds=10)
    assert not report.ok and report.reason == reason
    assert report.render().splitlines()[2] == f"FAILED: {reason}"


def test_random_agent_that_always_wins_fails_validation() -> None:
    text = """
environment trivial "any call wins" {
  table t(id: key, n: int 1..1000) rows 1..1
  let row = pick(t)
  task "bump {row.id} (n = {row.n})"
  tool bump(x: key)
    set t[$x].n = 0
  solution bump(row.id)
  reward state
}
"""
    report = validate(compile_environment(text), seeds=20)
    assert report.reason == "random tool calls score 1.000 on average; the task is hit by chance"
    with pytest.raises(ValueError, match="seeds must be at least 1"):
        validate(compile_environment(text), seeds=0)
