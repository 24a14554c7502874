"""The operator row as a 64-bit mask (word loads and bit folding) against its definition, bit j = O[t, j] != 0."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.runtime.rewards.row_mask import row_mask


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 64), st.integers(0, 9), st.integers(1, 4), st.integers(0, 2**32 - 1),
       st.sampled_from(["binary", "any byte", "sparse"]))
def test_row_mask_sets_bit_j_when_operator_j_fired(width, first_column, n_rows, seed, values):
    rng = np.random.default_rng(seed)
    wide = rng.integers(0, 256, (n_rows, first_column + width + 3), dtype=np.uint8)  # neighbours hold garbage
    if values == "binary":
        wide = (wide & 1).astype(np.uint8)
    elif values == "sparse":
        wide[wide < 230] = 0
    O = wide[:, first_column:first_column + width]  # a column slice, as the kernel's 64-operator passes take
    for t in range(n_rows):
        want = sum(1 << j for j in range(width) if O[t, j] != 0)
        assert int(row_mask(O.ctypes.data + t * O.strides[0], width)) == want
