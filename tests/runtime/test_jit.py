"""Where the C extension was not built, the fixed reward kernels are Numba's: compiled once into its disk cache by
`python -m tracec.runtime.rewards.warm`, loaded by later processes, and compiled in memory (with a warning naming the
setting that fixes it) where no cache folder can be written. Where it was built, that step has nothing to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_without_a_writable_cache_the_kernel_still_runs_and_the_warning_names_the_setting(monkeypatch) -> None:
    from numba.core import caching
    from tracec.runtime.rewards.numba_cache import fixed_kernel

    def unwritable(self):  # every folder Numba would try, as on a read-only install with a read-only home
        raise OSError("read-only file system")

    monkeypatch.setattr(caching._CacheLocator, "ensure_cache_path", unwritable)

    def twice(x):
        return 2 * x

    with pytest.warns(RuntimeWarning, match="set NUMBA_CACHE_DIR to a writable folder"):
        kernel = fixed_kernel(nogil=True)(twice)
    assert kernel(21) == 42 and type(kernel._cache).__name__ != "FunctionCache"


# What an install without a C compiler leaves: no extension, so the Numba kernels run.
_WITHOUT_EXTENSION = 'import sys; sys.modules["tracec.runtime._fixed"] = None\n'
_INSTALL_STEP = _WITHOUT_EXTENSION + ("import runpy; "
                                      "runpy.run_module('tracec.runtime.rewards.warm', run_name='__main__')")
_LOAD = _WITHOUT_EXTENSION + """
import json
from tracec.runtime.rewards import advantage_kernels, context_group_kernels, reward_kernels
from tracec.runtime.rewards.warm import warm
warm()
kernels = [v for m in (reward_kernels, advantage_kernels, context_group_kernels) for v in vars(m).values()
           if hasattr(v, "stats") and hasattr(v, "py_func")]
print(json.dumps({k.py_func.__name__: [sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values())]
                  for k in kernels}))
"""


def test_with_the_extension_the_install_step_has_nothing_to_compile() -> None:
    done = subprocess.run([sys.executable, "-m", "tracec.runtime.rewards.warm"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and "nothing to do" in done.stderr, done.stderr


@pytest.mark.slow
def test_the_install_step_fills_a_cache_that_a_new_process_loads(tmp_path: Path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    done = subprocess.run([sys.executable, "-c", _INSTALL_STEP], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert "reward kernels compiled into Numba's cache" in done.stderr
    later = subprocess.run([sys.executable, "-c", _LOAD], env=env, capture_output=True, text=True, timeout=600,
                           check=False)
    assert later.returncode == 0, later.stderr
    counts = json.loads(later.stdout.strip().splitlines()[-1])
    assert "trca_kernel" in counts and "trca_advantage_kernel" in counts and "exact_keys" in counts
    used = {name: hits for name, (hits, misses) in counts.items() if hits or misses}
    assert used and all(counts[name][1] == 0 for name in used), counts  # every kernel used came from the cache
