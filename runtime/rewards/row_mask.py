"""One step's operator row of `O` (up to 64 uint8 flags) as a 64-bit mask, bit j set when operator j fired.

The reward kernel needs this for every step, and a byte-at-a-time loop (load, compare, shift, or per operator) was
most of that kernel's time. Here eight flags are read as one unaligned 8-byte load and folded into eight bits with
two word-wide tricks, so a 15-operator rubric takes two loads instead of fifteen. Rows narrower than 8 operators
(where an 8-byte read could leave the row) take the byte loop.

The row is given by its address, not as an array: an array handed to a function inside the per-step loop cost
Numba a reference-count increment and decrement (two atomic calls) per step, a quarter of the kernel's time.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_HIGH = np.uint64(0x8080808080808080)
# Multiplying 0/1 bytes by this sums byte i into bit 56 + i with no carries (each byte meets one distinct power).
_GATHER = np.uint64(0x0102040810204080)


def _unaligned_load(bits: int):  # type: ignore[no-untyped-def]
    """An intrinsic reading `bits` bits at an integer address (any alignment), zero-extended to uint64."""

    @intrinsic
    def load(typingctx, address):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            value = builder.load(builder.inttoptr(args[0], ir.IntType(bits).as_pointer()), align=1)
            return builder.zext(value, ir.IntType(64)) if bits < 64 else value

        return types.uint64(address), codegen

    return load


_load_byte = _unaligned_load(8)
_load_word = _unaligned_load(64)  # little-endian: byte i of memory is byte i of the word


@njit(inline="always")
def _fold(word: np.uint64) -> np.uint64:
    """Eight bytes -> eight bits, bit i set when byte i is nonzero."""
    nonzero = ((((word & _LOW7) + _LOW7) | word) & _HIGH) >> np.uint64(7)  # each byte's high bit: byte != 0
    return (nonzero * _GATHER) >> np.uint64(56)


@njit(inline="always")
def row_mask(row: int, n_ops: int) -> np.uint64:
    """Bit j of the result is byte j != 0, for the n_ops (at most 64) bytes at address `row`: for step t of a uint8
    array `O` with unit column stride, row = O.ctypes.data + t * O.strides[0], while O is alive."""
    bits = np.uint64(0)
    if n_ops < 8:
        for j in range(n_ops):
            bits |= np.uint64(_load_byte(row + j) != 0) << np.uint64(j)
        return bits
    full = n_ops - n_ops % 8
    for j in range(0, full, 8):
        bits |= _fold(_load_word(row + j)) << np.uint64(j)
    if full < n_ops:
        # The last 8 bytes of the row: the first 8 - (n_ops - full) of them were already read.
        bits |= (_fold(_load_word(row + n_ops - 8)) >> np.uint64(8 - (n_ops - full))) << np.uint64(full)
    return bits
