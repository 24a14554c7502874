"""The fixed reward kernels compile once into Numba's disk cache: warmed at install, loaded by later processes, and
compiled in memory (with a warning naming the setting that fixes it) where no cache folder can be written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_without_a_writable_cache_the_kernel_still_runs_and_the_warning_names_the_setting(monkeypatch) -> None:
    from numba.core import caching
    from tracec.runtime.jit import fixed_kernel

    def unwritable(self):  # every folder Numba would try, as on a read-only install with a read-only home
        raise OSError("read-only file system")

    monkeypatch.setattr(caching._CacheLocator, "ensure_cache_path", unwritable)

    def twice(x):
        return 2 * x

    with pytest.warns(RuntimeWarning, match="set NUMBA_CACHE_DIR to a writable folder"):
        kernel = fixed_kernel(nogil=True)(twice)
    assert kernel(21) == 42 and type(kernel._cache).__name__ != "FunctionCache"


_LOAD = """
import json, numpy as np
from tracec.runtime import advantages, rewards
from tracec.runtime.jit import warm
warm()
kernels = [v for m in (rewards, advantages) for v in vars(m).values() if hasattr(v, "stats") and hasattr(v, "py_func")]
print(json.dumps({k.py_func.__name__: [sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values())]
                  for k in kernels}))
"""


@pytest.mark.slow
def test_the_install_step_fills_a_cache_that_a_new_process_loads(tmp_path: Path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    done = subprocess.run([sys.executable, "-m", "tracec.runtime.jit"], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert "reward kernels compiled into Numba's cache" in done.stderr
    later = subprocess.run([sys.executable, "-c", _LOAD], env=env, capture_output=True, text=True, timeout=600,
                           check=False)
    assert later.returncode == 0, later.stderr
    counts = json.loads(later.stdout.strip().splitlines()[-1])
    assert "_trca_kernel" in counts and "_trca_advantage_kernel" in counts
    used = {name: hits for name, (hits, misses) in counts.items() if hits or misses}
    assert used and all(counts[name][1] == 0 for name in used), counts  # every kernel used came from the cache
