"""Group standardization: GRPO's rule, one definition shared by the episode credits (its formula: test_credit.py)."""

from __future__ import annotations

import numpy as np
import pytest
from tracec.trace_rl.grpo.standardize import standardize_in_groups


def test_a_group_of_one_is_zero_and_ids_may_be_large() -> None:
    keys = np.array([2 ** 63 + 5, 7, 2 ** 63 + 5], dtype=np.uint64)
    got = standardize_in_groups(np.array([1.0, 4.0, 3.0]), keys, divide_by_std=False)
    assert np.array_equal(got, [-1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="one group id per value"):
        standardize_in_groups(np.zeros(2), np.zeros(3), divide_by_std=True)
