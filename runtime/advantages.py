"""Group-relative advantages: TRCA's episode advantage A_E and step advantage A_S, and plain GRPO's for comparison.

Each one standardizes values inside groups given by arbitrary int64 keys (hashes of a task instance, of a context
tuple). Grouping is by hash tables in Numba, in two levels so that no step-sized sort or table is needed: the
segments (episodes) by task group first, then the steps of one task group by context key, in a small table that
stays in cache. Before it is summed, a task group's segments are put in a canonical order (by content), so a
group's mean and std depend only on the group's contents: permuting the episodes of a batch permutes the outputs
bit for bit, not merely up to rounding. `fill_trca_advantages`, what `evaluate_rewards` needs for a training batch,
does A_E, A_S and their sum in one pass per task group, with the same sums in the same order as the separate
functions.

Rules (LANGUAGE.md, "Rewards (exact)"): std is the population std (divide by n); a group of one, or whose std is
<= 1e-9, gets 0. Left out: filtering constant-reward groups out of a GRPO batch (the trainer decides that).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from tracec.compiler.threads import balanced_cuts, run_parts, worth_splitting
from tracec.runtime.batch_checks import finite_values, int_keys
from tracec.runtime.jit import fixed_kernel

ZERO_VARIANCE = 1e-9  # a group whose std is at most this has no signal to standardize
# The reward kernels spend tens of ns a step: below this many steps a part costs a thread more than it saves.
MIN_STEPS_PER_PART = 1 << 16

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / phi: Fibonacci hashing spreads sequential keys too


@fixed_kernel()
def _table_bits(n_keys: int) -> int:
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
        h = np.int64((key * _GOLDEN) >> shift)
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
def _standardize_group(values: np.ndarray, members: np.ndarray, eps: float, divide: bool, out: np.ndarray) -> None:
    """Standardize the values at indices `members` among themselves, into `out`; flat or singleton groups stay 0."""
    size = members.shape[0]
    if size < 2:
        return
    total = 0.0
    for i in members:
        total += values[i]
    mean = total / size
    squares = 0.0
    for i in members:
        squares += (values[i] - mean) ** 2
    std = np.sqrt(squares / size)
    if std <= ZERO_VARIANCE:
        return
    scale = std + eps if divide else 1.0
    for i in members:
        out[i] = (values[i] - mean) / scale


@fixed_kernel()
def _group_by_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts): indices of `keys` regrouped so that those of the g-th distinct key are order[starts[g]:...]."""
    n = keys.shape[0]
    n_runs = 1  # at least the number of distinct keys, and far below n when keys come in runs
    for i in range(1, n):
        n_runs += keys[i] != keys[i - 1]
    bits = _table_bits(n_runs)
    slot_key = np.empty(1 << bits, np.uint64)
    slot_stamp = np.full(slot_key.shape[0], -1, np.int64)
    slot_id = np.empty(slot_key.shape[0], np.int64)
    ids = np.empty(n, np.int64)
    n_ids = _dense_ids(keys, np.arange(n), bits, 0, slot_key, slot_stamp, slot_id, ids)
    order, starts = np.empty(n, np.int64), np.empty(n_ids + 1, np.int64)
    _bucket(ids, n_ids, np.arange(n), order, starts)
    return order, starts


@fixed_kernel()
def _standardize_segments(values: np.ndarray, offsets: np.ndarray, major: np.ndarray, minor: np.ndarray,
                          by_minor: bool, eps: float, divide: bool, out: np.ndarray) -> None:
    """Group-standardized `values` `(n,)` into `out` (zeros, allocated by numpy: huge pages, fewer page faults).

    Segment s (elements offsets[s]:offsets[s+1]) has key major[s]; the elements of segments with equal major key,
    and equal minor key (one per element) when `by_minor`, form a group."""
    segments, major_starts = _group_by_key(major)
    n_majors = major_starts.shape[0] - 1
    largest = 0
    for g in range(n_majors):
        size = 0
        for s in segments[major_starts[g]:major_starts[g + 1]]:
            size += offsets[s + 1] - offsets[s]
        largest = max(largest, size)
    # The minor-key table is sized for the largest major block and reused by stamping rather than cleared.
    slot_key = np.empty(1 << _table_bits(largest), np.uint64)
    slot_stamp = np.full(slot_key.shape[0], -1, np.int64)
    slot_id = np.empty(slot_key.shape[0], np.int64)
    block, runs, local = np.empty(largest, np.int64), np.empty(largest, np.int64), np.empty(largest, np.int64)
    run_starts, sort_buffer = np.empty(largest + 1, np.int64), np.empty(major.shape[0], np.int64)
    for g in range(n_majors):
        # Segments in a canonical order make every group's summation order canonical: permuting the batch's
        # segments changes no bit of the result. Sorting a task group's few episodes is cheaper than its steps.
        group_segments = segments[major_starts[g]:major_starts[g + 1]]
        _sort_segments(group_segments, values, offsets, minor, sort_buffer)
        size = 0
        for s in group_segments:
            for i in range(offsets[s], offsets[s + 1]):
                block[size] = i
                size += 1
        if not by_minor:
            _standardize_group(values, block[:size], eps, divide, out)
            continue
        n_local = _dense_ids(minor, block[:size], _table_bits(size), g, slot_key, slot_stamp, slot_id, local)
        _bucket(local, n_local, block[:size], runs, run_starts)
        for r in range(n_local):
            _standardize_group(values, runs[run_starts[r]:run_starts[r + 1]], eps, divide, out)


@fixed_kernel()
def _sorted_standardize(values: np.ndarray, members: np.ndarray, buffer: np.ndarray,
                        eps: float) -> tuple[float, float]:
    """(mean, scale) of values[members] summed in ascending order (the canonical order of `_standardize_group` for
    one-element segments); scale 0 marks a singleton or flat group, whose members get 0."""
    size = members.shape[0]
    for k in range(size):  # insertion sort: a task group holds a handful of episodes
        x = values[members[k]]
        j = k
        while j > 0 and buffer[j - 1] > x:
            buffer[j] = buffer[j - 1]
            j -= 1
        buffer[j] = x
    total = 0.0
    for k in range(size):
        total += buffer[k]
    mean = total / size
    squares = 0.0
    for k in range(size):
        squares += (buffer[k] - mean) ** 2
    std = np.sqrt(squares / size)
    return mean, (std + eps if size >= 2 and std > ZERO_VARIANCE else 0.0)


@fixed_kernel(nogil=True)
def _trca_advantage_kernel(returns: np.ndarray, offsets: np.ndarray, env_reward: np.ndarray, episodes: np.ndarray,
                           group_starts: np.ndarray, context: np.ndarray, by_context: bool, eps: float,
                           a_e: np.ndarray, a_s: np.ndarray, a: np.ndarray) -> None:
    """A_E broadcast to the steps, A_S and their sum, one task group at a time, into arrays numpy allocated; the
    groups are those `_group_by_key` made, from group_starts[0] to group_starts[-1] (a part of them).

    Each context group is summed into per-key accumulators in the order `_standardize_segments` buckets its members
    (canonical episodes, then steps), so the result is the same bit for bit without bucketing."""
    largest, most = 1, 1
    for g in range(group_starts.shape[0] - 1):
        size = 0
        for s in episodes[group_starts[g]:group_starts[g + 1]]:
            size += offsets[s + 1] - offsets[s]
        largest, most = max(largest, size), max(most, group_starts[g + 1] - group_starts[g])
    bits = _table_bits(largest)
    slot_key = np.empty(1 << bits, np.uint64)
    slot_stamp = np.full(slot_key.shape[0], -1, np.int64)
    slot_id = np.empty(slot_key.shape[0], np.int64)
    local, gathered = np.empty(largest, np.int64), np.empty(largest)
    sums, counts, scales = np.empty(largest), np.empty(largest, np.int64), np.empty(largest)
    env_buffer, sort_buffer = np.empty(most), np.empty(most, np.int64)
    ranked_buffer, canonical = np.empty(most, np.int64), np.empty(most, np.int64)
    for g in range(group_starts.shape[0] - 1):
        group = episodes[group_starts[g]:group_starts[g + 1]]
        e_mean, e_scale = _sorted_standardize(env_reward, group, env_buffer, eps)
        if not by_context:
            for s in group:
                ae = (env_reward[s] - e_mean) / e_scale if e_scale > 0.0 else 0.0
                for i in range(offsets[s], offsets[s + 1]):
                    a_e[i], a_s[i], a[i] = ae, 0.0, ae + 0.0
            continue
        # Sums run over the group's episodes in canonical order, memory is read and written in the batch's order
        # (streams the prefetcher follows; visiting episodes in sorted order cost a third more here). `group` is
        # ascending (`_group_by_key` keeps first-appearance order), so an episode's position is a binary search.
        n = group.shape[0]
        ranked = ranked_buffer[:n]
        ranked[:] = group
        _sort_segments(ranked, returns, offsets, context, sort_buffer)
        size = 0
        for s in ranked:
            canonical[np.searchsorted(group, s)] = size
            size += offsets[s + 1] - offsets[s]
        # Pass 1: dense context ids (hash table stamped with g, so never cleared), the returns gathered at their
        # canonical positions.
        n_ids = 0
        for p in range(n):
            s, k = group[p], canonical[p]
            previous, r = ~context[offsets[s]], 0  # keys often come in runs: look each run up once
            for i in range(offsets[s], offsets[s + 1]):
                key = context[i]
                if key != previous:
                    h = np.int64((key * _GOLDEN) >> np.uint64(64 - bits))
                    while slot_stamp[h] == g and slot_key[h] != key:
                        h = (h + 1) & ((1 << bits) - 1)
                    if slot_stamp[h] != g:
                        slot_stamp[h], slot_key[h], slot_id[h] = g, key, n_ids
                        sums[n_ids], counts[n_ids], scales[n_ids] = 0.0, 0, 0.0
                        n_ids += 1
                    previous, r = key, slot_id[h]
                local[k], gathered[k] = r, returns[i]
                k += 1
        # Pass 2: means and squared deviations, in canonical order.
        for k in range(size):
            sums[local[k]] += gathered[k]
            counts[local[k]] += 1
        for r in range(n_ids):
            sums[r] /= counts[r]  # now the mean
        for k in range(size):
            scales[local[k]] += (gathered[k] - sums[local[k]]) ** 2
        for r in range(n_ids):
            std = np.sqrt(scales[r] / counts[r])
            scales[r] = std + eps if counts[r] >= 2 and std > ZERO_VARIANCE else 0.0
        # Pass 3: write A_E, A_S and A in the batch's order.
        for p in range(n):
            s, k = group[p], canonical[p]
            ae = (env_reward[s] - e_mean) / e_scale if e_scale > 0.0 else 0.0
            for i in range(offsets[s], offsets[s + 1]):
                r = local[k]
                step = (gathered[k] - sums[r]) / scales[r] if scales[r] > 0.0 else 0.0
                a_e[i], a_s[i], a[i] = ae, step, ae + step
                k += 1


def _per_element(values: np.ndarray, keys: np.ndarray, minor: np.ndarray | None, eps: float,
                 divide: bool) -> np.ndarray:
    offsets = np.arange(values.shape[0] + 1, dtype=np.int64)
    by_minor = minor is not None
    minor = np.zeros_like(keys) if minor is None else minor  # the kernels read one per element: all 0 here
    out = np.zeros(values.shape[0])
    _standardize_segments(values, offsets, keys, minor, by_minor, float(eps), divide, out)
    return out


def episode_advantage(env_reward: np.ndarray, task_group: np.ndarray, eps: float) -> np.ndarray:
    """A_E `(n_episodes,)`: the terminal outcome standardized among rollouts of the same task instance."""
    values = finite_values("env_reward", env_reward)
    keys = int_keys("task_group", task_group, values.shape[0])
    return _per_element(values, keys, None, eps, True)


def step_advantage(R: np.ndarray, step_task_group: np.ndarray, context_key: np.ndarray | None,
                   eps: float) -> np.ndarray:
    """A_S `(n_steps,)`: the return standardized among steps of one task group with equal context key.

    Without a declared context (`context_key` None) there are no step groups and A_S is 0.
    """
    values = finite_values("R", R)
    keys = int_keys("step_task_group", step_task_group, values.shape[0])
    if context_key is None:
        return np.zeros(values.shape[0])
    return _per_element(values, keys, int_keys("context_key", context_key, values.shape[0]), eps, True)


def grpo_advantage(rewards: np.ndarray, group: np.ndarray, scale: Literal["std", "none"],
                   eps: float) -> np.ndarray:
    """Plain GRPO: (r - mean) / (std + eps) with scale "std", r - mean with "none"; flat groups get 0 either way."""
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    values = finite_values("rewards", rewards)
    keys = int_keys("group", group, values.shape[0])
    return _per_element(values, keys, None, eps, scale == "std")


def fill_trca_advantages(returns: np.ndarray, offsets: np.ndarray, env_reward: np.ndarray, task_keys: np.ndarray,
                         context_keys: np.ndarray | None, eps: float, threads: int, out: np.ndarray) -> None:
    """A_E broadcast to the steps, A_S and A = A_E + A_S into the rows of `out` `(3, n_steps)`, for TRCA's batch
    layout: `env_reward` and `task_keys` once per episode, `returns` and `context_keys` (None without a declared
    context: A_S is 0) per step, all checked by `tracec.runtime.batch_checks`. Equal to `episode_advantage` and
    `step_advantage`, in one pass, task groups shared among `threads` threads; the result does not depend on it."""
    a_e, a_s, a = out
    context = task_keys[:0] if context_keys is None else context_keys
    episodes, group_starts = _group_by_key(task_keys)
    cuts = [0, group_starts.size - 1]
    if worth_splitting(returns.shape[0], threads, MIN_STEPS_PER_PART):
        steps_before_group = np.concatenate([[0], np.cumsum(np.diff(offsets)[episodes])])[group_starts]
        cuts = balanced_cuts(steps_before_group, threads, MIN_STEPS_PER_PART)

    def advantages_part(lo: int, hi: int) -> None:
        _trca_advantage_kernel(returns, offsets, env_reward, episodes, group_starts[lo:hi + 1], context,
                               context_keys is not None, float(eps), a_e, a_s, a)

    run_parts(advantages_part, cuts, threads)
