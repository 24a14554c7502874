"""Cutting a batch into parts for threads, and running the parts."""

from __future__ import annotations

import threading
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.compiler.threads import MIN_ITEMS_PER_PART, balanced_cuts, even_cuts, run_parts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3 * MIN_ITEMS_PER_PART), max_size=40), st.integers(1, 8))
def test_balanced_cuts_tile_the_units_in_parts_of_about_equal_work(work, threads):
    cumulative = np.concatenate([[0], np.cumsum(work, dtype=np.int64)])
    cuts = balanced_cuts(cumulative, threads)
    assert cuts[0] == 0 and cuts[-1] == len(work)
    assert all(a < b for a, b in pairwise(cuts)) or not work
    parts = len(cuts) - 1
    if threads == 1 or cumulative[-1] < 2 * MIN_ITEMS_PER_PART:
        assert parts <= 1
    # A part overshoots an equal share by at most one unit's work.
    share = cumulative[-1] / max(parts, 1)
    for lo, hi in pairwise(cuts):
        assert cumulative[hi] - cumulative[lo] <= share + max(work[lo:hi], default=0)


@given(st.integers(0, 10**7), st.integers(1, 8))
def test_even_cuts_cover_every_item_once(n, threads):
    cuts = even_cuts(n, threads)
    assert cuts[0] == 0 and cuts[-1] == n and cuts == sorted(cuts)
    assert len(cuts) - 1 <= max(1, n // MIN_ITEMS_PER_PART)


def test_run_parts_runs_each_part_once_on_several_threads():
    seen, names = [], set()
    # The first three parts wait for each other: they can only finish if three threads took them.
    all_started = threading.Barrier(3, timeout=30)

    def part(lo, hi):
        seen.append((lo, hi))
        names.add(threading.current_thread().name)
        if lo < 30:
            all_started.wait()

    cuts = list(range(0, 100, 10))
    run_parts(part, cuts, threads=3)
    assert sorted(seen) == list(pairwise(cuts))
    assert len(names) == 3 and threading.current_thread().name in names


def test_run_parts_raises_what_a_part_raised():
    def part(lo, hi):
        if lo == 20:
            raise ValueError("part 20 failed")

    with pytest.raises(ValueError, match="part 20 failed"):
        run_parts(part, [0, 10, 20, 30], threads=2)
