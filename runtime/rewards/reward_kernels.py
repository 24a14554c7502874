"""The reward kernels in Numba: one pass over `O` for r_F and r_B, one reverse scan per episode for the returns.

The definition of what runtime/_fixed.c computes in C, bit for bit (`fixed_kernels`), and what runs where that
extension was not built. `trca` checks the inputs and calls these through `fixed_kernels()`.
"""

from __future__ import annotations

import numpy as np
from tracec.runtime.rewards.numba_cache import fixed_kernel
from tracec.runtime.rewards.row_mask import row_mask


@fixed_kernel()
def chunk_table(weights: np.ndarray, table: np.ndarray) -> None:
    """Fill `table` (n_chunks, 256), zeros on entry: for each block of 8 operators, the summed weight of every
    pattern of them firing."""
    for c in range(table.shape[0]):
        for bits in range(256):
            for b in range(min(8, weights.shape[0] - 8 * c)):
                if (bits >> b) & 1:
                    table[c, bits] += weights[8 * c + b]


@fixed_kernel(nogil=True)
def _episode_returns(r_trca: np.ndarray, start: int, stop: int, env_reward: float, gamma: float,
                     returns: np.ndarray) -> None:
    if stop == start:
        return
    acc = r_trca[stop - 1] + env_reward
    returns[stop - 1] = acc
    for t in range(stop - 2, start - 1, -1):
        acc = r_trca[t] + gamma * acc
        returns[t] = acc


# The kernels fill arrays allocated by numpy, which asks for transparent huge pages: on a fresh array from inside
# a kernel the page faults cost more than the arithmetic.
@fixed_kernel(nogil=True)
def trca_kernel(O: np.ndarray, offsets: np.ndarray, fire_table: np.ndarray, cover_table: np.ndarray,
                accumulate: bool, lam: float, env_reward: np.ndarray, gamma: float, r_f: np.ndarray, r_b: np.ndarray,
                r_trca: np.ndarray, returns: np.ndarray) -> None:
    """r_F and r_B of up to 64 operators (added to what r_f, r_b hold when `accumulate`), then r_TRCA and the
    returns unless those arrays are empty; episode by episode, while the episode is in cache.

    A step's operators become one 64-bit word, so coverage lives in a register."""
    n_chunks, n_ops, first_row, row_stride = fire_table.shape[0], O.shape[1], O.ctypes.data, O.strides[0]
    for e in range(offsets.shape[0] - 1):
        start, stop = offsets[e], offsets[e + 1]
        covered = np.uint64(0)
        for t in range(start, stop):
            bits = row_mask(first_row + t * row_stride, n_ops)
            newly_bits = bits & ~covered  # first coverage only, so r_B >= 0 exactly
            covered |= bits
            fired = r_f[t] if accumulate else 0.0
            newly = r_b[t] if accumulate else 0.0  # Phi_t - Phi_{t-1}
            for c in range(n_chunks):
                shift = np.uint64(8 * c)
                fired += fire_table[c, (bits >> shift) & np.uint64(255)]
                newly += cover_table[c, (newly_bits >> shift) & np.uint64(255)]
            r_f[t] = fired
            r_b[t] = newly
            if r_trca.shape[0] > 0:
                r_trca[t] = (1.0 - lam) * fired + lam * newly
        if returns.shape[0] > 0:
            _episode_returns(r_trca, start, stop, env_reward[e], gamma, returns)


@fixed_kernel()
def returns_kernel(r_trca: np.ndarray, env_reward: np.ndarray, offsets: np.ndarray, gamma: float,
                   returns: np.ndarray) -> None:
    for e in range(offsets.shape[0] - 1):
        _episode_returns(r_trca, offsets[e], offsets[e + 1], env_reward[e], gamma, returns)


@fixed_kernel()
def first_overflowing_return(env_reward: np.ndarray, offsets: np.ndarray, fire_weight: np.ndarray,
                             coverage_weight: np.ndarray) -> int:
    """The first episode whose return bound |env_reward| + steps * (sum |fire| + sum |coverage|), with room for the
    rounding of that many additions, leaves the float range, or -1; in one call, so that small batches do not pay
    numpy's cost per call."""
    per_step = np.abs(fire_weight).sum() + np.abs(coverage_weight).sum()
    for e in range(env_reward.shape[0]):
        length = offsets[e + 1] - offsets[e]
        bound = (abs(env_reward[e]) + length * per_step) * (1.0 + 4.0 * length * 2.0**-53)
        if not bound <= 1.7976931348623157e308:
            return e
    return -1
