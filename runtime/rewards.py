"""TRCA step rewards and completion-aware returns over a batch of episodes (LANGUAGE.md, "Rewards (exact)").

Input is the operator matrix `O` a compiled rubric produces, `(n_steps, n_ops)` uint8, with the episodes laid end to
end and delimited by `episode_offsets` `(n_episodes + 1,)`: episode i owns steps `offsets[i]:offsets[i+1]`, possibly
none. The per-step work runs in Numba kernels (one pass over `O` for r_F and r_B, one reverse scan per episode for
the returns); the group-relative advantages live in `advantages.py`, and `evaluate_rewards` chains all of it.

Left out: reading rubrics (the compiler turns a rubric's categories and budgets into the weights here), token-level
credit (the trainer spreads a step's advantage over that step's action tokens), and any notion of "success" beyond
the scalar `env_reward` per episode. An episode without steps has nowhere to carry its env reward: it gets no return.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from tracec.runtime.advantages import episode_advantage, step_advantage

CATEGORY_CODES = {"evidence": 0, "execution": 1, "invalidity": 2}


@dataclass(frozen=True, kw_only=True)
class RewardConfig:
    """A rubric's budgets r_c, the TRCA mix lambda, the discount gamma and the advantage epsilon."""

    budget_evidence: float = 1.0
    budget_execution: float = 1.0
    budget_invalidity: float = 1.0
    lam: float = 0.8
    gamma: float = 0.95
    eps: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("budget_evidence", "budget_execution", "budget_invalidity", "lam", "gamma", "eps"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"RewardConfig.{name} must be a finite number, got {getattr(self, name)!r}")
        # Coverage is a potential that only grows; a negative budget would make breakthroughs penalties.
        for name in ("budget_evidence", "budget_execution"):
            if getattr(self, name) < 0:
                raise ValueError(f"RewardConfig.{name} must be >= 0, got {getattr(self, name)!r} "
                                 "(invalidity is the category that penalises)")
        for name in ("lam", "gamma"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"RewardConfig.{name} must lie in [0, 1], got {getattr(self, name)!r}")
        if self.eps < 0:
            raise ValueError(f"RewardConfig.eps must be >= 0, got {self.eps!r}")


def operator_weights(categories: Sequence[str], config: RewardConfig) -> tuple[np.ndarray, np.ndarray]:
    """(fire_weight (n_ops,), coverage_weight (n_ops,)) of operators listed by category, in column order of `O`.

    fire_weight is q when O = 1: +r_c/M_c for evidence and execution, -|r_inval|/M_inval for invalidity;
    coverage_weight is the operator's share of the potential Phi: r_c/M_c for evidence and execution, 0 for
    invalidity. A category with no operators has no share to divide, so it contributes nothing.
    """
    unknown = [(j, c) for j, c in enumerate(categories) if c not in CATEGORY_CODES]
    if unknown:
        j, c = unknown[0]
        raise ValueError(f"operator {j} has category {c!r}; expected one of {', '.join(CATEGORY_CODES)}")
    codes = np.array([CATEGORY_CODES[c] for c in categories], dtype=np.int64)
    counts = np.bincount(codes, minlength=len(CATEGORY_CODES))
    share = np.array([config.budget_evidence, config.budget_execution, -abs(config.budget_invalidity)])
    per_op = share[codes] / np.maximum(counts[codes], 1)  # counts[codes] >= 1 wherever codes has an entry
    fire_weight = per_op.astype(np.float64)
    coverage_weight = np.where(codes == CATEGORY_CODES["invalidity"], 0.0, per_op).astype(np.float64)
    return fire_weight, coverage_weight


@dataclass(frozen=True)
class StepRewards:
    """Everything TRCA computes per step, each `(n_steps,)` float64, in the step order of `O`."""

    r_F: np.ndarray
    r_B: np.ndarray
    r_TRCA: np.ndarray
    R: np.ndarray
    A_E: np.ndarray
    A_S: np.ndarray
    A: np.ndarray


def segment_ids(offsets: np.ndarray) -> np.ndarray:
    """Step -> episode index `(n_steps,)` int64 for episodes delimited by `offsets`."""
    offsets = np.asarray(offsets, dtype=np.int64)
    return np.repeat(np.arange(offsets.size - 1, dtype=np.int64), np.diff(offsets))


@njit(cache=True)
def _trca_kernel(O: np.ndarray, offsets: np.ndarray, fire_weight: np.ndarray, coverage_weight: np.ndarray,
                 lam: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_steps, n_ops = O.shape
    r_f = np.zeros(n_steps)
    r_b = np.zeros(n_steps)
    covered = np.zeros(n_ops, np.bool_)
    for e in range(offsets.shape[0] - 1):
        covered[:] = False
        for t in range(offsets[e], offsets[e + 1]):
            fired = 0.0
            # Phi_t - Phi_{t-1} is exactly the weight of the operators covered for the first time at t: summing
            # only those keeps r_B >= 0 without float cancellation.
            newly = 0.0
            for j in range(n_ops):
                if O[t, j] != 0:
                    fired += fire_weight[j]
                    if not covered[j]:
                        covered[j] = True
                        newly += coverage_weight[j]
            r_f[t] = fired
            r_b[t] = newly
    return r_f, r_b, (1.0 - lam) * r_f + lam * r_b


@njit(cache=True)
def _returns_kernel(r_trca: np.ndarray, env_reward: np.ndarray, offsets: np.ndarray, gamma: float) -> np.ndarray:
    returns = np.zeros(r_trca.shape[0])
    for e in range(offsets.shape[0] - 1):
        start, stop = offsets[e], offsets[e + 1]
        if stop == start:
            continue
        acc = r_trca[stop - 1] + env_reward[e]
        returns[stop - 1] = acc
        for t in range(stop - 2, start - 1, -1):
            acc = r_trca[t] + gamma * acc
            returns[t] = acc
    return returns


def _check_offsets(offsets: np.ndarray, n_steps: int) -> np.ndarray:
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or offsets.size < 1:
        raise ValueError(f"episode_offsets must be 1-D with n_episodes + 1 entries, got shape {offsets.shape}")
    if offsets[0] != 0 or offsets[-1] != n_steps:
        raise ValueError(f"episode_offsets must run from 0 to n_steps = {n_steps}, "
                         f"got {offsets[0]} .. {offsets[-1]}")
    drops = np.flatnonzero(np.diff(offsets) < 0)
    if drops.size:
        i = int(drops[0])
        raise ValueError(f"episode_offsets must not decrease: offsets[{i}] = {offsets[i]} > "
                         f"offsets[{i + 1}] = {offsets[i + 1]}")
    return offsets


def _check_weights(fire_weight: np.ndarray, coverage_weight: np.ndarray, n_ops: int) -> tuple[np.ndarray, ...]:
    out = []
    for name, w in (("fire_weight", fire_weight), ("coverage_weight", coverage_weight)):
        w = np.ascontiguousarray(w, dtype=np.float64)
        if w.shape != (n_ops,):
            raise ValueError(f"{name} must have shape ({n_ops},) to match O's columns, got {w.shape}")
        out.append(w)
    return tuple(out)


def trca_rewards(O: np.ndarray, episode_offsets: np.ndarray, fire_weight: np.ndarray,
                 coverage_weight: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(r_F, r_B, r_TRCA), each `(n_steps,)`, from `O` `(n_steps, n_ops)`; coverage restarts with every episode."""
    O = np.asarray(O)
    if O.ndim != 2:
        raise ValueError(f"O must be 2-D (n_steps, n_ops), got shape {O.shape}")
    if O.dtype != np.uint8:
        if O.dtype != np.bool_:
            raise ValueError(f"O must be uint8 (or bool), got dtype {O.dtype}")
        O = O.view(np.uint8)
    offsets = _check_offsets(episode_offsets, O.shape[0])
    fire, coverage = _check_weights(fire_weight, coverage_weight, O.shape[1])
    return _trca_kernel(np.ascontiguousarray(O), offsets, fire, coverage, float(lam))


def discounted_returns(r_trca: np.ndarray, env_reward: np.ndarray, episode_offsets: np.ndarray,
                       gamma: float) -> np.ndarray:
    """R_t = sum_{k>=t} gamma^(k-t) (r_env,k + r_TRCA,k), the env reward counted once, at the episode's last step."""
    r_trca = np.ascontiguousarray(r_trca, dtype=np.float64)
    offsets = _check_offsets(episode_offsets, r_trca.shape[0])
    env_reward = np.ascontiguousarray(env_reward, dtype=np.float64)
    if env_reward.shape != (offsets.size - 1,):
        raise ValueError(f"env_reward must have one entry per episode ({offsets.size - 1}), got {env_reward.shape}")
    return _returns_kernel(r_trca, env_reward, offsets, float(gamma))


def evaluate_rewards(O: np.ndarray, episode_offsets: np.ndarray, env_reward: np.ndarray, task_group: np.ndarray,
                     context_key: np.ndarray | None, fire_weight: np.ndarray, coverage_weight: np.ndarray,
                     config: RewardConfig) -> StepRewards:
    """All of TRCA for one batch: step rewards, returns, and A = A_E (broadcast to the steps) + A_S.

    `task_group` `(n_episodes,)` int64 names each episode's task instance; `context_key` `(n_steps,)` int64 (hashes
    of the rubric's context tuple) or None when the rubric declares no context.
    """
    r_f, r_b, r_trca = trca_rewards(O, episode_offsets, fire_weight, coverage_weight, config.lam)
    returns = discounted_returns(r_trca, env_reward, episode_offsets, config.gamma)
    step_episode = segment_ids(episode_offsets)
    a_e = episode_advantage(env_reward, task_group, config.eps)
    a_s = step_advantage(returns, np.asarray(task_group, dtype=np.int64)[step_episode], context_key, config.eps)
    a_e_steps = a_e[step_episode]
    return StepRewards(r_F=r_f, r_B=r_b, r_TRCA=r_trca, R=returns, A_E=a_e_steps, A_S=a_s, A=a_e_steps + a_s)
