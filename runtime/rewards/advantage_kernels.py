"""The advantage kernels in Numba: A_E, A_S and their sum, one task group at a time, and the grouping by key.

The definition of what runtime/_fixed_groups.c computes in C, bit for bit (`fixed_kernels`), and what runs where
that extension was not built. The rules they implement, and why, are in `advantages` (and the grouping's use in
`task_groups`), which checks the inputs and calls these through `fixed_kernels()`.
"""

from __future__ import annotations

import numpy as np
from tracec.runtime.rewards.numba_cache import fixed_kernel

ZERO_VARIANCE = 1e-9  # a group whose std is at most this has no signal to standardize
GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / phi: Fibonacci hashing spreads sequential keys too
HUGE = 2.0**480  # a group holding a larger magnitude is scaled before its sums: n * (2 * 2^480)^2 stays finite
SHRINK = 2.0**-600  # that scale: a power of two, so x * SHRINK is exact (unless it underflows, far below the rest)


@fixed_kernel()
def _scale_for(largest: float) -> float:
    return SHRINK if largest > HUGE else 1.0


@fixed_kernel()
def table_bits(n_keys: int) -> int:
    bits = 4
    while (1 << bits) < 2 * n_keys:  # load under 1/2: probes stay short
        bits += 1
    return bits


@fixed_kernel()
def _dense_ids(keys: np.ndarray, items: np.ndarray, bits: int, stamp: int, slot_key: np.ndarray,
               slot_stamp: np.ndarray, slot_id: np.ndarray, ids: np.ndarray) -> int:
    """Number the distinct keys[items] 0, 1, ... by first appearance into ids[:len(items)]; return how many.

    Open addressing in the first 2^bits slots of the table (2^bits must exceed the number of distinct keys). Slots
    stamped otherwise than `stamp` count as empty, so one table serves many calls without being cleared.
    """
    size = items.shape[0]
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    n_ids = 0
    for k in range(size):
        key = keys[items[k]]
        if k > 0 and key == keys[items[k - 1]]:  # keys often come in runs (the steps of one task group)
            ids[k] = ids[k - 1]
            continue
        h = np.int64((key * GOLDEN) >> shift)
        while slot_stamp[h] == stamp and slot_key[h] != key:
            h = (h + 1) & mask
        if slot_stamp[h] != stamp:
            slot_stamp[h] = stamp
            slot_key[h] = key
            slot_id[h] = n_ids
            n_ids += 1
        ids[k] = slot_id[h]
    return n_ids


@fixed_kernel()
def _bucket(ids: np.ndarray, n_ids: int, items: np.ndarray, members: np.ndarray, starts: np.ndarray) -> None:
    """Counting sort: the items with id g go to members[starts[g]:starts[g+1]], in their order."""
    starts[:n_ids + 1] = 0
    for k in range(items.shape[0]):
        starts[ids[k] + 1] += 1
    for g in range(n_ids):
        starts[g + 1] += starts[g]
    for k in range(items.shape[0]):  # starts[g] serves as g's fill pointer, then is shifted back below
        members[starts[ids[k]]] = items[k]
        starts[ids[k]] += 1
    for g in range(n_ids, 0, -1):
        starts[g] = starts[g - 1]
    starts[0] = 0


@fixed_kernel()
def _segment_less(a: int, b: int, values: np.ndarray, offsets: np.ndarray, minor: np.ndarray) -> bool:
    """Lexicographic order on (length, then (value, minor key) step by step); a tie means identical contents."""
    length = offsets[a + 1] - offsets[a]
    if length != offsets[b + 1] - offsets[b]:
        return length < offsets[b + 1] - offsets[b]
    for k in range(length):
        i, j = offsets[a] + k, offsets[b] + k
        if values[i] != values[j]:
            return values[i] < values[j]
        if minor[i] != minor[j]:
            return minor[i] < minor[j]
    return False


SORT_RUN = 16  # sort_segments insertion-sorts runs this long before merging: a task group is a handful of episodes


@fixed_kernel()
def _sort_segments(order: np.ndarray, values: np.ndarray, offsets: np.ndarray, minor: np.ndarray,
                   buffer: np.ndarray) -> None:
    """Sort the segment indices `order` in place by `_segment_less`: insertion sort of short runs, then bottom-up
    merges (a task group rarely needs any)."""
    n = order.shape[0]
    for lo in range(0, n, SORT_RUN):
        for k in range(lo + 1, min(lo + SORT_RUN, n)):
            item, j = order[k], k
            while j > lo and _segment_less(item, order[j - 1], values, offsets, minor):
                order[j] = order[j - 1]
                j -= 1
            order[j] = item
    src, dst = order, buffer[:n]
    in_buffer = False
    width = SORT_RUN
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):
                if j >= hi or (i < mid and not _segment_less(src[j], src[i], values, offsets, minor)):
                    dst[k] = src[i]
                    i += 1
                else:
                    dst[k] = src[j]
                    j += 1
        src, dst = dst, src
        in_buffer = not in_buffer
        width *= 2
    if in_buffer:
        order[:] = src


@fixed_kernel()
def group_by_key(keys: np.ndarray, order: np.ndarray, starts: np.ndarray) -> int:
    """The indices of `keys` regrouped into order `(n,)`, those of the g-th distinct key (by first appearance) at
    order[starts[g]:starts[g+1]]; returns how many distinct keys (starts `(n + 1,)` is filled that far, plus one)."""
    n = keys.shape[0]
    n_runs = 1  # at least the number of distinct keys, and far below n when keys come in runs
    for i in range(1, n):
        n_runs += keys[i] != keys[i - 1]
    bits = table_bits(n_runs)
    slot_key = np.empty(1 << bits, np.uint64)
    slot_stamp = np.full(slot_key.shape[0], -1, np.int64)
    slot_id = np.empty(slot_key.shape[0], np.int64)
    ids = np.empty(n, np.int64)
    n_ids = _dense_ids(keys, np.arange(n), bits, 0, slot_key, slot_stamp, slot_id, ids)
    _bucket(ids, n_ids, np.arange(n), order, starts)
    return n_ids


@fixed_kernel()
def _sorted_standardize(values: np.ndarray, members: np.ndarray, buffer: np.ndarray,
                        eps: float) -> tuple[float, float, float, float]:
    """(mean, rest, scale, factor) of values[members] * factor, summed in ascending order; member x gets
    ((x * factor - mean) - rest) / scale, and scale 0 marks a singleton or flat group, whose members get 0."""
    size = members.shape[0]
    largest = 0.0
    for k in range(size):  # insertion sort: a task group holds a handful of episodes
        x = values[members[k]]
        largest = max(largest, abs(x))
        j = k
        while j > 0 and buffer[j - 1] > x:
            buffer[j] = buffer[j - 1]
            j -= 1
        buffer[j] = x
    factor = _scale_for(largest)
    total = 0.0
    for k in range(size):
        total += buffer[k] * factor
    mean = total / size
    rest = 0.0
    for k in range(size):
        rest += buffer[k] * factor - mean
    rest /= size
    squares = 0.0
    for k in range(size):
        squares += ((buffer[k] * factor - mean) - rest) ** 2
    std = np.sqrt(squares / size)
    return mean, rest, (std + eps * factor if size >= 2 and std > ZERO_VARIANCE * factor else 0.0), factor


@fixed_kernel(nogil=True)
def trca_advantage_kernel(returns: np.ndarray, offsets: np.ndarray, env_reward: np.ndarray, episodes: np.ndarray,
                          group_starts: np.ndarray, context: np.ndarray, by_context: bool, scale_steps: bool,
                          eps: float, a_e: np.ndarray, a_s: np.ndarray, a: np.ndarray) -> None:
    """A_E broadcast to the steps, A_S and their sum, one task group at a time, into arrays numpy allocated; the
    groups are those `group_by_key` made, from group_starts[0] to group_starts[-1] (a part of them).

    Each context group is summed into per-key accumulators in a canonical order (episodes by content, then their
    steps), so the result does not depend on the batch's order. Without `scale_steps` a step's A_S is its deviation
    from its step group's mean, not divided by the group's std (the step group's power-of-two factor is divided
    back out, exactly)."""
    largest, most = 1, 1
    for g in range(group_starts.shape[0] - 1):
        size = 0
        for s in episodes[group_starts[g]:group_starts[g + 1]]:
            size += offsets[s + 1] - offsets[s]
        largest, most = max(largest, size), max(most, group_starts[g + 1] - group_starts[g])
    bits = table_bits(largest)
    slot_key = np.empty(1 << bits, np.uint64)
    slot_stamp = np.full(slot_key.shape[0], -1, np.int64)
    slot_id = np.empty(slot_key.shape[0], np.int64)
    local, gathered = np.empty(largest, np.int64), np.empty(largest)
    sums, counts, scales = np.empty(largest), np.empty(largest, np.int64), np.empty(largest)
    rests, factors = np.empty(largest), np.empty(largest)
    env_buffer, sort_buffer = np.empty(most), np.empty(most, np.int64)
    ranked_buffer, canonical = np.empty(most, np.int64), np.empty(most, np.int64)
    for g in range(group_starts.shape[0] - 1):
        group = episodes[group_starts[g]:group_starts[g + 1]]
        e_mean, e_rest, e_scale, e_factor = _sorted_standardize(env_reward, group, env_buffer, eps)
        if not by_context:
            for s in group:
                ae = ((env_reward[s] * e_factor - e_mean) - e_rest) / e_scale if e_scale > 0.0 else 0.0
                for i in range(offsets[s], offsets[s + 1]):
                    a_e[i], a_s[i], a[i] = ae, 0.0, ae + 0.0
            continue
        # Sums run over the group's episodes in canonical order, memory is read and written in the batch's order
        # (streams the prefetcher follows; visiting episodes in sorted order cost a third more here). `group` is
        # ascending (`group_by_key` keeps first-appearance order), so an episode's position is a binary search.
        n = group.shape[0]
        ranked = ranked_buffer[:n]
        ranked[:] = group
        _sort_segments(ranked, returns, offsets, context, sort_buffer)
        size = 0
        for s in ranked:
            canonical[np.searchsorted(group, s)] = size
            size += offsets[s + 1] - offsets[s]
        # Pass 1: dense context ids (hash table stamped with g, so never cleared), the returns gathered at their
        # canonical positions, each step group's largest magnitude.
        n_ids = 0
        for p in range(n):
            s, k = group[p], canonical[p]
            previous, r = ~context[offsets[s]], 0  # keys often come in runs: look each run up once
            for i in range(offsets[s], offsets[s + 1]):
                key = context[i]
                if key != previous:
                    h = np.int64((key * GOLDEN) >> np.uint64(64 - bits))
                    while slot_stamp[h] == g and slot_key[h] != key:
                        h = (h + 1) & ((1 << bits) - 1)
                    if slot_stamp[h] != g:
                        slot_stamp[h], slot_key[h], slot_id[h] = g, key, n_ids
                        sums[n_ids], rests[n_ids], scales[n_ids], factors[n_ids] = 0.0, 0.0, 0.0, 0.0
                        counts[n_ids] = 0
                        n_ids += 1
                    previous, r = key, slot_id[h]
                local[k], gathered[k] = r, returns[i]
                factors[r] = max(factors[r], abs(returns[i]))
                k += 1
        # Pass 2: means (in two parts) and squared deviations, in canonical order, each step group scaled by its own
        # factor.
        for r in range(n_ids):
            factors[r] = _scale_for(factors[r])
        for k in range(size):
            gathered[k] *= factors[local[k]]
            sums[local[k]] += gathered[k]
            counts[local[k]] += 1
        for r in range(n_ids):
            sums[r] /= counts[r]  # now the mean
        for k in range(size):
            rests[local[k]] += gathered[k] - sums[local[k]]
        for r in range(n_ids):
            rests[r] /= counts[r]
        for k in range(size):
            scales[local[k]] += ((gathered[k] - sums[local[k]]) - rests[local[k]]) ** 2
        for r in range(n_ids):
            std = np.sqrt(scales[r] / counts[r])
            flat = counts[r] < 2 or std <= ZERO_VARIANCE * factors[r]
            scales[r] = 0.0 if flat else std + eps * factors[r] if scale_steps else factors[r]
        # Pass 3: write A_E, A_S and A in the batch's order.
        for p in range(n):
            s, k = group[p], canonical[p]
            ae = ((env_reward[s] * e_factor - e_mean) - e_rest) / e_scale if e_scale > 0.0 else 0.0
            for i in range(offsets[s], offsets[s + 1]):
                r = local[k]
                step = ((gathered[k] - sums[r]) - rests[r]) / scales[r] if scales[r] > 0.0 else 0.0
                a_e[i], a_s[i], a[i] = ae, step, ae + step
                k += 1
