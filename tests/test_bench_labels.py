"""A bench side's name says what ran: the rewards bench names `evaluate_rewards`'s kernels by `fixed_backend`,
checked against the modules a fresh process actually loaded to compute a batch, with the C extension importable
(as `make` builds it) and with it hidden (the Numba fallback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN = """
import json, sys
hide = sys.argv[1] == "hide"
class Hidden:  # the C extension as if it was never built
    def find_spec(self, name, path=None, target=None):
        if name == "tracec.runtime._fixed":
            raise ImportError("hidden")
        return None
if hide:
    sys.meta_path.insert(0, Hidden())
from bench.test_rewards_bench import CATEGORIES, fixed_backend, make_batch
from tracec.runtime.rewards.trca import RewardConfig, evaluate_rewards, operator_weights
config = RewardConfig()
fire, coverage = operator_weights(CATEGORIES, config)
evaluate_rewards(*make_batch(1000), fire, coverage, config)
print(json.dumps({"label": fixed_backend(), "c": "tracec.runtime._fixed" in sys.modules,
                  "numba": "tracec.runtime.rewards.reward_kernels" in sys.modules}))
"""


@pytest.mark.parametrize("extension", ["built", "hide"])
def test_the_rewards_bench_names_the_kernels_that_ran(extension: str) -> None:
    done = subprocess.run([sys.executable, "-c", RUN, extension], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    ran = json.loads(done.stdout.strip().splitlines()[-1])
    assert ran["c"] != ran["numba"]  # exactly one implementation computed the batch
    assert ran["label"] == ("C extension" if ran["c"] else "Numba")
    if extension == "hide":
        assert ran["numba"]  # the fallback ran, and the label said so
