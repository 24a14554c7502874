"""Exact step groups: the kernels' context hashes, checked against the context tuples inside every task group.

A_S standardizes returns among the steps of one task group that share a context tuple. The kernels give every step a
64-bit hash of its tuple (`tracec.compiler.context.ContextKeys`), which can map two tuples to one key; here every
step is compared, tuple against tuple, with the first step of its task group that has the same hash. Where all
agree, the hashes are the keys (no copy); where two tuples collide, the later one moves to the next free key of its
task group, so that within a task group equal keys mean equal tuples: a missing value equals only a missing value,
a set compares as a set, -0.0 as 0.0. Task groups are small, so their hash tables stay in cache.

Left out: exactness across task groups (no step group spans two), and entity-id collisions (an entity is its
64-bit id; see docs/language.md).
"""

from __future__ import annotations

import numpy as np
from tracec.compiler.context import ContextKeys
from tracec.compiler.threads import balanced_cuts, run_parts, worth_splitting
from tracec.runtime.advantages import _GOLDEN, MIN_STEPS_PER_PART, _group_by_key, _table_bits
from tracec.runtime.jit import fixed_kernel


@fixed_kernel(nogil=True)
def _same_tuple(i: int, s: int, words: tuple, word_known: tuple, n_words: int, set_values: tuple,
                set_offsets: tuple, set_known: tuple, n_sets: int) -> bool:
    """Whether steps i and s have equal context tuples."""
    for c in range(n_words):
        known = word_known[c]
        if (known[i] != 0) != (known[s] != 0):
            return False
        if known[i] != 0 and words[c][i] != words[c][s]:
            return False
    for c in range(n_sets):
        known, offsets, values = set_known[c], set_offsets[c], set_values[c]
        if (known[i] != 0) != (known[s] != 0):
            return False
        if known[i] != 0:
            length = offsets[i + 1] - offsets[i]
            if length != offsets[s + 1] - offsets[s]:
                return False
            for k in range(length):
                if values[offsets[i] + k] != values[offsets[s] + k]:
                    return False
    return True


@fixed_kernel(nogil=True)
def _exact_keys(keys: np.ndarray, offsets: np.ndarray, episodes: np.ndarray, group_starts: np.ndarray,
                resolve: bool, out: np.ndarray, words: tuple, word_known: tuple, n_words: int, set_values: tuple,
                set_offsets: tuple, set_known: tuple, n_sets: int, collided: np.ndarray) -> None:
    """For the task groups group_starts[0] .. group_starts[-1] (a part of those `_group_by_key` made): without
    `resolve`, mark in collided[g] (g counted from the part's first group) each group where two different tuples
    share a hash; with it, write exact keys of the marked groups into `out`."""
    largest = 1
    for g in range(group_starts.shape[0] - 1):
        size = 0
        for e in episodes[group_starts[g]:group_starts[g + 1]]:
            size += offsets[e + 1] - offsets[e]
        largest = max(largest, size)
    bits = _table_bits(largest)
    mask = (1 << bits) - 1
    slot_key = np.empty(1 << bits, np.uint64)
    slot_stamp = np.full(1 << bits, -1, np.int64)
    slot_step = np.empty(1 << bits, np.int64)
    for g in range(group_starts.shape[0] - 1):
        if resolve and not collided[g]:
            continue
        for e in episodes[group_starts[g]:group_starts[g + 1]]:
            for i in range(offsets[e], offsets[e + 1]):
                key = keys[i]
                if not resolve and i > offsets[e] and key == keys[i - 1] and _same_tuple(
                        i, i - 1, words, word_known, n_words, set_values, set_offsets, set_known, n_sets):
                    continue  # a run of one tuple: the previous step was checked already
                while True:
                    h = np.int64((key * _GOLDEN) >> np.uint64(64 - bits))
                    while slot_stamp[h] == g and slot_key[h] != key:
                        h = (h + 1) & mask
                    if slot_stamp[h] != g:
                        slot_stamp[h], slot_key[h], slot_step[h] = g, key, i
                        break
                    if _same_tuple(i, slot_step[h], words, word_known, n_words, set_values, set_offsets, set_known,
                                   n_sets):
                        break
                    if not resolve:
                        collided[g] = 1
                        break
                    key += np.uint64(1)  # another tuple holds this key: try the next one
                if resolve:
                    out[i] = key


def _padded(arrays: list[np.ndarray], dtype: type) -> tuple[tuple[np.ndarray, ...], int]:
    """The arrays as a tuple of a power-of-two length (so that few tuple types are ever compiled), and how many."""
    size = 1
    while size < len(arrays):
        size *= 2
    filler: list[np.ndarray] = [np.zeros(1, dtype=dtype)] * (size - len(arrays))
    return tuple(arrays + filler), len(arrays)


def exact_context_keys(context: ContextKeys, offsets: np.ndarray, task_keys: np.ndarray, threads: int) -> np.ndarray:
    """Context keys `(n_steps,)` uint64 under which two steps of one task group are equal exactly when their
    context tuples are: the hashes themselves unless two tuples of a task group collide. `offsets` delimit the
    episodes, `task_keys` `(n_episodes,)` uint64 name their task groups (both checked by the caller)."""
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
    episodes, group_starts = _group_by_key(task_keys)
    cuts = [0, group_starts.size - 1]
    if worth_splitting(keys.shape[0], threads, MIN_STEPS_PER_PART):
        steps_before_group = np.concatenate([[0], np.cumsum(np.diff(offsets)[episodes])])[group_starts]
        cuts = balanced_cuts(steps_before_group, threads, MIN_STEPS_PER_PART)
    collided = np.zeros(group_starts.size - 1, dtype=np.uint8)

    def check(lo: int, hi: int) -> None:
        _exact_keys(keys, offsets, episodes, group_starts[lo:hi + 1], False, keys, words_t, known_t, n_words,
                    values_t, offsets_t, set_known_t, n_sets, collided[lo:hi])

    run_parts(check, cuts, threads)
    if not collided.any():
        return keys
    out = keys.copy()
    _exact_keys(keys, offsets, episodes, group_starts, True, out, words_t, known_t, n_words, values_t, offsets_t,
                set_known_t, n_sets, collided)
    return out
