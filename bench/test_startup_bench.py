"""Loading a cached rubric in a fresh process: parse + check + lowering + the kernel cache's lookup, with the parser's
tables loaded from tracec's cache, side by side with the parser built from the grammar (what every process paid
before the tables were cached; the cache folder is made unusable, so nothing is saved either).

Each round starts one fresh process per side, alternating; inside it the clock starts after the imports and Numba's
once-per-process start (its typing and target registries, which the reward kernels pay anyway; timed apart in the
"kernels" section). Writes bench/RESULTS.md, section "startup".
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bench.results import markdown_table, record

COMMAND = "pytest bench/test_startup_bench.py --benchmark-only -p no:xdist"
RUBRIC = Path(__file__).resolve().parents[1] / "examples" / "household.rubric"
ROUNDS = int(os.environ.get("STARTUP_ROUNDS", "9"))

LOAD = """
import json, sys, time
from pathlib import Path
from tracec.compiler.backends import compile_kernel
from tracec.compiler.cache import KernelCache
from tracec.compiler.pipeline import compile_rubric
from tracec.dsl.check import check
from tracec.dsl.parse import parse_file
from numba.core.registry import cpu_target
cpu_target.target_context.refresh()
cpu_target.typing_context.refresh()
rubric, kernels, backend = sys.argv[1:4]
start = time.perf_counter()
module = parse_file(rubric)
parsed = time.perf_counter()
checked = check(module)
compiled = compile_rubric(next(iter(checked.rubrics.values())))
lowered = time.perf_counter()
kernel = compile_kernel(compiled.program, backend, KernelCache(Path(kernels)))
done = time.perf_counter()
print(json.dumps({"parse": parsed - start, "check": lowered - parsed, "lookup": done - lowered, "total": done - start,
                  "from_cache": kernel.from_cache}))
"""


def _load(cache_dir: Path, kernels: Path, backend: str) -> dict:
    env = {**os.environ, "TRACEC_CACHE_DIR": str(cache_dir)}
    done = subprocess.run([sys.executable, "-c", LOAD, str(RUBRIC), str(kernels), backend], capture_output=True,
                          text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["numba", "c"])
def test_startup(benchmark, tmp_path, backend) -> None:
    cached, unusable, kernels = tmp_path / "cache", tmp_path / "not-a-folder", tmp_path / "kernels"
    unusable.write_text("")
    _load(cached, kernels, backend)  # fills the parser's and the kernel's caches
    runs: dict[str, list[dict]] = {"cached parser tables": [], "parser built": []}

    def one_round() -> None:
        for side, folder in (("cached parser tables", cached), ("parser built", unusable)):
            report = _load(folder, kernels, backend)
            assert report["from_cache"], "the kernel should come from its cache"
            runs[side].append(report)

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    _FOUND[backend] = runs


_FOUND: dict[str, dict[str, list[dict]]] = {}


def _cell(reports: list[dict], key: str) -> str:
    values = sorted(r[key] * 1e3 for r in reports)
    return f"{statistics.median(values):.1f} ({values[0]:.1f}-{values[-1]:.1f})"


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    rows = []
    for backend, runs in _FOUND.items():
        for side, reports in runs.items():
            rows.append([backend, side, *(_cell(reports, key) for key in ("parse", "check", "lookup", "total"))])
        ratio = statistics.median(r["total"] for r in runs["parser built"]) / statistics.median(
            r["total"] for r in runs["cached parser tables"])
        rows.append([backend, "built / cached", "", "", "", f"{ratio:.1f}x"])
    if rows:
        record("startup", markdown_table(["kernel", "side", "parse ms", "check + lower ms", "kernel lookup ms",
                                          "total ms (target <= 50 cached)"], rows)
               + f"\n\n`examples/household.rubric`, {ROUNDS} rounds, one fresh process per side a round, alternating; "
               "median (min-max) of the rounds. The clock starts after the imports and Numba's once-per-process start. "
               "'parser built' runs with $TRACEC_CACHE_DIR pointing at a file, so the tables are built and cannot be "
               "saved (the fallback of an unusable cache); the kernel comes from its warm cache on both sides.",
               COMMAND)
