"""Group standardization: GRPO's rule, one definition shared by the episode credits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.trace_rl.grpo.credit import grpo_advantages
from tracec.trace_rl.grpo.standardize import standardize_in_groups


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.floats(-1e6, 1e6), min_size=0, max_size=20), data=st.data(), divide=st.booleans())
def test_it_is_grpos_advantage_bit_for_bit(values: list[float], data: st.DataObject, divide: bool) -> None:
    groups = np.array(data.draw(st.lists(st.integers(-3, 3), min_size=len(values), max_size=len(values))),
                      dtype=np.int64)
    got = standardize_in_groups(np.array(values), groups, divide_by_std=divide)
    assert np.array_equal(got, grpo_advantages(np.array(values), groups, scale="std" if divide else "none"))


def test_a_group_of_one_is_zero_and_ids_may_be_large() -> None:
    keys = np.array([2 ** 63 + 5, 7, 2 ** 63 + 5], dtype=np.uint64)
    got = standardize_in_groups(np.array([1.0, 4.0, 3.0]), keys, divide_by_std=False)
    assert np.array_equal(got, [-1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="one group id per value"):
        standardize_in_groups(np.zeros(2), np.zeros(3), divide_by_std=True)
