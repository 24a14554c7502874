"""Pools of worker processes that end with the process that started them.

A `spawn` pool's workers are programs of their own: when their parent is killed (`pkill`'s SIGTERM, SIGKILL, a
crash), nothing tells them, and they go on with their tasks beside whatever runs next. Each worker here watches its
parent and ends itself, as by the parent's SIGTERM, once the parent is gone. A task's work since its last checkpoint
is lost, as it would be had the kill reached the worker; the runs resume from their checkpoints.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context


def worker_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of `jobs` fresh (spawned, not forked: torch's threads do not survive a fork) worker processes, each of
    which ends when this process does."""
    return ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                               initializer=_end_with_parent, initargs=(os.getpid(),))


def _end_with_parent(parent: int, every_s: float = 0.5) -> None:
    """Watch, from a background thread, that `parent` is still this worker's parent (an orphan is adopted by
    another process); terminate this worker when it is not. Polling works on every platform and whatever killed
    the parent; the check costs a system call every `every_s` seconds."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()
