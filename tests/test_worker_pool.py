"""Pool workers end with the process that started them (tracec/worker_pool.py), whatever killed it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tracec.worker_pool import worker_pool

# A parent that starts a pool whose one task writes its worker's pid and then works far longer than the test waits.
PARENT = """
import os, sys, time
from pathlib import Path
from tracec.worker_pool import worker_pool

def task(where):
    Path(where).write_text(str(os.getpid()))
    time.sleep(600)

if __name__ == "__main__":
    with worker_pool(1) as pool:
        pool.submit(task, sys.argv[1]).result()
"""


def _ended(pid: int) -> bool:
    """Whether the process is gone or a zombie (dead, not yet reaped by whoever adopted it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/status")
    return status.is_file() and "\nState:\tZ" in status.read_text()


def _wait_for(condition: Callable[[], object], seconds: float) -> bool:
    """Whether `condition` holds within `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("kill", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_parents_workers_end(tmp_path: Path, kill: signal.Signals) -> None:
    script, where = tmp_path / "parent.py", tmp_path / "worker.pid"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(where)], cwd=tmp_path)
    worker = None
    try:
        assert _wait_for(lambda: where.is_file() and where.read_text(), 60), "the pool's task never started"
        worker = int(where.read_text())
        assert worker != parent.pid and not _ended(worker)
        parent.send_signal(kill)  # to the parent alone, as `pkill -f` sends it
        parent.wait(10)
        assert _wait_for(lambda: _ended(worker), 30), "the worker outlived its parent"
    finally:
        parent.kill()
        if worker is not None and not _ended(worker):
            os.kill(worker, signal.SIGKILL)


def _double(value: int) -> int:
    return 2 * value


def test_workers_of_a_living_parent_do_their_tasks() -> None:
    with worker_pool(2) as pool:
        assert list(pool.map(_double, range(5))) == [0, 2, 4, 6, 8]
