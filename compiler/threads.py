"""Running a GIL-releasing kernel over parts of a batch on a few threads.

The compiled operator kernel and the reward kernels are serial loops that release the GIL (a ctypes call, a C
extension's function, a Numba `nogil` one); a batch is cut into independent parts (transition ranges, whole
episodes, whole task groups) and the parts go to the calling thread and a few short-lived helper threads. Threads owned
by the call, rather than Numba's `parallel=True`, because Numba's parallel compiler costs several times the serial
compile and its default threading layer must not be entered from two threads at once, which a trainer calling rewards
from its own threads would do.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from itertools import pairwise

import numpy as np

MIN_ITEMS_PER_PART = 16384  # below this a thread costs more than it saves
PARTS_PER_THREAD = 4  # parts are taken as threads come free: one slow core does not hold the others up


def default_threads() -> int:
    """Numba's thread count, read as Numba reads it (without importing Numba, which the C paths never need):
    NUMBA_NUM_THREADS, else the cores this process may run on."""
    setting = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if setting.isdigit() and int(setting) > 0:
        return int(setting)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def worth_splitting(work: int, threads: int, min_per_part: int = MIN_ITEMS_PER_PART) -> bool:
    """Whether `work` items (transitions, steps) are enough to share among `threads` threads, in parts of at least
    `min_per_part` items (cheaper work per item needs bigger parts to pay for a thread)."""
    return threads > 1 and work >= 2 * min_per_part


def _part_count(work: int, n_units: int, threads: int, min_per_part: int) -> int:
    if not worth_splitting(work, threads, min_per_part):
        return 1
    return max(1, min(PARTS_PER_THREAD * threads, work // min_per_part, n_units))


def even_cuts(n: int, threads: int) -> list[int]:
    """Cut points 0 = c_0 < ... < c_p = n splitting n equal units (transitions) into parts for `threads` threads."""
    parts = _part_count(n, n, threads, MIN_ITEMS_PER_PART)
    return [n * p // parts for p in range(parts + 1)]


def balanced_cuts(cumulative: np.ndarray, threads: int, min_per_part: int = MIN_ITEMS_PER_PART) -> list[int]:
    """Cut points 0 = c_0 < ... < c_p = n_units splitting units of unequal work (episodes, task groups) into parts
    of about equal work, where `cumulative` `(n_units + 1,)` is the running total of work (steps) before each unit."""
    n_units, work = cumulative.shape[0] - 1, int(cumulative[-1])
    parts = _part_count(work, n_units, threads, min_per_part)
    if parts == 1:
        return [0, n_units]
    inner = np.searchsorted(cumulative, [work * p // parts for p in range(1, parts)], side="left")
    return sorted({0, n_units, *(int(c) for c in inner)})


def run_parts(function: Callable[[int, int], object], cuts: list[int], threads: int) -> None:
    """function(lo, hi) for each consecutive pair of `cuts`, on the calling thread and up to `threads - 1` helpers,
    each taking the next part as it comes free; the first error raised in a part is raised here once all stop."""
    parts = iter(pairwise(cuts))
    n_parts = len(cuts) - 1
    if n_parts <= 1 or threads <= 1:
        for lo, hi in parts:
            function(lo, hi)
        return
    taking = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while not errors:
            with taking:
                part = next(parts, None)
            if part is None:
                return
            try:
                function(*part)
            except BaseException as error:  # noqa: BLE001 (handed to the calling thread, which raises it)
                errors.append(error)

    # Plain threads, the caller among them: an executor costs ~0.7 ms a call here, a thread ~0.1 ms.
    helpers = [threading.Thread(target=work, daemon=True) for _ in range(min(threads, n_parts) - 1)]
    for helper in helpers:
        helper.start()
    work()
    for helper in helpers:
        helper.join()
    if errors:
        raise errors[0]
