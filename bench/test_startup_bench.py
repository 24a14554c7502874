"""Start-up: loading a cached rubric in a fresh process, and whole commands in fresh processes.

Loading: parse + check + lowering + the kernel cache's lookup, with the parser's tables loaded from tracec's cache,
side by side with the parser built from the grammar (what every process paid before the tables were cached; the
cache folder is made unusable, so nothing is saved either). Each round starts one fresh process per side,
alternating; inside it the clock starts after the imports and Numba's once-per-process start (its typing and target
registries, which the Numba kernels pay anyway; timed apart in the "kernels" section). Section "startup".

Commands: `tracec check` and a warm `tracec eval` of 10^4 steps, Parquet in, Parquet out (the C kernel from its cache,
the fixed kernels from the package), each a fresh process, against the floors of `python -c pass` and of importing
pyarrow.parquet; rounds interleaved, medians, wall and CPU (user + system) time. Section "startup command".
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tracec.runtime.trajectories.files import convert_trajectories
from tracec.runtime.trajectories.jsonl import gc_paused

from bench.household_data import household_episodes, write_jsonl
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


def _command(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one fresh process."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_command(benchmark, tmp_path) -> None:
    with gc_paused():
        trajectories = tmp_path / "h1e4.parquet"
        convert_trajectories(write_jsonl(household_episodes(10**4, seed=1), tmp_path / "h1e4.jsonl"), trajectories)
    tracec, out = str(Path(sys.executable).with_name("tracec")), str(tmp_path / "out.parquet")
    floors = {"python -c pass": [sys.executable, "-c", "pass"],
              "python -c 'import pyarrow.parquet'": [sys.executable, "-c", "import pyarrow.parquet"]}
    commands = {"tracec check (target <= 0.3 s)": [tracec, "check", str(RUBRIC)],
                "tracec eval, 1e4 steps, Parquet -> Parquet (target <= 1.0 s)":
                    [tracec, "eval", str(RUBRIC), "--trajectories", str(trajectories), "-o", out]}
    sides = floors | commands
    env = {**os.environ, "TRACEC_CACHE_DIR": str(tmp_path / "cache")}
    for argv in sides.values():  # warm: the rubric's kernel, the parser's tables, the files in the page cache
        _command(argv, env)
    runs: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}

    def one_round() -> None:
        for side, argv in sides.items():
            runs[side].append(_command(argv, env))

    benchmark.group = "command"
    benchmark.pedantic(one_round, rounds=max(ROUNDS, 5), iterations=1)
    wall = {side: statistics.median(w for w, _ in times) for side, times in runs.items()}
    cpu = {side: statistics.median(c for _, c in times) for side, times in runs.items()}
    rows = [[side, f"{wall[side] * 1e3:.0f}", f"{cpu[side] * 1e3:.0f}",
             *(f"{wall[side] / wall[floor]:.2f}x" for floor in floors)] for side in sides]
    record("startup command", markdown_table(["command", "wall ms", "CPU ms", *(f"wall / `{f}`" for f in floors)],
                                             rows)
           + f"\n\n`examples/household.rubric`; {max(ROUNDS, 5)} rounds, one fresh process per command a round, the "
           "commands interleaved; medians. Warm: the rubric's kernel and the parser's tables in a TRACEC_CACHE_DIR "
           "filled once before. CPU is user + system time of the process, which the machine's other load inflates "
           f"less than wall time. Machine load while measured: {os.getloadavg()[0]:.1f} (1-minute average).",
           "pytest bench/test_startup_bench.py -k test_command --benchmark-only -p no:xdist")
