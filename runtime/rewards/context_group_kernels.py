"""The exact step-group kernels in Numba: each step's context tuple compared with that of the first step of its task
group with the same hash.

The definition of what runtime/_fixed_groups.c computes in C, bit for bit (`fixed_kernels`), and what runs where
that extension was not built. Why and how, in words: `context_groups`, which checks the inputs and calls these
through `fixed_kernels()`.
"""

from __future__ import annotations

import numpy as np
from tracec.runtime.rewards.advantage_kernels import GOLDEN, table_bits
from tracec.runtime.rewards.numba_cache import fixed_kernel


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
def exact_keys(keys: np.ndarray, offsets: np.ndarray, episodes: np.ndarray, group_starts: np.ndarray,
               resolve: bool, out: np.ndarray, words: tuple, word_known: tuple, n_words: int, set_values: tuple,
               set_offsets: tuple, set_known: tuple, n_sets: int, collided: np.ndarray) -> None:
    """For the task groups group_starts[0] .. group_starts[-1] (a part of those `group_by_key` made): without
    `resolve`, mark in collided[g] (g counted from the part's first group) each group where two different tuples
    share a hash; with it, write exact keys of the marked groups into `out`."""
    largest = 1
    for g in range(group_starts.shape[0] - 1):
        size = 0
        for e in episodes[group_starts[g]:group_starts[g + 1]]:
            size += offsets[e + 1] - offsets[e]
        largest = max(largest, size)
    bits = table_bits(largest)
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
                    h = np.int64((key * GOLDEN) >> np.uint64(64 - bits))
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
