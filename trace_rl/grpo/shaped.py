"""Shaped episode-level GRPO: GRPO whose reward is a rubric's return, one advantage on every step of an episode.

The baseline that tells TRCA's per-step credit from its shaping: the same rubric, the same return, and no step term.
The reward is G_0, the return TRCA's own step term sees from the first step (`ScoredBatch.rewards.R` there):
sum_k gamma^k (r_TRCA,k + r_env,k), the rubric's step rewards and the environment's reward counted once, at the last
step, under the rubric's gamma (`tracec.runtime.rewards.trca.discounted_returns`). Not `ScoredBatch.episode_returns()`
(the sum of r_TRCA alone): without the environment's reward that is the shaping alone, a different task. It is
standardized among the episodes of a task group as GRPO standardizes rewards (`standardize.standardize_in_groups`);
the task groups are the rubric's (`FactBatch.task_group`), which the trainer's records make the rollout groups.
An episode without steps has no return (`runtime.rewards`): it counts as 0 in its group and gets no advantage.
Left out: turning rollouts into the rubric's episodes (the credit's set-up does, as it does for TRCA).
"""

from __future__ import annotations

import numpy as np
from tracec.runtime.scored_batch import ScoredBatch
from tracec.trace_rl.grpo.standardize import standardize_in_groups


def shaped_returns(scored: ScoredBatch) -> np.ndarray:
    """(n_episodes,) G_0 of each scored episode: its return at its first step, 0 without steps."""
    offsets = scored.batch.episode_offsets
    starts = offsets[:-1]
    has_steps = offsets[1:] > starts
    returns = np.zeros(len(starts))
    returns[has_steps] = scored.rewards.R[starts[has_steps]]
    return returns


def shaped_step_advantages(scored: ScoredBatch, *, divide_by_std: bool) -> list[np.ndarray]:
    """Per episode, (steps,): its standardized shaped return on every step."""
    advantages = standardize_in_groups(shaped_returns(scored), scored.batch.task_group,
                                       divide_by_std=divide_by_std)
    steps = np.diff(scored.batch.episode_offsets)
    return [np.full(n, a) for n, a in zip(steps, advantages)]
