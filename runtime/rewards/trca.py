"""TRCA step rewards and completion-aware returns over a batch of episodes (LANGUAGE.md, "Rewards (exact)").

Input is the operator matrix `O` a compiled rubric produces, `(n_steps, n_ops)` uint8, with the episodes laid end to
end and delimited by `episode_offsets` `(n_episodes + 1,)`: episode i owns steps `offsets[i]:offsets[i+1]`, possibly
none. The per-step work runs in the fixed kernels (`reward_kernels`, in C as runtime/_fixed.c; `fixed_kernels`):
one pass over `O` for r_F and r_B, one reverse scan per episode for the returns. The group-relative advantages live
in `advantages.py`, and `evaluate_rewards` chains all of it, over one task-group partition (`task_groups`) that the
exact step groups and the advantages share.

Left out: reading rubrics (the compiler turns a rubric's categories and budgets into the weights here), token-level
credit (the trainer spreads a step's advantage over that step's action tokens), and any notion of "success" beyond
the scalar `env_reward` per episode. An episode without steps has nowhere to carry its env reward: it gets no return.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tracec.compiler.context import ContextKeys
from tracec.compiler.threads import balanced_cuts, default_threads, run_parts
from tracec.dsl.defaults import DEFAULT_BUDGET, DEFAULT_GAMMA, DEFAULT_LAMBDA, DEFAULT_STEP_SCALE, STEP_SCALES
from tracec.runtime.rewards.advantages import fill_trca_advantages
from tracec.runtime.rewards.batch_checks import check_offsets, finite_values, int_keys, output_rows
from tracec.runtime.rewards.context_groups import exact_context_keys
from tracec.runtime.rewards.fixed_kernels import fixed_kernels
from tracec.runtime.rewards.task_groups import MIN_STEPS_PER_PART, task_groups

CATEGORY_CODES = {"evidence": 0, "execution": 1, "invalidity": 2}


@dataclass(frozen=True, kw_only=True)
class RewardConfig:
    """A rubric's budgets r_c, the TRCA mix lambda, the discount gamma, the advantage epsilon and how A_S is
    scaled: `std` ((R_t - mean) / (std + eps) in its step group) or `none` (R_t - mean)."""

    budget_evidence: float = DEFAULT_BUDGET
    budget_execution: float = DEFAULT_BUDGET
    budget_invalidity: float = DEFAULT_BUDGET
    lam: float = DEFAULT_LAMBDA
    gamma: float = DEFAULT_GAMMA
    eps: float = 1e-6
    step_scale: str = DEFAULT_STEP_SCALE

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
        if self.step_scale not in STEP_SCALES:
            raise ValueError(f"RewardConfig.step_scale must be one of {', '.join(STEP_SCALES)}, "
                             f"got {self.step_scale!r}")
        if not math.isfinite(self.budget_evidence + self.budget_execution + abs(self.budget_invalidity)):
            raise ValueError("RewardConfig budgets must add up to a finite number (a step's reward is their sum)")


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
    per_op = share[codes] / counts[codes]  # an empty category has no operator here, so no division by 0
    return per_op, np.where(codes == CATEGORY_CODES["invalidity"], 0.0, per_op)


@dataclass(frozen=True)
class StepRewards:
    """Everything TRCA computes per step, each `(n_steps,)` float64, in the step order of `O`.

    From `evaluate_rewards` the seven are rows of one block, which lives while any of them does (copy one to keep
    it alone)."""

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


def _step_rewards(O: np.ndarray, offsets: np.ndarray, tables: tuple[np.ndarray, np.ndarray], lam: float,
                  env_reward: np.ndarray, gamma: float, r_f: np.ndarray, r_b: np.ndarray, r_trca: np.ndarray,
                  returns: np.ndarray) -> None:
    """Fill r_f, r_b, r_trca and (unless empty) returns; a rubric of more than 64 operators goes 64 at a time."""
    fire_table, cover_table = tables
    kernel = fixed_kernels().trca_kernel
    for lo in range(0, max(O.shape[1], 1), 64):  # no operators: still one pass, to fill the outputs
        last = lo + 64 >= O.shape[1]
        chunks = slice(lo // 8, lo // 8 + 8)
        kernel(O[:, lo:lo + 64], offsets, fire_table[chunks], cover_table[chunks], lo > 0, lam, env_reward, gamma, r_f,
               r_b, r_trca if last else r_trca[:0], returns if last else returns[:0])


def _weight_tables(fire_weight: np.ndarray, coverage_weight: np.ndarray,
                   n_ops: int) -> tuple[np.ndarray, np.ndarray]:
    """The checked weights as chunk tables (`reward_kernels.chunk_table`): (fire, coverage)."""
    out = []
    for name, w in (("fire_weight", fire_weight), ("coverage_weight", coverage_weight)):
        w = np.ascontiguousarray(w, dtype=np.float64)
        if w.shape != (n_ops,):
            raise ValueError(f"{name} must have shape ({n_ops},) to match O's columns, got {w.shape}")
        if not np.isfinite(w).all():
            raise ValueError(f"{name} has a non-finite entry at index {int(np.flatnonzero(~np.isfinite(w))[0])}")
        table = np.zeros(((n_ops + 7) // 8, 256))
        fixed_kernels().chunk_table(w, table)
        out.append(table)
    return out[0], out[1]


def _check_operators(O: np.ndarray) -> np.ndarray:
    O = np.asarray(O)
    if O.ndim != 2:
        raise ValueError(f"O must be 2-D (n_steps, n_ops), got shape {O.shape}")
    if O.dtype == np.bool_:
        O = O.view(np.uint8)
    if O.dtype != np.uint8:
        raise ValueError(f"O must be uint8 (or bool), got dtype {O.dtype}")
    return np.ascontiguousarray(O)


def _check_returns_fit(env_reward: np.ndarray, offsets: np.ndarray, fire_weight: np.ndarray,
                       coverage_weight: np.ndarray) -> None:
    """Every return is finite: |R_t| <= |env_reward| + steps * (the largest |r_TRCA|). An episode whose bound leaves
    the float range is refused by index rather than given an infinite return."""
    fire, coverage = (np.ascontiguousarray(w, dtype=np.float64) for w in (fire_weight, coverage_weight))
    e = fixed_kernels().first_overflowing_return(env_reward, offsets, fire, coverage)
    if e >= 0:
        per_step = float(np.abs(fire).sum() + np.abs(coverage).sum())
        raise ValueError(f"episode {e}: env_reward {float(env_reward[e])!r} and {int(offsets[e + 1] - offsets[e])} "
                         f"steps of rewards up to {per_step!r} each could overflow its return (the largest float is "
                         "about 1.8e308)")


def _check_env_reward(env_reward: np.ndarray, n_episodes: int) -> np.ndarray:
    env_reward = np.ascontiguousarray(env_reward, dtype=np.float64)
    if env_reward.shape != (n_episodes,):
        raise ValueError(f"env_reward must have one entry per episode ({n_episodes}), got shape {env_reward.shape}")
    return env_reward


def trca_rewards(O: np.ndarray, episode_offsets: np.ndarray, fire_weight: np.ndarray,
                 coverage_weight: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(r_F, r_B, r_TRCA), each `(n_steps,)`, from `O` `(n_steps, n_ops)`; coverage restarts with every episode."""
    O = _check_operators(O)
    offsets = check_offsets(episode_offsets, O.shape[0])
    tables = _weight_tables(fire_weight, coverage_weight, O.shape[1])
    r_f, r_b, r_trca = np.empty(O.shape[0]), np.empty(O.shape[0]), np.empty(O.shape[0])
    _step_rewards(O, offsets, tables, float(lam), np.zeros(0), 0.0, r_f, r_b, r_trca, r_trca[:0])
    return r_f, r_b, r_trca


def discounted_returns(r_trca: np.ndarray, env_reward: np.ndarray, episode_offsets: np.ndarray,
                       gamma: float) -> np.ndarray:
    """R_t = sum_{k>=t} gamma^(k-t) (r_env,k + r_TRCA,k), the env reward counted once, at the episode's last step."""
    r_trca = np.ascontiguousarray(r_trca, dtype=np.float64)
    offsets = check_offsets(episode_offsets, r_trca.shape[0])
    returns = np.empty(r_trca.shape[0])
    fixed_kernels().returns_kernel(r_trca, _check_env_reward(env_reward, offsets.size - 1), offsets, float(gamma),
                                   returns)
    return returns


def evaluate_rewards(O: np.ndarray, episode_offsets: np.ndarray, env_reward: np.ndarray, task_group: np.ndarray,
                     context_key: np.ndarray | ContextKeys | None, fire_weight: np.ndarray, coverage_weight: np.ndarray,
                     config: RewardConfig, threads: int | None = None, out: np.ndarray | None = None) -> StepRewards:
    """All of TRCA for one batch: step rewards, returns, and A = A_E (broadcast to the steps) + A_S.

    `task_group` `(n_episodes,)` int64 names each episode's task instance; `context_key` is what a compiled
    rubric's kernel returns (`ContextKeys`: hashes of the context tuple, checked against the tuples so that a step
    group holds equal tuples only), or `(n_steps,)` int64 keys taken as they are (equal keys, one step group), or
    None when the rubric declares no context. Episodes, then task groups, are
    shared among `threads` threads (default: `default_threads()`); the result does not depend on it.
    The seven outputs are the first n_steps columns of the rows of `out`, a float64 `(7, m >= n_steps)` block with
    contiguous rows (reusing a block saves the page faults of fresh memory), or of a new block.
    """
    O = _check_operators(O)
    offsets = check_offsets(episode_offsets, O.shape[0])
    tables = _weight_tables(fire_weight, coverage_weight, O.shape[1])
    env_reward = finite_values("env_reward", _check_env_reward(env_reward, offsets.size - 1))
    _check_returns_fit(env_reward, offsets, fire_weight, coverage_weight)
    task_keys = int_keys("task_group", task_group, offsets.size - 1)
    threads = threads or default_threads()
    groups = task_groups(task_keys, offsets, threads)  # once: the exact step groups and the advantages share it
    context_keys: np.ndarray | None
    if isinstance(context_key, ContextKeys):  # hashes: made exact inside every task group
        context_keys = exact_context_keys(context_key, offsets, groups, threads)
    else:
        context_keys = None if context_key is None else int_keys("context_key", context_key, O.shape[0])
    # One block for all seven outputs: fresh memory costs a page fault per page, and one block aligns to huge pages
    # where seven arrays each start and end in small ones (measured: 16 ms -> 9 ms to fill them at 10^6 steps).
    block = output_rows("out", np.empty((7, O.shape[0])) if out is None else out, 7, O.shape[0])
    r_f, r_b, r_trca, returns = block[:4]

    def rewards_part(lo: int, hi: int) -> None:
        _step_rewards(O, offsets[lo:hi + 1], tables, config.lam, env_reward[lo:hi], config.gamma, r_f, r_b, r_trca,
                      returns)

    run_parts(rewards_part, balanced_cuts(offsets, threads, MIN_STEPS_PER_PART), threads)
    # The returns come from checked inputs and are finite: the advantages take them as they are.
    fill_trca_advantages(returns, offsets, env_reward, groups, context_keys, config.eps, threads, block[4:],
                         scale_steps=config.step_scale == "std")
    a_e, a_s, a = block[4:]
    return StepRewards(r_F=r_f, r_B=r_b, r_TRCA=r_trca, R=returns, A_E=a_e, A_S=a_s, A=a)
