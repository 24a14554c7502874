"""Group standardization, GRPO's rule: a value minus its group's mean, divided by the group's std (or not).

(x - mean) / (std + 1e-6), std the population std (divide by n); or x - mean alone (F_norm = 1: Dr. GRPO, and
verl-agent's "mean_norm"). A group of one is its own mean: 0. Every credit standardizes with it (GRPO's episode
groups, GiGPO's episode and anchor-state groups, the shaped-return baseline, the oracle's step groups), a group's
members taken in their batch order. Left out: the flat-group guard of TRCA's
kernels (`tracec.runtime.rewards.advantages`), which zeroes a group whose std is <= 1e-9; here equal values whose mean
rounds off by an ulp leave an advantage of about ulp / 1e-6 (1e-10 at values near 1).
"""

from __future__ import annotations

import numpy as np

EPS = 1e-6


def standardize_in_groups(values: np.ndarray, groups: np.ndarray, *, divide_by_std: bool) -> np.ndarray:
    """(n,) float64: each of `values` (n,) standardized among those of its group (`groups` (n,), any ids)."""
    values, groups = np.asarray(values, dtype=np.float64), np.asarray(groups)
    if values.shape != groups.shape or values.ndim != 1:
        raise ValueError(f"values {values.shape} and groups {groups.shape} must be one group id per value")
    out = np.zeros(len(values))
    order = np.argsort(groups, kind="stable")  # stable: each group's members keep their batch order
    ordered = groups[order]
    for members in np.split(order, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1):
        if members.size:
            x = values[members]
            centred = x - x.mean()
            out[members] = centred / (x.std() + EPS) if divide_by_std else centred
    return out
