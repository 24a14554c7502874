"""Group-relative advantages: TRCA's episode advantage A_E and step advantage A_S, and plain GRPO's for comparison.

Each one standardizes values inside groups given by arbitrary int64 keys (hashes of a task instance, of a context
tuple). Grouping is a hash table in Numba (one pass, no global sort of the batch); each group's values are then
sorted before they are summed, so a group's mean and std depend only on the multiset of its values: permuting the
episodes of a batch permutes the outputs bit for bit, not merely up to rounding.

Rules (LANGUAGE.md, "Rewards (exact)"): std is the population std (divide by n); a group of one, or whose std is
<= 1e-9, gets 0. Left out: filtering constant-reward groups out of a GRPO batch (the trainer decides that).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numba import njit

ZERO_VARIANCE = 1e-9  # a group whose std is at most this has no signal to standardize

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True)
def _hash_pair(a: np.uint64, b: np.uint64) -> np.uint64:
    # splitmix64 finaliser: hashes from upstream may be sequential small ints, which must still spread out.
    x = (a * _GOLDEN) ^ b
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return x


@njit(cache=True)
def _group_ids(major: np.ndarray, minor: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense group id `(n,)` of each (major, minor) pair (uint64 views of int64 keys), and the number of groups."""
    n = major.shape[0]
    capacity = 16
    while capacity < 2 * n:
        capacity *= 2
    mask = np.uint64(capacity - 1)
    slot_group = np.full(capacity, -1, np.int64)
    slot_major = np.zeros(capacity, np.uint64)
    slot_minor = np.zeros(capacity, np.uint64)
    group = np.empty(n, np.int64)
    n_groups = 0
    for i in range(n):
        a, b = major[i], minor[i]
        h = _hash_pair(a, b) & mask
        while True:
            g = slot_group[h]
            if g < 0:
                slot_group[h] = n_groups
                slot_major[h] = a
                slot_minor[h] = b
                group[i] = n_groups
                n_groups += 1
                break
            if slot_major[h] == a and slot_minor[h] == b:
                group[i] = g
                break
            h = (h + np.uint64(1)) & mask
    return group, n_groups


@njit(cache=True)
def _standardize(values: np.ndarray, group: np.ndarray, n_groups: int, eps: float, divide: bool) -> np.ndarray:
    """(v - mean) / (std + eps) inside each group (or v - mean when not `divide`); 0 for singleton/flat groups."""
    n = values.shape[0]
    starts = np.zeros(n_groups + 1, np.int64)
    for i in range(n):
        starts[group[i] + 1] += 1
    for g in range(n_groups):
        starts[g + 1] += starts[g]
    fill = starts[:-1].copy()
    order = np.empty(n, np.int64)  # counting sort: the members of group g are order[starts[g]:starts[g+1]]
    for i in range(n):
        order[fill[group[i]]] = i
        fill[group[i]] += 1
    members = values[order]
    out = np.zeros(n)
    for g in range(n_groups):
        start, stop = starts[g], starts[g + 1]
        size = stop - start
        if size < 2:
            continue
        sorted_values = members[start:stop]
        sorted_values.sort()  # a canonical summation order: the result ignores the batch's episode order
        total = 0.0
        for k in range(size):
            total += sorted_values[k]
        mean = total / size
        squares = 0.0
        for k in range(size):
            d = sorted_values[k] - mean
            squares += d * d
        std = np.sqrt(squares / size)
        if std <= ZERO_VARIANCE:
            continue
        scale = std + eps if divide else 1.0
        for k in range(start, stop):
            i = order[k]
            out[i] = (values[i] - mean) / scale
    return out


def _keys(name: str, keys: np.ndarray, n: int) -> np.ndarray:
    keys = np.asarray(keys)
    if keys.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {keys.shape}")
    if not np.issubdtype(keys.dtype, np.integer):
        raise ValueError(f"{name} must hold integer keys (e.g. int64 hashes), got dtype {keys.dtype}")
    return np.ascontiguousarray(keys, dtype=np.int64).view(np.uint64)


def _values(name: str, values: np.ndarray) -> np.ndarray:
    values = np.ascontiguousarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"{name} has a non-finite entry at index {int(np.flatnonzero(~np.isfinite(values))[0])}")
    return values


def _grouped(values: np.ndarray, major: np.ndarray, minor: np.ndarray, eps: float, divide: bool) -> np.ndarray:
    group, n_groups = _group_ids(major, minor)
    return _standardize(values, group, n_groups, float(eps), divide)


def episode_advantage(env_reward: np.ndarray, task_group: np.ndarray, eps: float) -> np.ndarray:
    """A_E `(n_episodes,)`: the terminal outcome standardized among rollouts of the same task instance."""
    values = _values("env_reward", env_reward)
    keys = _keys("task_group", task_group, values.shape[0])
    return _grouped(values, keys, np.zeros_like(keys), eps, True)


def step_advantage(R: np.ndarray, step_task_group: np.ndarray, context_key: np.ndarray | None,
                   eps: float) -> np.ndarray:
    """A_S `(n_steps,)`: the return standardized among steps of one task group with equal context key.

    Without a declared context (`context_key` None) there are no step groups and A_S is 0.
    """
    values = _values("R", R)
    keys = _keys("step_task_group", step_task_group, values.shape[0])
    if context_key is None:
        return np.zeros(values.shape[0])
    return _grouped(values, keys, _keys("context_key", context_key, values.shape[0]), eps, True)


def grpo_advantage(rewards: np.ndarray, group: np.ndarray, scale: Literal["std", "none"],
                   eps: float) -> np.ndarray:
    """Plain GRPO: (r - mean) / (std + eps) with scale "std", r - mean with "none"; flat groups get 0 either way."""
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    values = _values("rewards", rewards)
    keys = _keys("group", group, values.shape[0])
    return _grouped(values, keys, np.zeros_like(keys), eps, scale == "std")
