"""pass^k as tau2-bench defines it (per task C(c, k) / C(n, k), averaged over tasks), its properties, the table
that shows it, and `evaluate` with several trials: distinct deterministic episode seeds, the first trial being the
one-trial run (its result line unchanged), a one-trial folder resuming into a k-trial one."""

from __future__ import annotations

import json
import random
from itertools import pairwise
from math import comb
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from numerics import tolerance
from tracec.trace_rl.envs.protocol import Environment, Observation, StepResult
from tracec.trace_rl.targeting.eval_table import TaskResult, pass_hat, pass_k, summarize
from tracec.trace_rl.targeting.evaluate import (
    Condition,
    EvalDomain,
    episode_seed,
    evaluate,
    read_condition_trajectories,
)

# A mean over two tasks of C(c, k) / C(n, k): a division each, a sum, a halving; values <= 1 (tests/numerics.py).
MEAN_OF_TWO = tolerance(4, 1.0, float)


def test_pass_hat_is_the_formula_transcribed() -> None:
    # n = 4 trials, c = 2 passed: C(2, k) / C(4, k) = 2/4, 1/6, 0/4, 0/1.
    assert [pass_hat(4, 2, k) for k in (1, 2, 3, 4)] == [0.5, 1 / 6, 0.0, 0.0]
    assert pass_hat(3, 3, 3) == 1.0 and pass_hat(5, 0, 1) == 0.0
    assert pass_k([(4, 2), (4, 4)]) == pytest.approx((0.75, (1 / 6 + 1) / 2, 0.5, 0.5), abs=MEAN_OF_TWO)
    assert pass_k([(2, 1), (3, 3)]) == pytest.approx((0.75, 0.5), abs=MEAN_OF_TWO)  # up to the fewest trials
    assert pass_k([]) == ()
    with pytest.raises(ValueError):
        pass_hat(2, 1, 3)


tasks = st.lists(st.integers(1, 8).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))), min_size=1,
                 max_size=12)


@given(tasks)
def test_pass_k_is_non_increasing_and_pass_1_is_the_mean_success(cells: list[tuple[int, int]]) -> None:
    values = pass_k(cells)
    close = tolerance(len(cells) + 2, 1.0, float)  # a mean of ratios <= 1, each one division (tests/numerics.py)
    assert len(values) == min(n for n, _ in cells)
    assert all(later <= earlier + close for earlier, later in pairwise(values))
    assert values[0] == pytest.approx(sum(c / n for n, c in cells) / len(cells), abs=close)
    assert all(v == pytest.approx(sum(comb(c, k) / comb(n, k) for n, c in cells) / len(cells), abs=close)
               for k, v in enumerate(values, 1))


def _result(seed: int, trial: int, success: bool, domain: str = "a") -> TaskResult:
    return TaskResult(condition="x", domain=domain, seed=seed, task=str(seed), reward=float(success), success=success,
                      turns=1, seconds=0.0, trial=trial)


def test_the_table_shows_pass_k_beside_the_first_trials_pass_rate() -> None:
    # task 0: 2 of 4 passed (its first trial did), task 1: 4 of 4.
    outcomes = {0: [True, False, True, False], 1: [True] * 4}
    results = [_result(s, t, ok) for s, row in outcomes.items() for t, ok in enumerate(row)]
    table = summarize(results, ["x"], ["a"])
    cell = table.cell("x", "a")
    assert (cell.tasks, cell.passed) == (2, 2)  # the pass rate counts each task's first trial
    assert cell.pass_k == pytest.approx((0.75, (1 / 6 + 1) / 2, 0.5, 0.5), abs=MEAN_OF_TWO)
    text = table.markdown()
    assert "| pass^1 | pass^2 | pass^3 | pass^4 |" in text
    assert "| x | a | 0.750 | 0.583 | 0.500 | 0.500 |" in text and "| x | overall | 0.750 |" in text
    assert table.to_json()["table"]["x"]["a"]["pass_k"]["2"] == pytest.approx(7 / 12, abs=MEAN_OF_TWO)
    assert "pass^" not in summarize([_result(0, 0, True)], ["x"], ["a"]).markdown()  # one trial: as before


class Coin(Environment):
    """A one-step environment whose reward is the agent's word: `pass` or anything else."""

    system_prompt = "say pass"

    def reset(self, seed: int) -> Observation:
        self.seed, self.said = seed, ""
        return Observation(text=f"task {seed}")

    def step(self, text: str) -> StepResult:
        self.said = text
        return StepResult(observation=Observation(text="ok"), done=True, reward=float(text == "pass"), state={},
                          action={})

    def trajectory(self, episode: str) -> dict[str, Any]:
        ok = self.said == "pass"
        return {"episode": episode, "task": str(self.seed), "env_reward": float(ok), "success": ok,
                "actions": [self.said]}


class Sampler:
    """Draws from Python's `random`, as a sampling agent would: what the episode seed decides."""

    def act(self, messages: Any) -> str:
        return "pass" if random.random() < 0.5 else "fail"


def _run(out: Path, trials: int) -> Any:
    domains = [EvalDomain(name="coin", make_env=Coin, seeds=(0, 1, 2))]
    return evaluate(domains, [Condition(name="s", make_agent=lambda env: Sampler())], out, max_turns=2,
                    fingerprint={"t": 1}, trials=trials)


def test_trials_have_deterministic_seeds_and_a_one_trial_folder_resumes(tmp_path: Path) -> None:
    assert [episode_seed(7, 0)] == [7] and len({episode_seed(7, t) for t in range(20)}) == 20
    assert episode_seed(7, 3) == episode_seed(7, 3) != episode_seed(8, 3)
    _run(tmp_path / "one", 1)
    one = (tmp_path / "one" / "results.jsonl").read_text().splitlines()
    assert all("trial" not in json.loads(line) for line in one)  # the line of a one-trial run, as it always was
    table = _run(tmp_path / "one", 4)  # resumes: plays trials 1..3 only
    lines = [json.loads(line) for line in (tmp_path / "one" / "results.jsonl").read_text().splitlines()]
    assert [json.dumps(line) for line in lines[:3]] == [json.dumps(json.loads(line)) for line in one]
    assert len(lines) == 12 and {(r["seed"], r["trial"]) for r in lines[3:]} == {(s, t) for s in range(3)
                                                                                 for t in (1, 2, 3)}
    assert all(r["episode_seed"] == episode_seed(r["seed"], r["trial"]) for r in lines[3:])
    assert [t["episode"] for t in read_condition_trajectories(tmp_path / "one", "s")][3:5] == ["coin:0#1", "coin:0#2"]
    again = _run(tmp_path / "other", 4)  # the same seeds in a fresh folder: the same outcomes
    assert again.cell("s").pass_k == table.cell("s").pass_k and len(table.cell("s").pass_k) == 4
    assert table.cell("s").tasks == 3
