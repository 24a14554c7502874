"""The scoring API: one rubric compiled once, many batches; the TRL reward-function adapter."""

from __future__ import annotations

import json

import numpy as np
import pytest
from numerics import tolerance
from tracec.dsl.errors import DataError
from tracec.runtime.facts.trajectories.jsonl import Episode, read_trajectories
from tracec.runtime.scoring import RubricScorer, trl_reward_func

SOURCE = """
schema chat { state { solved: bool } action { tool: entity  ok: bool } }
rubric helpful for chat {
  evidence   solves  "the problem gets solved":  next.solved and not prev.solved
  execution  lookup  "calls the lookup tool":    act.tool == "lookup" and act.ok
  invalidity broken  "a call fails":             not act.ok
}
"""


def episode(name: str, calls: list[tuple[str, bool]], solved_at: int | None, task: str = "t") -> Episode:
    states = [{"solved": solved_at is not None and i >= solved_at} for i in range(len(calls) + 1)]
    actions = [{"tool": tool, "ok": ok} for tool, ok in calls]
    return Episode(episode=name, task=task, instruction="help", states=states, actions=actions,
                   env_reward=1.0 if solved_at is not None else 0.0, success=solved_at is not None)


@pytest.fixture(scope="module")
def scorer() -> RubricScorer:
    return RubricScorer.from_source(SOURCE, backend="interp")


def test_lists_files_and_batches_give_the_same_result(scorer, tmp_path):
    episodes = [episode("a", [("lookup", True), ("answer", True)], 2), episode("b", [("lookup", False)], None)]
    from_list = scorer.score(episodes)
    from_batch = scorer.score(scorer.fact_batch(episodes))
    np.testing.assert_array_equal(from_list.fired, from_batch.fired)
    np.testing.assert_array_equal(from_list.rewards.A, from_batch.rewards.A)
    assert from_list.fired.tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 1]]


def test_episode_returns_sum_the_trca_rewards(scorer):
    result = scorer.score([episode("a", [("lookup", True), ("answer", True)], 2), episode("b", [], None)])
    # a running sum's difference against a sum: the rule (tests/numerics.py) for 3 steps' rewards, at their size
    close = tolerance(3 + 2, float(np.abs(result.rewards.r_TRCA).sum()), np.float64)
    assert result.episode_returns().tolist() == pytest.approx([result.rewards.r_TRCA[:2].sum(), 0.0], abs=close)


def test_trl_reward_func_scores_completions_and_passes_none_through(scorer):
    def to_episode(prompt, completion, kind):
        if kind == "skip":
            return None
        calls = [(name, name != "bad") for name in completion.split()]
        return episode(prompt, calls, len(calls) if "answer" in completion else None)

    reward = trl_reward_func(scorer, to_episode)
    values = reward(["p1", "p2", "p3"], ["lookup answer", "bad", "lookup"], kind=["use", "use", "skip"])
    direct = scorer.score([to_episode("p1", "lookup answer", "use"), to_episode("p2", "bad", "use")])
    close = tolerance(direct.rewards.r_TRCA.size + 2, float(np.abs(direct.rewards.r_TRCA).sum()), np.float64)
    assert values[:2] == pytest.approx(direct.episode_returns().tolist(), abs=close)
    assert values[2] is None and values[0] > 0 > values[1]
    assert reward.__name__ == "tracec_helpful"


def _batch(n: int) -> list[Episode]:
    return [episode(f"e{i}", [("lookup", i % 2 == 0), ("answer", True)] * (1 + i % 3), 2 if i % 3 else None,
                    task=f"t{i % 4}") for i in range(n)]


def test_output_memory_is_the_callers_and_reused_only_when_handed_back():
    scorer = RubricScorer.from_source(SOURCE, backend="interp")
    big, small = _batch(12), _batch(5)
    first = scorer.score(big)
    kept = {name: getattr(first.rewards, name).copy() for name in ("r_F", "R", "A")}
    second = scorer.score(big)  # nothing handed back: fresh memory, `first` untouched
    assert not np.shares_memory(first.memory, second.memory)
    for name, values in kept.items():
        np.testing.assert_array_equal(getattr(first.rewards, name), values)
    third = scorer.score(small, out=second)  # `second` handed back: its block is refilled
    assert np.shares_memory(third.rewards.A, second.memory) and third.memory is second.memory
    np.testing.assert_array_equal(third.rewards.A, RubricScorer.from_source(SOURCE, backend="interp")
                                  .score(small).rewards.A)
    grown = scorer.score(_batch(40), out=third)  # too small a block to lend: fresh memory
    assert not np.shares_memory(grown.memory, third.memory)
    np.testing.assert_array_equal(first.rewards.A, kept["A"])


def test_a_file_sharing_no_field_with_the_rubric_is_an_error(scorer, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"episode": "a", "states": [{"done": True}, {}], "actions": [{"name": "x"}]}) + "\n")
    with pytest.raises(DataError) as caught:
        scorer.score(path)
    assert str(caught.value) == (
        f"{path}: error: no state or action has a value for any field the rubric reads (states: solved; actions: ok, "
        "tool); this file's states have: done; its actions: name")
    in_memory = scorer.score(read_trajectories(path))  # rollouts in memory may all miss their facts
    assert in_memory.fired.tolist() == [[0, 0, 0]]
