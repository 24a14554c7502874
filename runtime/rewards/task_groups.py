"""The task-group partition of a reward batch: its episodes grouped by task instance, and the groups cut into parts
of about equal steps for threads. An evaluation makes it once (`trca.evaluate_rewards`) and hands it to both that
work group by group: the exact step groups (`context_groups`) and the advantages (`advantages`).

Grouping is by a hash table in the fixed kernels (`advantage_kernels.group_by_key`, in C as runtime/_fixed_groups.c;
`fixed_kernels`), never a step-sized sort. Left out: what a task group's members are compared by (the callers').
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tracec.compiler.threads import balanced_cuts, worth_splitting
from tracec.runtime.rewards.fixed_kernels import fixed_kernels

# The reward kernels spend tens of ns a step: below this many steps a part costs a thread more than it saves.
MIN_STEPS_PER_PART = 1 << 16


@dataclass(frozen=True)
class TaskGroups:
    """A batch's episodes by task group, and where the threads' parts of them begin and end."""

    episodes: np.ndarray  # (n_episodes,) int64: episode indices, those of one task group together, each ascending
    starts: np.ndarray  # (n_groups + 1,) int64: task group g is episodes[starts[g]:starts[g + 1]]
    cuts: list[int]  # group indices 0 = c_0 < ... < c_p = n_groups: part i is groups c_i .. c_(i+1) - 1


def group_by_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts): indices of `keys` `(n,)` uint64 regrouped so that those of the g-th distinct key (in order
    of first appearance) are order[starts[g]:starts[g+1]], each group ascending."""
    order, starts = np.empty(keys.shape[0], np.int64), np.empty(keys.shape[0] + 1, np.int64)
    n_ids = fixed_kernels().group_by_key(keys, order, starts)
    return order, starts[:n_ids + 1]


def task_groups(task_keys: np.ndarray, offsets: np.ndarray, threads: int) -> TaskGroups:
    """The task groups of episodes delimited by `offsets`, named by `task_keys` `(n_episodes,)` uint64 (both checked
    by `batch_checks`), cut into parts for `threads` threads where the batch is big enough to share."""
    episodes, starts = group_by_key(task_keys)
    cuts = [0, starts.size - 1]
    if worth_splitting(int(offsets[-1]), threads, MIN_STEPS_PER_PART):
        steps_before_group = np.concatenate([[0], np.cumsum(np.diff(offsets)[episodes])])[starts]
        cuts = balanced_cuts(steps_before_group, threads, MIN_STEPS_PER_PART)
    return TaskGroups(episodes, starts, cuts)
