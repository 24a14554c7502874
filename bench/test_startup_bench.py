"""Start-up: loading a cached rubric in a fresh process, and whole commands in fresh processes.

Loading: parse + check + lowering + the kernel cache's lookup, with the parser's tables loaded from tracec's cache,
side by side with the parser built from the grammar (what every process paid before the tables were cached; the
cache folder is made unusable, so nothing is saved either). Each round starts one fresh process per side,
alternating; inside it the clock starts after the imports and Numba's once-per-process start (its typing and target
registries, which the Numba kernels pay anyway; timed apart in the "kernels" section). Section "startup".

Commands: `tracec check` and a warm `tracec score` of 10^4 steps, Parquet in, Parquet out (the C kernel from its cache,
the fixed kernels from the package), each a fresh process, against the floors of `python -c pass` and of importing
pyarrow.parquet; rounds interleaved, medians, wall and CPU (user + system) time. Section "startup command".
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tracec.runtime.facts.trajectories.files import convert_trajectories
from tracec.runtime.facts.trajectories.jsonl import gc_paused

from bench.household_data import household_episodes, write_jsonl
from bench.results import markdown_table, record
from bench.sides import Rounds, describe, field, load_average

COMMAND = "pytest bench/test_startup_bench.py --benchmark-only -p no:xdist"
RUBRIC = Path(__file__).resolve().parents[1] / "examples" / "household.rubric"
ROUNDS = int(os.environ.get("STARTUP_ROUNDS", "9"))  # >= sides.ROUNDS; fewer only for a quick trial

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
rubric, kernels, backend, parser = sys.argv[1:5]
if parser == "built":  # neither the install's tables beside the grammar nor a cache folder's: built from the grammar
    import tracec.dsl.syntax
    tracec.dsl.syntax._installed_folder = lambda: Path("/nonexistent")
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


def _load(cache_dir: Path, kernels: Path, backend: str, parser: str = "cached") -> dict:
    env = {**os.environ, "TRACEC_CACHE_DIR": str(cache_dir)}
    done = subprocess.run([sys.executable, "-c", LOAD, str(RUBRIC), str(kernels), backend, parser], capture_output=True,
                          text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def found():
    """{backend: {side: each round's report}}, written as the section "startup" when the module's tests are done."""
    runs: dict[str, dict[str, list[dict]]] = {}
    yield runs
    if runs:
        _report(runs)


@pytest.mark.parametrize("backend", ["numba", "c"])
def test_startup(benchmark, found, tmp_path, backend) -> None:
    cached, unusable, kernels = tmp_path / "cache", tmp_path / "not-a-folder", tmp_path / "kernels"
    unusable.write_text("")
    _load(cached, kernels, backend)  # fills the parser's and the kernel's caches
    runs: dict[str, list[dict]] = {"cached parser tables": [], "parser built": []}

    def one_round() -> None:
        for side, folder, parser in (("cached parser tables", cached, "cached"),
                                     ("parser built", unusable, "built")):
            report = _load(folder, kernels, backend, parser)
            assert report["from_cache"], "the kernel should come from its cache"
            runs[side].append(report)

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    found[backend] = runs


def _report(found: dict[str, dict[str, list[dict]]]) -> None:
    rows = []
    for backend, runs in found.items():
        for side in runs:
            rows.append([backend, side, *(field(runs, key).time(side).scaled(1e3).cell(1)
                                          for key in ("parse", "check", "lookup", "total"))])
        ratio = field(runs, "total").ratio("parser built", "cached parser tables")
        rows.append([backend, "built / cached (paired)", "", "", "", ratio.cell(1, "x")])
    if rows:
        record("startup", markdown_table(["kernel", "side", "parse ms", "check + lower ms", "kernel lookup ms",
                                          "total ms (target <= 50 cached)"], rows)
               + "\n\n`examples/household.rubric`, one fresh process per side a round. "
               + describe(ROUNDS, "command", "1") + " The clock starts inside the process, after the imports and "
               "Numba's once-per-process start. "
               "'parser built' finds no tables: not the install's beside the grammar (the bench hides them) nor a "
               "cache folder's ($TRACEC_CACHE_DIR points at a file, so nothing is saved either: the fallback of an "
               "unusable cache); the kernel comes from its warm cache on both sides.",
               COMMAND)


CHECK, EVAL = "tracec check (target <= 0.3 s)", "tracec score, 1e4 steps, Parquet -> Parquet (target <= 1.0 s)"
TARGETS = {CHECK: 0.3, EVAL: 1.0}


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
    commands = {CHECK: [tracec, "check", str(RUBRIC)],
                EVAL:
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
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    wall = Rounds({side: [w for w, _ in times] for side, times in runs.items()})
    cpu = Rounds({side: [c for _, c in times] for side, times in runs.items()})
    rows = [[side, wall.time(side).scaled(1e3).cell(0), cpu.time(side).scaled(1e3).cell(0),
             *(wall.ratio(side, floor).cell(2, "x") for floor in floors)] for side in sides]
    verdicts = "; ".join(f"{side}: " + ("met" if wall.time(side).median <= target else "missed")
                         for side, target in TARGETS.items())
    record("startup command", markdown_table(["command", "wall ms", "CPU ms", *(f"wall / `{f}`" for f in floors)],
                                             rows)
           + f"\n\nTargets (median wall): {verdicts}. `examples/household.rubric`; one fresh process per command a "
           "round. " + describe(len(wall), "command", "the commands' own") + " Warm: the rubric's kernel and the "
           "parser's tables in a TRACEC_CACHE_DIR filled once before. CPU is user + system time of the process, which "
           f"the machine's other load inflates less than wall time. Machine load while measured: {load_average()} "
           "(1-minute average).",
           "pytest bench/test_startup_bench.py -k test_command --benchmark-only -p no:xdist")
