"""Group-relative advantages: TRCA's episode advantage A_E and step advantage A_S, fused in one kernel.

Each standardizes values inside groups given by int64 keys (a task instance; a context key, made exact by
`context_groups`). Grouping is by hash tables in the fixed kernels (`advantage_kernels`, in C as
runtime/_fixed_groups.c; `fixed_kernels`), in two levels so that no step-sized sort or table is needed: the
episodes by task group first, then the steps of one task group by context key, in a small table that stays in
cache. Before it is summed, a task group's episodes are put in a canonical order (by content),
so a group's mean and std depend only on the group's contents: permuting the episodes of a batch permutes the
outputs bit for bit, not merely up to rounding. `fill_trca_advantages` does A_E, A_S and their sum in one pass per
task group, for `evaluate_rewards`.

Rules (LANGUAGE.md, "Rewards (exact)"): std is the population std (divide by n); a group of one, or whose std is <=
1e-9, gets 0. A rubric's `step_scale none` keeps A_S centred on its step group's mean, not divided by its std. Any
finite inputs give finite outputs: a group (a task group's outcomes for A_E, a step group's returns for A_S) holding
a value beyond 2^480 (whose squares, or whose sum, would overflow) is scaled by 2^-600 first, an exact power of two,
with eps and the 1e-9 threshold scaled alike; every other group is computed unscaled, also beside a huge one in the
same task group (scaled with it, its squares would underflow to a flat group). The mean is taken in two parts, the
sum's mean and the mean of what is left (the corrected two-pass algorithm), so that the deviations are exact where
values are close: a group of equal values is flat however large they are, where the rounded mean alone would leave
it a spread of one ulp (and advantages of +-1). Left out: filtering constant-reward groups out of a GRPO batch (the
trainer decides that).
"""

from __future__ import annotations

import numpy as np
from tracec.compiler.threads import run_parts
from tracec.runtime.rewards.fixed_kernels import fixed_kernels
from tracec.runtime.rewards.task_groups import TaskGroups


def fill_trca_advantages(returns: np.ndarray, offsets: np.ndarray, env_reward: np.ndarray, groups: TaskGroups,
                         context_keys: np.ndarray | None, eps: float, threads: int, out: np.ndarray, *,
                         scale_steps: bool = True) -> None:
    """A_E broadcast to the steps, A_S and A = A_E + A_S into the rows of `out` `(3, n_steps)`, for TRCA's batch
    layout: `env_reward` once per episode, `returns` and `context_keys` (None without a declared context: A_S is 0)
    per step, all checked by `batch_checks`; the task groups' parts (`groups.cuts`) shared among `threads` threads,
    and the result does not depend on it. `scale_steps=False`: A_S is centred only (`step_scale none`)."""
    a_e, a_s, a = out
    context = np.zeros(0, dtype=np.uint64) if context_keys is None else context_keys  # no context: no step keys
    kernel = fixed_kernels().trca_advantage_kernel

    def advantages_part(lo: int, hi: int) -> None:
        kernel(returns, offsets, env_reward, groups.episodes, groups.starts[lo:hi + 1], context,
               context_keys is not None, scale_steps, float(eps), a_e, a_s, a)

    run_parts(advantages_part, groups.cuts, threads)
