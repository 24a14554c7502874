"""The task-group partition: episodes grouped by task in order of first appearance, cut into parts of about equal
steps for threads, and made once per evaluation for both the exact step groups and the advantages."""

from __future__ import annotations

import numpy as np
from tracec.compiler.context import Component, ContextKeys
from tracec.runtime.rewards import task_groups as task_groups_module
from tracec.runtime.rewards.task_groups import MIN_STEPS_PER_PART, task_groups
from tracec.runtime.rewards.trca import RewardConfig, evaluate_rewards, operator_weights


def test_episodes_are_grouped_by_task_in_order_of_first_appearance() -> None:
    keys = np.array([7, 3, 7, 9, 3, 7], dtype=np.int64).view(np.uint64)
    offsets = np.arange(7, dtype=np.int64)
    groups = task_groups(keys, offsets, threads=4)
    members = [groups.episodes[lo:hi].tolist() for lo, hi in zip(groups.starts[:-1], groups.starts[1:])]
    assert members == [[0, 2, 5], [1, 4], [3]]
    assert groups.cuts == [0, 3]  # six steps: not worth a second thread


def test_a_big_batch_is_cut_between_task_groups_into_parts_of_about_equal_steps() -> None:
    n_episodes, length = 4000, 40  # 160,000 steps: more than two parts' minimum
    offsets = np.arange(0, (n_episodes + 1) * length, length, dtype=np.int64)
    keys = (np.arange(n_episodes) % 1000).astype(np.int64).view(np.uint64)
    groups = task_groups(keys, offsets, threads=2)
    assert groups.cuts[0] == 0 and groups.cuts[-1] == 1000 and len(groups.cuts) > 2
    steps = [(hi - lo) * 4 * length for lo, hi in zip(groups.cuts[:-1], groups.cuts[1:])]
    assert min(steps) >= MIN_STEPS_PER_PART
    assert task_groups(keys, offsets, threads=1).cuts == [0, 1000]


def test_an_evaluation_groups_its_episodes_by_task_once(monkeypatch) -> None:
    """With a context to make exact and advantages to compute, the grouping kernel runs once, not once for each."""
    calls = []
    grouped = task_groups_module.group_by_key

    def counted(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls.append(keys.shape[0])
        return grouped(keys)

    monkeypatch.setattr(task_groups_module, "group_by_key", counted)
    offsets = np.array([0, 2, 5, 6], dtype=np.int64)
    hashes = np.array([1, 2, 1, 1, 2, 1], dtype=np.int64)
    word = Component(kind="word", values=hashes.copy(), known=np.ones(6, dtype=np.uint8))
    config = RewardConfig()
    fire, coverage = operator_weights(["evidence", "invalidity"], config)
    O = np.array([[1, 0], [0, 1], [1, 1], [0, 0], [1, 0], [0, 1]], dtype=np.uint8)
    result = evaluate_rewards(O, offsets, np.array([1.0, 0.0, 1.0]), np.array([4, 4, 5]),
                              ContextKeys(hash=hashes, components=(word,)), fire, coverage, config, threads=1)
    assert calls == [3]
    assert result.A_E[0] > 0 > result.A_E[2]  # the task group of episodes 0 and 1 standardized together
