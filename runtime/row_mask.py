"""One step's operator row of `O` (up to 64 uint8 flags) as a 64-bit mask, bit j set when operator j fired.

The reward kernel needs this for every step, and a byte-at-a-time loop (load, compare, shift, or per operator) was
most of that kernel's time. Here eight flags are read as one unaligned 8-byte load and folded into eight bits with
two word-wide tricks, so a 15-operator rubric takes two loads instead of fifteen. Rows narrower than 8 operators
(where an 8-byte read could leave the array) take the byte loop.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_HIGH = np.uint64(0x8080808080808080)
# Multiplying 0/1 bytes by this sums byte i into bit 56 + i with no carries (each byte meets one distinct power).
_GATHER = np.uint64(0x0102040810204080)


@intrinsic
def _load_word(typingctx, array, row, column):  # type: ignore[no-untyped-def]
    """The 8 bytes of a 2-D uint8 array from [row, column] on along the row, little-endian, at any alignment.

    The caller keeps column + 8 within the row; the row's bytes must be contiguous (unit stride), as in `O`."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array_type, (data, row_index, column_index) = signature.args[0], args
        view = context.make_array(array_type)(context, builder, data)
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [row_index, column_index])
        return builder.load(builder.bitcast(pointer, ir.IntType(64).as_pointer()), align=1)

    return types.uint64(array, row, column), codegen


@njit(inline="always")
def _fold(word: np.uint64) -> np.uint64:
    """Eight bytes -> eight bits, bit i set when byte i is nonzero."""
    nonzero = ((((word & _LOW7) + _LOW7) | word) & _HIGH) >> np.uint64(7)  # each byte's high bit: byte != 0
    return (nonzero * _GATHER) >> np.uint64(56)


@njit(inline="always")
def row_mask(O: np.ndarray, t: int) -> np.uint64:
    """Bit j of the result is O[t, j] != 0, for the (at most 64) columns of O; O's rows must have unit stride."""
    n_ops = O.shape[1]
    bits = np.uint64(0)
    if n_ops < 8:
        for j in range(n_ops):
            bits |= np.uint64(O[t, j] != 0) << np.uint64(j)
        return bits
    full = n_ops - n_ops % 8
    for j in range(0, full, 8):
        bits |= _fold(_load_word(O, t, j)) << np.uint64(j)
    if full < n_ops:
        # The last 8 bytes of the row: the first 8 - (n_ops - full) of them were already read.
        bits |= (_fold(_load_word(O, t, n_ops - 8)) >> np.uint64(8 - (n_ops - full))) << np.uint64(full)
    return bits
