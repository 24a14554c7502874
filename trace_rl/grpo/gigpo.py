"""GiGPO's credit (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training", arXiv 2505.10978):
each step t of episode i gets A = A_E(tau_i) + omega * A_S(s_t, a_t), from the environment's own rewards and states.

- A_E (Eq. 3): the episode's return R(tau_i) = sum_t r_t, standardized among the K episodes of its group as GRPO
  standardizes rewards (`standardize.standardize_in_groups`): F_norm the group's std, or 1 (`divide_by_std=False`,
  verl-agent's default "mean_norm").
- R_t (Eq. 5): the discounted return sum_k gamma^k r_{t+k} (gamma = 0.95 in the paper).
- Anchor-state groups (Eq. 6): within one episode group, the steps whose state before the action is the same state.
  A state an episode comes back to is one more member of its group, once per visit.
- A_S (Eq. 7): R_t standardized within its anchor-state group, by the same F_norm; a state no other step shares is
  its own mean: A_S = 0. omega (Eq. 8) is `step_weight`, 1 in the paper.

The rewards are the environment's, as a rollout keeps them: the trajectory records one `env_reward` per episode,
paid on the last step (0 before), as the protocol pays it, so r = (0, ..., 0, env_reward) and R(tau) = env_reward,
GRPO's reward, whatever ended the episode: with omega = 0 this is GRPO's credit, bit for bit. The anchor states
are the trajectory's own `states[t]`, the canonical facts before action t (never declared per run), each keyed by
`anchor_key`: a 64-bit BLAKE2b hash of the state as canonical JSON (keys sorted, so their order does not matter;
values compared exactly, lists in order, 1 and 1.0 apart). A hash rather than the dict itself: a step is then one
integer, grouped as GRPO groups episodes; two distinct states among a group's few hundred share a key with odds
below 1e-14.

Where tracec departs from verl-agent (`gigpo/core_gigpo.py`): its std is torch's sample std (divide by n - 1), here
the population std, as tracec's GRPO and TRCA take it; it gives a group of one episode mean 0 and std 1 (so A_E is
the episode's raw return), here A_E = 0, as GRPO gives it; and it takes an episode group's mean and std over the
batch's rows, one per step (a longer episode weighs more), here over the episodes, as Eq. 3 reads.
Left out: similarity-based anchor groups (verl-agent's `enable_similarity`), the step advantage spread per token.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tracec.trace_rl.grpo.standardize import standardize_in_groups
from tracec.trace_rl.rollouts.engine import EpisodeRollout

GIGPO_GAMMA = 0.95  # the step returns' discount in GiGPO's paper


def anchor_key(state: Mapping[str, Any]) -> int:
    """The state's key, in [0, 2^64): equal for equal states whatever the order of their keys."""
    text = json.dumps(state, sort_keys=True, separators=(",", ":"))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def environment_steps(rollout: EpisodeRollout) -> tuple[np.ndarray, np.ndarray]:
    """(rewards, anchors), each (steps,) for the trajectory's steps: the environment's reward of each step (its
    `env_reward` on the last) and the anchor key of the state before each action."""
    record = rollout.trajectory
    states, steps = record["states"], len(record["actions"])
    if len(states) != steps + 1:
        raise ValueError(f"episode {rollout.episode}: {len(states)} states for {steps} actions; a trajectory "
                         "records one state more than actions (docs/trajectories.md)")
    rewards = np.zeros(steps)
    if steps:
        rewards[-1] = rollout.reward
    return rewards, np.array([anchor_key(state) for state in states[:steps]], dtype=np.uint64)


def step_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """(steps,) R_t = sum_k gamma^k r_{t+k} of one episode's step rewards (steps,)."""
    returns = np.empty(len(rewards))
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        returns[t] = running
    return returns


def gigpo_step_advantages(groups: np.ndarray, rewards: Sequence[np.ndarray], anchors: Sequence[np.ndarray], *,
                          gamma: float, step_weight: float, divide_by_std: bool) -> list[np.ndarray]:
    """Per episode, its steps' A = A_E + step_weight * A_S, (steps,) each: from each episode's group id
    (`groups` (n,)), step rewards (steps,) and anchor keys (steps,). An episode without steps still counts in its
    group's A_E (with R = 0) and gets an empty array."""
    groups = np.asarray(groups)
    if not len(groups) == len(rewards) == len(anchors):
        raise ValueError(f"{len(groups)} group ids, {len(rewards)} reward lists and {len(anchors)} anchor lists: "
                         "one of each per episode")
    lengths = [len(r) for r in rewards]
    for episode, (length, keys) in enumerate(zip(lengths, anchors)):
        if len(keys) != length:
            raise ValueError(f"episode {episode}: {length} step rewards but {len(keys)} anchor keys")
    episode_advantages = standardize_in_groups(np.array([np.sum(r) for r in rewards], dtype=np.float64), groups,
                                               divide_by_std=divide_by_std)
    returns = np.concatenate([step_returns(r, gamma) for r in rewards] + [np.zeros(0)])
    step_advantages = standardize_in_groups(returns, anchor_groups(groups, anchors), divide_by_std=divide_by_std)
    joint = np.repeat(episode_advantages, lengths) + step_weight * step_advantages
    return [joint[start:start + length] for start, length in zip(np.cumsum([0, *lengths]), lengths)]


def anchor_groups(groups: np.ndarray, anchors: Sequence[np.ndarray]) -> np.ndarray:
    """(all steps,) int64: one id per distinct (episode group, anchor key) pair, for every step of every episode in
    order. Python ints, not one numpy array: keys beside small ids would be cast to float64, and collide."""
    ids: dict[tuple[int, int], int] = {}
    return np.array([ids.setdefault((int(group), int(key)), len(ids))
                     for group, keys in zip(groups, anchors) for key in keys], dtype=np.int64)
