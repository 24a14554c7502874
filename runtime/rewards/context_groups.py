"""Exact step groups: the kernels' context hashes, checked against the context tuples inside every task group.

A_S standardizes returns among the steps of one task group that share a context tuple. The kernels give every step a
64-bit hash of its tuple (`tracec.compiler.context.ContextKeys`), which can map two tuples to one key; here every
step is compared, tuple against tuple, with the first step of its task group that has the same hash. Where all
agree, the hashes are the keys (no copy); where two tuples collide, the later one moves to the next free key of its
task group, so that within a task group equal keys mean equal tuples: a missing value equals only a missing value,
a set compares as a set, -0.0 as 0.0. Task groups are small, so their hash tables stay in cache. The loops are fixed
kernels (`context_group_kernels`; `fixed_kernels`).

Left out: exactness across task groups (no step group spans two), and entity-id collisions (an entity is its
64-bit id; see docs/language.md).
"""

from __future__ import annotations

import numpy as np
from tracec.compiler.context import ContextKeys
from tracec.compiler.threads import run_parts
from tracec.runtime.rewards.fixed_kernels import fixed_kernels
from tracec.runtime.rewards.task_groups import TaskGroups


def _padded(arrays: list[np.ndarray], dtype: type) -> tuple[tuple[np.ndarray, ...], int]:
    """The arrays as a tuple of a power-of-two length (so that Numba compiles few tuple types), and how many."""
    size = 1
    while size < len(arrays):
        size *= 2
    filler: list[np.ndarray] = [np.zeros(1, dtype=dtype)] * (size - len(arrays))
    return tuple(arrays + filler), len(arrays)


def exact_context_keys(context: ContextKeys, offsets: np.ndarray, groups: TaskGroups, threads: int) -> np.ndarray:
    """Context keys `(n_steps,)` uint64 under which two steps of one task group are equal exactly when their
    context tuples are: the hashes themselves unless two tuples of a task group collide. `offsets` delimit the
    episodes (checked by the caller), `groups` are their task groups, whose parts are shared among `threads`."""
    keys = np.ascontiguousarray(context.hash, dtype=np.int64).view(np.uint64)
    if keys.shape != (int(offsets[-1]),):
        raise ValueError(f"context_key must have shape ({int(offsets[-1])},), got {keys.shape}")
    words, known = context.scalar_words()
    values, set_offsets, set_known = context.sets()
    for array in (*words, *known, *set_known):
        if array.shape[0] < keys.shape[0]:
            raise ValueError(f"a context component has {array.shape[0]} rows, fewer than the {keys.shape[0]} steps")
    (words_t, n_words), (known_t, _) = _padded(words, np.int64), _padded(known, np.uint8)
    (values_t, n_sets), (offsets_t, _), (set_known_t, _) = (_padded(values, np.int64), _padded(set_offsets, np.int64),
                                                             _padded(set_known, np.uint8))
    episodes, group_starts = groups.episodes, groups.starts
    collided = np.zeros(group_starts.size - 1, dtype=np.uint8)
    kernel = fixed_kernels().exact_keys

    def check(lo: int, hi: int) -> None:
        kernel(keys, offsets, episodes, group_starts[lo:hi + 1], False, keys, words_t, known_t, n_words, values_t,
               offsets_t, set_known_t, n_sets, collided[lo:hi])

    run_parts(check, groups.cuts, threads)
    if not collided.any():
        return keys
    out = keys.copy()
    kernel(keys, offsets, episodes, group_starts, True, out, words_t, known_t, n_words, values_t, offsets_t,
           set_known_t, n_sets, collided)
    return out
