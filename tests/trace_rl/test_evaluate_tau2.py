"""`evaluate` on tau2-bench: the gold agent scores 1 on every task it runs, a do-nothing agent the benchmark's own
value for it (DB hash unchanged by the gold actions and nothing to communicate); the table, the union ceiling and
the routing confusion table; a rerun on the same folder replays nothing, a killed one replays only the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tracec.trace_rl.envs.capability.validate import NullAgent
from tracec.trace_rl.envs.tau2 import Tau2Environment, Tau2Tools, replay_gold
from tracec.trace_rl.envs.tau2.gold import GoldAgent, gold_user
from tracec.trace_rl.targeting.eval_table import TaskResult, summarize
from tracec.trace_rl.targeting.evaluate import Condition, EvalDomain, EvalError, evaluate, read_condition_trajectories
from tracec.trace_rl.targeting.routing import RouteDecision

TASKS = 12  # per domain: the first twelve tasks of airline and of retail


def _domains(domains):  # type: ignore[no-untyped-def]
    def factory(domain):  # type: ignore[no-untyped-def]
        return lambda: Tau2Environment(domain, user=gold_user(), max_steps=40)

    return [EvalDomain(name=name, make_env=factory(domains[name]), seeds=tuple(range(TASKS)))
            for name in ("airline", "retail")]


def _do_nothing_value(domain, task) -> float:  # type: ignore[no-untyped-def]
    """The benchmark's rule, computed apart from the environment's scorer: the DB check compares the stable hash
    (sha256 of sorted-key JSON) of the untouched database with the gold actions' database; COMMUNICATE needs every
    info string in an agent message, and a do-nothing agent says none."""
    untouched = Tau2Tools(domain).db.stable_hash()
    gold = replay_gold(domain, task)[0].db.stable_hash()
    return 1.0 if untouched == gold and not task.communicate_info else 0.0


CONDITIONS = [Condition(name="gold", make_agent=GoldAgent),
              Condition(name="nothing", make_agent=lambda env: NullAgent())]


def test_gold_scores_one_and_doing_nothing_scores_the_benchmarks_value(domains, tmp_path: Path) -> None:
    lines: list[str] = []
    table = evaluate(_domains(domains), CONDITIONS, tmp_path, max_turns=40, fingerprint={"test": 1},
                     report=lines.append)
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(results) == 2 * 2 * TASKS and len(lines) == len(results)
    expected_nothing = {}
    for name in ("airline", "retail"):
        tasks = list(domains[name].tasks.values())[:TASKS]
        for seed, task in enumerate(tasks):
            expected_nothing[(name, seed)] = _do_nothing_value(domains[name], task)
    for result in results:
        if result["condition"] == "gold":
            assert result["reward"] == 1.0 and result["success"], result
        else:
            assert result["reward"] == expected_nothing[(result["domain"], result["seed"])], result
    assert 0 < sum(expected_nothing.values()) < len(expected_nothing)  # the sample has tasks of both kinds
    for name in ("airline", "retail"):
        assert table.cell("gold", name).pass_rate == 1.0
        nothing = [v for (d, _), v in expected_nothing.items() if d == name]
        assert table.cell("nothing", name).passed == sum(nothing)
    overall = table.cell("nothing")
    # a ratio of counts: one correctly rounded division each way, exact
    assert overall.tasks == 2 * TASKS and overall.pass_rate == sum(expected_nothing.values()) / 24
    assert table.cell("oracle").pass_rate == 1.0  # gold passes everything: the union ceiling is 1
    saved = json.loads((tmp_path / "table.json").read_text())
    assert saved["table"]["nothing"]["overall"]["passed"] == overall.passed
    assert "| gold | 100.0% (12/12) | 100.0% (12/12) | 100.0% (24/24)" in (tmp_path / "table.md").read_text()
    trajectories = read_condition_trajectories(tmp_path, "gold")
    assert [t["episode"] for t in trajectories][:2] == ["airline:0", "airline:1"]
    assert all(t["success"] for t in trajectories) and trajectories[0]["domain"] == "airline"


class Counting:
    def __init__(self) -> None:
        self.episodes = 0

    def make(self, env):  # type: ignore[no-untyped-def]
        self.episodes += 1
        return GoldAgent(env)


def test_a_rerun_replays_nothing_and_a_killed_run_only_the_rest(domains, tmp_path: Path) -> None:
    counter = Counting()
    conditions = [Condition(name="gold", make_agent=counter.make)]
    evaluate(_domains(domains), conditions, tmp_path, max_turns=40, fingerprint={"a": 1})
    assert counter.episodes == 2 * TASKS
    evaluate(_domains(domains), conditions, tmp_path, max_turns=40, fingerprint={"a": 1})
    assert counter.episodes == 2 * TASKS  # all done: nothing replayed
    # As if killed: the last result is torn and the trajectory of an unfinished task was written.
    results = tmp_path / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join(lines[:-3]) + lines[-3][: len(lines[-3]) // 2])
    table = evaluate(_domains(domains), conditions, tmp_path, max_turns=40, fingerprint={"a": 1})
    assert counter.episodes == 2 * TASKS + 3
    assert table.cell("gold").tasks == 2 * TASKS
    episodes = [t["episode"] for t in read_condition_trajectories(tmp_path, "gold")]
    assert len(episodes) == len(set(episodes)) == 2 * TASKS
    with pytest.raises(EvalError, match="other settings .*a.* differ"):
        evaluate(_domains(domains), conditions, tmp_path, max_turns=40, fingerprint={"a": 2})
    evaluate(_domains(domains), conditions, tmp_path, max_turns=40, fingerprint={"a": 2}, fresh=True)
    assert counter.episodes == 4 * TASKS + 3


def _result(condition: str, domain: str, seed: int, success: bool, choice: str | None = None) -> TaskResult:
    route = RouteDecision(choice=choice, label="A", logits={}).record() if choice else None
    return TaskResult(condition=condition, domain=domain, seed=seed, task=f"{domain}/{seed}",
                      reward=float(success), success=success, turns=1, seconds=0.0, route=route)


def test_the_routing_confusion_table_and_the_union_ceiling() -> None:
    results = [
        _result("base", "a", 0, False), _result("base", "a", 1, True), _result("base", "b", 0, False),
        _result("x", "a", 0, True), _result("x", "a", 1, False), _result("x", "b", 0, False),
        _result("routed", "a", 0, True, "x"), _result("routed", "a", 1, False, "x"),
        _result("routed", "b", 0, False, "base"),
    ]
    table = summarize(results, ["base", "x", "routed"], ["a", "b"])
    assert table.conditions == ("base", "x", "routed", "oracle")
    assert table.cell("oracle", "a").passed == 2 and table.cell("oracle", "b").passed == 0
    assert table.cell("routed").pass_rate == 1 / 3  # 1 of 3 tasks: one division, exact
    assert table.routing == {"a": {"x": 2}, "b": {"base": 1}}
    assert table.routing_hits == {"a": (1, 2), "b": (0, 1)}
    text = table.markdown()
    assert "| a | 0 | 2 | 1/2 |" in text and "| b | 1 | 0 | 0/1 |" in text
