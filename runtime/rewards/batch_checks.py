"""Checks of the arrays a reward batch is given, each returned in the layout the Numba kernels read.

Shared by `trca.py` and `advantages.py`; every error names the argument and what was wrong with it.
"""

from __future__ import annotations

import numpy as np


def output_rows(name: str, block: np.ndarray, rows: int, n: int) -> np.ndarray:
    """The first n columns of a float64 `(rows, m >= n)` block whose rows are contiguous, for kernels to fill."""
    if not (isinstance(block, np.ndarray) and block.dtype == np.float64 and block.ndim == 2
            and block.shape[0] == rows and block.shape[1] >= n and (n == 0 or block.strides[1] == 8)
            and block.flags.writeable):
        shown = f"{block.dtype} {block.shape}" if isinstance(block, np.ndarray) else type(block).__name__
        raise ValueError(f"{name} must be a writable float64 array of shape ({rows}, m >= {n}) with contiguous "
                         f"rows, got {shown}")
    return block[:, :n]


def check_offsets(offsets: np.ndarray, n_items: int) -> np.ndarray:
    """`offsets` as contiguous int64, checked to delimit segments that tile 0..n_items in order (some empty)."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or offsets.size < 1:
        raise ValueError(f"episode_offsets must be 1-D with n_episodes + 1 entries, got shape {offsets.shape}")
    if offsets[0] != 0 or offsets[-1] != n_items:
        raise ValueError(f"episode_offsets must run from 0 to n_steps = {n_items}, "
                         f"got {offsets[0]} .. {offsets[-1]}")
    drops = np.flatnonzero(np.diff(offsets) < 0)
    if drops.size:
        i = int(drops[0])
        raise ValueError(f"episode_offsets must not decrease: offsets[{i}] = {offsets[i]} > "
                         f"offsets[{i + 1}] = {offsets[i + 1]}")
    return offsets


def int_keys(name: str, keys: np.ndarray, n: int) -> np.ndarray:
    keys = np.asarray(keys)
    if keys.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {keys.shape}")
    if not np.issubdtype(keys.dtype, np.integer):
        raise ValueError(f"{name} must hold integer keys (e.g. int64 hashes), got dtype {keys.dtype}")
    return np.ascontiguousarray(keys, dtype=np.int64).view(np.uint64)


def finite_values(name: str, values: np.ndarray) -> np.ndarray:
    values = np.ascontiguousarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"{name} has a non-finite entry at index {int(np.flatnonzero(~np.isfinite(values))[0])}")
    return values
