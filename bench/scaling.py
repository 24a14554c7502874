"""Scaling curves: what the operator kernels, the rewards and fact building cost per step as the batch, the rubric and
its sets grow, beside the memory floor, and the peak memory each phase takes per step.

    python bench/scaling.py [--sizes 1e4,1e5,1e6,1e7] [--at 1e6] [--memory-sizes 1e5,1e6,1e7] [--rounds 5]
                            [--large-rounds 3] [--plots bench] [--record]

Each timed curve runs beside its floor (bench/floors.py `read_write_floor`: every input array read once and every
output written once into fresh memory, on as many threads), timed by bench/sides.py: interleaved rounds, medians with
their range, paired ratios (--large-rounds rounds from 10^7 steps, to keep the run short).

- Steps (--sizes): the household kernel of bench/test_kernels_bench.py (15 operators over its random facts), C and
  Numba on 1 and 2 threads, and `evaluate_rewards` on bench/test_rewards_bench.py's batches on 1 and 2 threads.
  Plain Python runs up to 10^5 steps only: its cost per step is flat, and 10^6 steps take ~20 s a run.
- Operators: programs of 5, 15, 30 and 60 operators at --at steps, C and Numba on 1 thread: household's first five,
  household, and household with one or three variants of each of its operators as another task would write them (the
  verbs moved along the verb enum, the bindings replaced by other entities, an operator with neither narrowed to one
  verb), so that no operator repeats another and the distinct steps the kernel computes grow with the count. Each
  program's cold compile time (an empty cache, this process, Numba's start already paid) is beside it.
- Set sizes: the household kernel, C on 1 thread, at --at steps with visible sets of 2-6 elements drawn (as the
  kernels bench), then 8-16 and 32-64; duplicates are dropped, as a state lists an object once, so with 40 entity
  names the largest sets hold ~28.
- Memory: the peak resident memory per step of building facts from in-memory episodes (the trainer's path:
  examples/household.rubric's plan over bench/household_data.py's episodes, as bench/test_trajectories_bench.py builds
  them), of scoring (the household C kernel, 1 thread) and of rewards (1 thread), at --memory-sizes steps, each in a
  fresh process that first builds the phase's inputs and runs the phase once on a small batch. The peak is the
  kernel's high-water mark of the process's resident set (VmHWM), reset to the resident set of the moment
  (/proc/self/clear_refs) just before the phase, after a garbage collection and `malloc_trim`; `ru_maxrss` reports the
  same mark but also keeps the peak a process inherits at exec from its parent, which nothing resets. A phase's memory
  floor is its outputs: its inputs are resident before it starts. Fact building stops at 10^6 steps: its inputs,
  Python episodes of ~780 B a step, would take ~8 GB at 10^7.

Writes bench/scaling-{steps,operators,sets,memory}.png (into --plots) and, with --record, bench/RESULTS.md section
"scaling".
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import gc
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from tracec.compiler import c_backend, interp, numba_backend
from tracec.compiler.c_backend import CKernel
from tracec.compiler.cache import KernelCache
from tracec.compiler.codegen import schedule
from tracec.compiler.ir import ColumnSpec, KernelProgram, Node, entity_id
from tracec.compiler.kernel_abi import marshal
from tracec.compiler.load import load_rubric
from tracec.compiler.numba_backend import NumbaKernel
from tracec.dsl.types import BOOL, ENTITY, SET
from tracec.runtime.facts.fact_batch import build_fact_batch
from tracec.runtime.facts.trajectories.jsonl import gc_paused
from tracec.runtime.rewards.trca import RewardConfig, StepRewards, evaluate_rewards, operator_weights

from bench.floors import Output, read_write_floor
from bench.household_data import household_episodes
from bench.results import markdown_table, record
from bench.sides import ROUNDS, Rounds, Spread, describe, interleaved, load_average, threads_text
from bench.test_kernels_bench import NAMES, SETS, VERB, household, make_facts, omp_threads, python_scores, to_steps
from bench.test_rewards_bench import CATEGORIES, fixed_backend, make_batch, python_rewards
from bench.test_trajectories_bench import RUBRIC, _episodes

COMMAND = "python bench/scaling.py --record"
THREAD_COUNTS = (1, 2)  # the 1-2 threads (this machine has 2 cores)
LARGE = 10**7  # from here a size runs --large-rounds rounds
PYTHON_LIMIT = 10**5  # plain Python's largest size
FACTS_LIMIT = 10**6  # fact building's largest size (its Python episodes would not fit beyond)
OPERATOR_COUNTS = (5, 15, 30, 60)
VARIANTS = 3  # of each household operator, for the largest program
VISIBLE = ((2, 6), (8, 16), (32, 64))  # elements drawn per visible set, before duplicates are dropped
CHECKED = 300  # steps of every kernel checked against the reference interpreter
PHASES = ("facts", "scoring", "rewards")
PHASE_NAMES = {"facts": "fact building (episodes -> FactBatch, household plan)", "scoring": "scoring (household, C)",
               "rewards": "rewards (tracec)"}
Side = tuple[Callable[[], Any], int]  # a run, and how many runs a round


# --- larger programs ---------------------------------------------------------------------------------------------


def variant(operator: Node, k: int) -> Node:
    """`operator` as the k-th other task writes it: each verb k places further along the verb enum, the bindings the
    k-th other target and destination entities; an operator with neither holds only when the verb is the k-th."""
    changed = _substituted(operator, k)
    if changed != operator:
        return changed
    verb = Node("eq", (Node("load", (), VERB, "act.verb"), Node("const", (), VERB, k)), BOOL)
    return Node("and", (operator, verb), BOOL)


def _substituted(node: Node, k: int) -> Node:
    if node.op == "const" and node.type == VERB:
        return dataclasses.replace(node, value=(node.value + k) % len(VERB.members))
    if node.op == "load" and node.value in ("bind.target", "bind.dest"):
        names = NAMES[10:28] if node.value == "bind.target" else NAMES[28:]  # objects, receptacles
        return Node("const", (), ENTITY, entity_id(names[k]))
    return dataclasses.replace(node, args=tuple(_substituted(arg, k) for arg in node.args))


def operator_programs() -> dict[int, KernelProgram]:
    """{operators: program}: household's first five, household, and household with 1 or 3 variants of each operator;
    each reads only the columns its operators and household's context read."""
    base = household()
    operators = base.operators + tuple(variant(op, k) for k in range(1, VARIANTS + 1) for op in base.operators)
    return {count: KernelProgram(operators[:count], base.context, columns_read((*operators[:count], *base.context)))
            for count in OPERATOR_COUNTS}


def columns_read(nodes: Sequence[Node]) -> tuple[ColumnSpec, ...]:
    found: dict[str, ColumnSpec] = {}
    pending = list(nodes)
    while pending:
        node = pending.pop()
        if node.op in ("load", "load_set"):
            found[node.value] = ColumnSpec(node.value, SET if node.op == "load_set" else node.type)
        pending.extend(node.args)
    return tuple(sorted(found.values(), key=lambda spec: spec.name))


# --- kernels and floors ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Compiled:
    """A program's C and Numba kernels and their cold compile seconds."""

    c: CKernel
    numba: NumbaKernel
    seconds: dict[str, float]

    def side(self, backend: str, facts: Mapping[str, Any], n: int, threads: int) -> Callable[[], Any]:
        """A call of the kernel on `threads` threads: OpenMP's for C (set before each call, since the ABI has no
        thread argument), the kernel's own thread pool for Numba."""
        if backend == "c":
            set_threads = omp_threads(self.c)

            def run_c() -> Any:
                set_threads(threads)
                return self.c.run(facts, n)
            return run_c
        kernel = dataclasses.replace(self.numba, threads=threads)
        return lambda: kernel.run(facts, n)


def compile_both(program: KernelProgram, cache: KernelCache) -> Compiled:
    start = time.perf_counter()
    c = c_backend.compile_c(program, cache)
    middle = time.perf_counter()
    numba = numba_backend.compile_numba(program, cache)
    return Compiled(c, numba, {"c": middle - start, "numba": time.perf_counter() - middle})


def floor_side(arrays: Sequence[np.ndarray], n: int, outputs: Sequence[Output], threads: int) -> Callable[[], None]:
    return lambda: read_write_floor(arrays, n, outputs, threads)


def repeats(n: int) -> int:
    """Runs a round of a fast side: about 3 * 10^6 steps' worth, 1 to 30 of them."""
    return max(1, min(30, 3 * 10**6 // n))


def checked_rounds(sides: Mapping[str, Side], expected: Mapping[str, np.ndarray], rounds: int) -> Rounds:
    """Every side runs once first (which warms it), those in `expected` checked to compute their O; then the
    rounds."""
    for name, (run, _) in sides.items():
        got = run()
        if name in expected:
            np.testing.assert_array_equal(np.asarray(got[0], dtype=np.uint8), expected[name])
    return interleaved(None, sides, rounds, warm=False)


def kernel_curve(n: int, compiled: Compiled, rounds: int) -> Rounds:
    program = household()
    facts = make_facts(n, seed=n)
    expected = compiled.c.run(facts, n)[0]
    checked = min(n, CHECKED)
    np.testing.assert_array_equal(interp.run(program, facts, checked)[0], expected[:checked])
    arrays = marshal(program.columns, facts, n)
    outputs = [((len(program.operators),), np.uint8), ((), np.int64)]  # O and the context keys
    sides: dict[str, Side] = {}
    for threads in THREAD_COUNTS:
        sides.update({f"c/{threads}": (compiled.side("c", facts, n, threads), repeats(n)),
                      f"numba/{threads}": (compiled.side("numba", facts, n, threads), repeats(n)),
                      f"floor/{threads}": (floor_side(arrays, n, outputs, threads), repeats(n))})
    if n <= PYTHON_LIMIT:
        steps = to_steps(facts, n)
        sides["python"] = (lambda: python_scores(steps), 1)
    return checked_rounds(sides, {name: expected for name in sides if not name.startswith("floor")}, rounds)


def rewards_side(batch: Sequence[np.ndarray], threads: int) -> Callable[[], StepRewards]:
    """`evaluate_rewards` over a bench/test_rewards_bench.py batch, as that bench calls it (15 operators weighted by
    the default config, int64 context keys, a new output block)."""
    config = RewardConfig()
    fire, coverage = operator_weights(CATEGORIES, config)
    O, offsets, env_reward, task_group, context_key = batch
    return lambda: evaluate_rewards(O, offsets, env_reward, task_group, context_key, fire, coverage, config,
                                    threads=threads)


def python_side(batch: Sequence[np.ndarray]) -> Callable[[], tuple]:
    config = RewardConfig()
    fire, coverage = operator_weights(CATEGORIES, config)
    O, offsets, env_reward, task_group, context_key = (array.tolist() for array in batch)
    return lambda: python_rewards(O, offsets, env_reward, task_group, context_key, fire.tolist(), coverage.tolist(),
                                  config)


def reward_curve(n: int, rounds: int) -> Rounds:
    batch = make_batch(n)
    sides: dict[str, Side] = {}
    for threads in THREAD_COUNTS:
        sides.update({f"tracec/{threads}": (rewards_side(batch, threads), repeats(n)),
                      f"floor/{threads}": (floor_side(batch, n, [((7,), np.float64)], threads), repeats(n))})
    if n <= PYTHON_LIMIT:
        sides["python"] = (python_side(batch), 1)
    expected = rewards_side(batch, 1)().A
    for name, (run, _) in sides.items():  # every side runs once (which warms it), A checked, then the rounds
        got = run()
        if name == "python":
            np.testing.assert_allclose(got[-1], expected, atol=1e-9)
        elif name.startswith("tracec"):
            np.testing.assert_array_equal(got.A, expected)
    return interleaved(None, sides, rounds, warm=False)


@dataclass(frozen=True)
class Program:
    """What an operators-curve program asks of the kernel and of memory."""

    steps: int  # distinct steps of its schedule, after common subexpressions are shared
    columns: int
    floor_bytes: int  # the column arrays it reads
    compile_seconds: dict[str, float]


def operator_curve(n: int, cache: KernelCache, rounds: int) -> tuple[Rounds, dict[int, Program]]:
    facts = make_facts(n, seed=n)
    sides: dict[str, Side] = {}
    programs: dict[int, Program] = {}
    expected: dict[str, np.ndarray] = {}
    for count, program in operator_programs().items():
        compiled = compile_both(program, cache)
        fired = compiled.c.run(facts, n)[0]
        np.testing.assert_array_equal(interp.run(program, facts, CHECKED)[0], fired[:CHECKED])
        arrays = marshal(program.columns, facts, n)
        outputs = [((count,), np.uint8), ((), np.int64)]
        sides.update({f"c/{count}": (compiled.side("c", facts, n, 1), repeats(n)),
                      f"numba/{count}": (compiled.side("numba", facts, n, 1), repeats(n)),
                      f"floor/{count}": (floor_side(arrays, n, outputs, 1), repeats(n))})
        expected.update({f"c/{count}": fired, f"numba/{count}": fired})
        programs[count] = Program(len(schedule(program).steps), len(program.columns),
                                  sum(array.nbytes for array in arrays), compiled.seconds)
    return checked_rounds(sides, expected, rounds), programs


@dataclass(frozen=True)
class SetCase:
    drawn: tuple[int, int]  # elements drawn per visible set
    mean: float  # elements per visible set, duplicates dropped
    floor_bytes: int


def set_curve(n: int, compiled: Compiled, rounds: int) -> tuple[Rounds, list[SetCase]]:
    program = household()
    sides: dict[str, Side] = {}
    cases: list[SetCase] = []
    expected: dict[str, np.ndarray] = {}
    for i, drawn in enumerate(VISIBLE):
        facts = make_facts(n, seed=n, sets={**SETS, "prev.visible": drawn, "next.visible": drawn})
        fired = compiled.c.run(facts, n)[0]
        np.testing.assert_array_equal(interp.run(program, facts, CHECKED)[0], fired[:CHECKED])
        arrays = marshal(program.columns, facts, n)
        outputs = [((len(program.operators),), np.uint8), ((), np.int64)]
        sides.update({f"c/{i}": (compiled.side("c", facts, n, 1), repeats(n)),
                      f"floor/{i}": (floor_side(arrays, n, outputs, 1), repeats(n))})
        expected[f"c/{i}"] = fired
        sizes = np.diff(facts["next.visible"].set_offsets)
        cases.append(SetCase(drawn, float(sizes.mean()), sum(array.nbytes for array in arrays)))
    return checked_rounds(sides, expected, rounds), cases


# --- memory, each phase in a fresh process -----------------------------------------------------------------------

Phase = tuple[Callable[[], list[np.ndarray]], int]  # the phase (returning its output arrays), its input bytes


def _status(field: str) -> int:
    """A /proc/self/status figure in bytes (VmRSS: resident now; VmHWM: the resident high-water mark)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _settle() -> None:
    """Free what is garbage and hand freed heap pages back, so that the phase's growth is its own."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _facts_phase(n: int, cache: Path) -> Phase:
    plan = load_rubric(RUBRIC.read_text(), str(RUBRIC)).plan
    build_fact_batch(_episodes(household_episodes(100, seed=1)), plan)  # one-time costs outside the phase
    _settle()
    empty = _status("VmRSS")
    with gc_paused():
        episodes = _episodes(household_episodes(n, seed=n))
    _settle()

    def run() -> list[np.ndarray]:
        batch = build_fact_batch(episodes, plan)  # as RubricScorer.fact_batch, the trainer's credit, calls it
        columns = [a for c in batch.columns.values() for a in (c.values, c.known, c.offsets) if a is not None]
        return [batch.episode_offsets, batch.task_group, batch.env_reward, batch.success, *columns]
    return run, _status("VmRSS") - empty  # the episodes' Python objects, as resident memory


def _scoring_phase(n: int, cache: Path) -> Phase:
    program = household()
    kernel = c_backend.compile_c(program, KernelCache(cache))  # the parent compiled it: loaded from the cache
    omp_threads(kernel)(1)
    kernel.run(make_facts(1000), 1000)  # one-time costs outside the phase
    facts = make_facts(n, seed=n)

    def run() -> list[np.ndarray]:
        fired, keys = kernel.run(facts, n)
        assert keys is not None
        return [fired, keys.hash]  # the keys' tuple is the input columns themselves
    return run, sum(array.nbytes for array in marshal(program.columns, facts, n))


def _rewards_phase(n: int, cache: Path) -> Phase:
    rewards_side(make_batch(1000), 1)()  # one-time costs outside the phase
    batch = make_batch(n)
    rewards = rewards_side(batch, 1)

    def run() -> list[np.ndarray]:
        result = rewards()
        return [getattr(result, field.name) for field in dataclasses.fields(result)]
    return run, sum(array.nbytes for array in batch)


PREPARE: dict[str, Callable[[int, Path], Phase]] = {
    "facts": _facts_phase, "scoring": _scoring_phase, "rewards": _rewards_phase}


def block_bytes(arrays: Sequence[np.ndarray]) -> int:
    """Bytes of the distinct memory blocks under `arrays` (the rows of one block count once)."""
    roots: dict[int, int] = {}
    for array in arrays:
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        roots[id(root)] = root.nbytes
    return sum(roots.values())


def measure_memory(phase: str, n: int, cache: Path) -> dict[str, float]:
    """In a fresh process: the phase's inputs built, then the phase run once with the high-water mark reset."""
    run, inputs = PREPARE[phase](n, cache)
    _settle()
    before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark, reset to the resident set now
    start = time.perf_counter()
    outputs = run()
    seconds = time.perf_counter() - start
    return {"before": before, "peak": _status("VmHWM"), "inputs": inputs, "outputs": block_bytes(outputs),
            "seconds": seconds}


def memory_curve(sizes: Sequence[int], cache: Path) -> dict[tuple[str, int], dict[str, float]]:
    found: dict[tuple[str, int], dict[str, float]] = {}
    for n in sizes:
        for phase in PHASES:
            if phase == "facts" and n > FACTS_LIMIT:
                continue
            done = subprocess.run([sys.executable, __file__, "--child", phase, str(n), str(cache)],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"memory of {phase} at {n} steps: {done.stderr[-2000:]}")
            found[phase, n] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


# --- the run -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Curves:
    kernels: dict[int, Rounds]  # steps -> sides "c/<threads>", "numba/<threads>", "floor/<threads>", "python"
    rewards: dict[int, Rounds]  # steps -> sides "tracec/<threads>", "floor/<threads>", "python"
    at: int  # steps of the operators and set-size curves
    operators: Rounds  # sides "c/<operators>", "numba/<operators>", "floor/<operators>"
    programs: dict[int, Program]
    sets: Rounds  # sides "c/<case>", "floor/<case>"
    set_cases: list[SetCase]
    memory: dict[tuple[str, int], dict[str, float]]
    rounds: int
    large_rounds: int
    backend: str  # what evaluate_rewards's kernels ran on


def measure(sizes: Sequence[int], at: int, memory_sizes: Sequence[int], rounds: int, large_rounds: int,
            folder: Path) -> Curves:
    def log(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    cache = KernelCache(folder / "kernels")
    household_kernels = compile_both(household(), cache)  # also pays Numba's start before any compile is timed
    kernels: dict[int, Rounds] = {}
    rewards: dict[int, Rounds] = {}
    for n in sizes:
        log(f"steps {n:.0e}")
        kernels[n] = kernel_curve(n, household_kernels, large_rounds if n >= LARGE else rounds)
        rewards[n] = reward_curve(n, large_rounds if n >= LARGE else rounds)
    log(f"operators at {at:.0e}")
    operators, programs = operator_curve(at, KernelCache(folder / "operators"), rounds)
    log(f"set sizes at {at:.0e}")
    sets, set_cases = set_curve(at, household_kernels, rounds)
    log("memory")
    memory = memory_curve(memory_sizes, cache.path)
    return Curves(kernels, rewards, at, operators, programs, sets, set_cases, memory, rounds, large_rounds,
                  fixed_backend())


def _sizes(text: str) -> list[int]:
    return [int(float(part)) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e4,1e5,1e6,1e7", help="steps of the steps curve")
    parser.add_argument("--at", default="1e6", help="steps of the operators and set-size curves")
    parser.add_argument("--memory-sizes", default="1e5,1e6,1e7", help="steps of the memory curve")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--large-rounds", type=int, default=3, help=f"rounds from {LARGE:.0e} steps")
    parser.add_argument("--plots", type=Path, default=Path(__file__).resolve().parent, help="folder of the PNGs")
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md's section")
    parser.add_argument("--child", nargs=3, metavar=("PHASE", "STEPS", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        phase, steps, cache = args.child
        print(json.dumps(measure_memory(phase, int(steps), Path(cache))))
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tracec-scaling-") as folder:
        curves = measure(_sizes(args.sizes), int(float(args.at)), _sizes(args.memory_sizes), args.rounds,
                         args.large_rounds, Path(folder))
    plot(curves, args.plots)
    report = _report(curves, time.perf_counter() - started)
    print(report)
    if args.record:
        record("scaling", report, COMMAND)


# --- the report --------------------------------------------------------------------------------------------------


def _per_step(rounds: Rounds, side: str, n: int) -> Spread:
    """ns a step (numerically ms per 10^6 steps)."""
    return rounds.time(side).scaled(1e9 / n)


def _ratio(rounds: Rounds, top: str, bottom: str) -> str:
    if top not in rounds.seconds or bottom not in rounds.seconds:
        return "-"
    return rounds.ratio(top, bottom).cell(suffix="x")


def _time_table(curve: dict[int, Rounds], names: dict[str, tuple[str, int]]) -> str:
    rows = [[name, str(threads), *(_per_step(curve[n], side, n).cell() if side in curve[n].seconds else "-"
                                   for n in curve)]
            for side, (name, threads) in names.items() if any(side in rounds.seconds for rounds in curve.values())]
    return markdown_table(["side", "threads", *(f"{n:.0e} ns a step" for n in curve)], rows)


def _ratio_table(curve: dict[int, Rounds], comparisons: list[tuple[str, str, str]]) -> str:
    rows = [[name, *(_ratio(curve[n], top, bottom) for n in curve)] for name, top, bottom in comparisons]
    return markdown_table(["ratio (> 1x: the second side is faster)", *(f"{n:.0e}" for n in curve)], rows)


def _trend(curve: dict[int, Rounds], side: str, floor: str, what: str) -> str:
    """How `side`'s ns a step and its ratio to `floor` move from the smallest size to the largest, and where it is
    furthest from the floor when that is in between."""
    first, last = min(curve), max(curve)
    a, b = _per_step(curve[first], side, first).median, _per_step(curve[last], side, last).median
    ratios = {n: curve[n].ratio(side, floor).median for n in curve}
    worst = max(ratios, key=lambda n: ratios[n])
    between = f" (furthest at {worst:.0e}: {ratios[worst]:.2f}x)" if worst not in (first, last) else ""
    return f"{what} {a:.3g} -> {b:.3g} ns, {ratios[first]:.2f}x -> {ratios[last]:.2f}x the floor{between}"


def _steps_section(curves: Curves) -> list[str]:
    kernels, rewards, reward_name = curves.kernels, curves.rewards, f"tracec ({curves.backend})"
    floor_name = "memory floor: inputs read once, outputs written"
    kernel_names = {"python": ("plain Python, a dict per step", 1),
                    **{f"{side}/{t}": (name, t) for side, name in (("c", "C"), ("numba", "Numba"),
                                                                   ("floor", floor_name)) for t in THREAD_COUNTS}}
    reward_names = {"python": ("plain Python", 1),
                    **{f"{side}/{t}": (name, t) for side, name in (("tracec", reward_name), ("floor", floor_name))
                       for t in THREAD_COUNTS}}
    kernel_ratios = [*((f"{name} / floor, {threads_text(t)} each", f"{side}/{t}", f"floor/{t}")
                       for side, name in (("c", "C"), ("numba", "Numba")) for t in THREAD_COUNTS),
                     *((f"{name}: 1 thread / 2 threads (speed-up)", f"{side}/1", f"{side}/2")
                       for side, name in (("c", "C"), ("numba", "Numba"), ("floor", "memory floor"))),
                     ("plain Python / C, 1 thread each", "python", "c/1")]
    reward_ratios = [*((f"{reward_name} / floor, {threads_text(t)} each", f"tracec/{t}", f"floor/{t}")
                       for t in THREAD_COUNTS),
                     *((f"{name}: 1 thread / 2 threads (speed-up)", f"{side}/1", f"{side}/2")
                       for side, name in (("tracec", reward_name), ("floor", "memory floor"))),
                     (f"plain Python / {reward_name}, 1 thread each", "python", "tracec/1")]
    large = [f"{n:.0e}" for n in kernels if n >= LARGE]
    note = (describe(curves.rounds, "in-process", "as the threads column says")
            + (f" At {', '.join(large)} steps: {curves.large_rounds} rounds, to keep the run short." if large else "")
            + " Each round runs plain Python once and every other side about 3*10^6 steps' worth of times (1 to 30; "
            "a round's figure: their median); every side is checked against the C kernel's O (the rewards against "
            "one call's A) first, which also warms it, and every kernel against the reference interpreter on its "
            f"first {CHECKED} steps. Plain Python is not run past {PYTHON_LIMIT:.0e} steps: its cost per step is flat "
            "(bench 'kernels': ~19 s a run at 10^6) and the curve is about the kernels. ns a step is numerically ms "
            "per 10^6 steps. The household kernel and the rewards are those of the 'kernels' and 'rewards' sections "
            "(15 operators; the rewards with int64 context keys and a new output block each call).")
    first, last = min(kernels), max(kernels)
    floors = [f"on {threads_text(t)} {_per_step(curve[first], f'floor/{t}', first).median:.3g} -> "
              f"{_per_step(curve[last], f'floor/{t}', last).median:.3g} ns"
              for curve in (kernels, rewards) for t in THREAD_COUNTS]
    trends = [_trend(kernels, f"{side}/{t}", f"floor/{t}", f"{name}, {threads_text(t)}:")
              for side, name in (("c", "C"), ("numba", "Numba")) for t in THREAD_COUNTS]
    trends += [_trend(rewards, f"tracec/{t}", f"floor/{t}", f"{reward_name}, {threads_text(t)}:")
               for t in THREAD_COUNTS]
    summary = (f"From {first:.0e} to {last:.0e} steps, a step's cost and its ratio to the floor at the same threads: "
               + "; ".join(trends) + f". The floors themselves: the kernel's {floors[0]}, {floors[1]}; the rewards' "
               f"{floors[2]}, {floors[3]}.")
    return ["Steps: the household operator kernel (15 operators), ns a step:", _time_table(kernels, kernel_names),
            _ratio_table(kernels, kernel_ratios),
            "Steps: the rewards (`evaluate_rewards`, 15 operators), ns a step:", _time_table(rewards, reward_names),
            _ratio_table(rewards, reward_ratios), note, summary]


def _operators_section(curves: Curves) -> list[str]:
    at, rounds = curves.at, curves.operators
    rows = []
    for count, program in curves.programs.items():
        rows.append([str(count), str(program.steps), str(program.columns), f"{program.floor_bytes / 1e6:.0f}",
                     *(_per_step(rounds, f"{side}/{count}", at).cell() for side in ("c", "numba", "floor")),
                     _ratio(rounds, f"c/{count}", f"floor/{count}"), _ratio(rounds, f"numba/{count}", f"floor/{count}"),
                     f"{program.compile_seconds['c']:.2f}", f"{program.compile_seconds['numba']:.2f}"])
    table = markdown_table(["operators", "distinct steps", "columns read", "floor reads MB", "C ns a step",
                            "Numba ns a step", "floor ns a step", "C / floor", "Numba / floor", "C compile s",
                            "Numba compile s"], rows)
    low, high = min(curves.programs), max(curves.programs)

    def growth(side: str) -> float:
        return rounds.time(f"{side}/{high}").median / rounds.time(f"{side}/{low}").median

    per_step = {count: _per_step(rounds, f"c/{count}", at).median / program.steps
                for count, program in curves.programs.items()}
    note = (describe(len(rounds), "in-process", "1 each") + f" At {at:.0e} steps, all programs' sides in one set of "
            "rounds. Distinct steps: the schedule's (`compiler/codegen.py` `schedule`), after shared subexpressions "
            "are computed once; the floor reads the column arrays each program reads and writes its O and context "
            "keys. Compile s: one cold compile each (an empty cache, in this process, after Numba's start), not "
            f"rounds. From {low} to {high} operators C's time per step grows {growth('c'):.2f}x, Numba's "
            f"{growth('numba'):.2f}x and the floor's {growth('floor'):.2f}x; C costs "
            + ", ".join(f"{value:.2f}" for value in per_step.values())
            + " ns a step per distinct step at " + ", ".join(map(str, per_step)) + " operators.")
    return [f"Operators: programs of {', '.join(map(str, curves.programs))} operators at {at:.0e} steps, 1 thread:",
            table, note]


def _sets_section(curves: Curves) -> list[str]:
    at, rounds, cases = curves.at, curves.sets, curves.set_cases
    rows = [[f"{case.drawn[0]}-{case.drawn[1]}", f"{case.mean:.1f}", f"{case.floor_bytes / 1e6:.0f}",
             _per_step(rounds, f"c/{i}", at).cell(), _per_step(rounds, f"floor/{i}", at).cell(),
             _ratio(rounds, f"c/{i}", f"floor/{i}")] for i, case in enumerate(cases)]
    table = markdown_table(["visible elements drawn", "visible elements kept", "floor reads MB", "C ns a step",
                            "floor ns a step", "C / floor"], rows)
    last = len(cases) - 1
    note = (describe(len(rounds), "in-process", "1 each") + f" The household kernel at {at:.0e} steps; only the "
            "visible sets (prev and next, which four of its memberships scan) grow, the other sets as in the kernels "
            "bench. Duplicates are dropped from the elements drawn (a set holds an entity once) and the facts draw "
            "from 40 entity names, so sets do not grow past ~40 and larger draws were not run. From "
            f"{cases[0].mean:.1f} to {cases[last].mean:.1f} elements C's time per step grows "
            f"{rounds.time(f'c/{last}').median / rounds.time('c/0').median:.2f}x and the floor's "
            f"{rounds.time(f'floor/{last}').median / rounds.time('floor/0').median:.2f}x.")
    return [f"Set sizes: the household kernel, C, 1 thread, at {at:.0e} steps:", table, note]


def _memory_section(curves: Curves) -> list[str]:
    rows = []
    for (phase, n), figures in curves.memory.items():
        peak = figures["peak"] - figures["before"]
        rows.append([PHASE_NAMES[phase], f"{n:.0e}", f"{figures['inputs'] / n:.0f}", f"{figures['outputs'] / n:.0f}",
                     f"{peak / n:.0f}", f"{peak / figures['outputs']:.2f}x", f"{figures['before'] / 1e6:.0f}",
                     f"{figures['seconds']:.3g}"])
    table = markdown_table(["phase", "steps", "inputs B a step", "outputs B a step (the floor)",
                            "peak above the start B a step", "peak / outputs", "resident at the start MB",
                            "phase s"], rows)
    skipped = sorted({n for _, n in curves.memory} - {n for phase, n in curves.memory if phase == "facts"})
    note = ("One fresh process per row (resident memory does not drift with the machine's load as time does, so one "
            "run each): the phase's inputs built, the phase run once on a small batch (its one-time loads and "
            "compiles outside the figure), a garbage collection and `malloc_trim`, the resident high-water mark reset "
            "(/proc/self/clear_refs), the phase run, then the mark (VmHWM) less the resident set just before. "
            "`ru_maxrss` is not used: a process started by a larger one inherits its parent's peak into it at exec, "
            "and clear_refs does not reset that part. Inputs: for fact building the episodes' Python objects "
            "(the resident growth while they were built), else the input arrays; outputs: the arrays the phase "
            "returns (the FactBatch's columns and per-episode arrays; O and the context hashes, the context tuple "
            "being the input columns; the seven reward rows of one block), the least memory the phase can end with. "
            "Scoring is the C kernel, rewards `evaluate_rewards`, each on 1 thread."
            + (f" Fact building was not run at {', '.join(f'{n:.0e}' for n in skipped)} steps: its inputs, Python "
               "episodes, take ~780 B a step (~8 GB at 10^7)." if skipped else ""))
    return ["Memory: peak resident memory per step of each phase, beside its inputs and outputs:", table, note]


def _report(curves: Curves, seconds: float) -> str:
    opening = (f"Plots: bench/scaling-steps.png, scaling-operators.png, scaling-sets.png, scaling-memory.png. The "
               f"whole run took {seconds / 60:.1f} min on this machine (its read bandwidth is in the header); load "
               f"average (1 min) at the end: {load_average()}.")
    return "\n\n".join([opening, *_steps_section(curves), *_operators_section(curves), *_sets_section(curves),
                        *_memory_section(curves)])


# --- the plots ---------------------------------------------------------------------------------------------------

COLORS = {"c": "tab:blue", "numba": "tab:orange", "tracec": "tab:green", "python": "tab:red", "floor": "black"}


def _line(ax: Any, side: str, xs: Sequence[float], spreads: Sequence[Spread], label: str, threads: int = 1) -> None:
    """One side's medians with their ranges as error bars: the floor dashed, 2 threads dotted."""
    medians = np.array([s.median for s in spreads])
    errors = [medians - np.array([s.low for s in spreads]), np.array([s.high for s in spreads]) - medians]
    style = "--" if side == "floor" else ":" if threads > 1 else "-"
    ax.errorbar(xs, medians, yerr=errors, label=label, marker="o", markersize=4, capsize=3, linestyle=style,
                color=COLORS[side], alpha=0.55 if side == "floor" and threads > 1 else 1.0)


def _finish(ax: Any, title: str, xlabel: str, ylabel: str) -> None:
    ax.set(xscale="log", yscale="log", title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def plot(curves: Curves, folder: Path) -> None:
    import matplotlib  # here: only the plots need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(15, 4.8))
    for ax, curve, sides, title in (
            (axes[0], curves.kernels, {"c": "C", "numba": "Numba"}, "household kernel, 15 operators"),
            (axes[1], curves.rewards, {"tracec": f"tracec ({curves.backend})"}, "rewards (evaluate_rewards)")):
        for side, name in {**sides, "floor": "memory floor"}.items():
            for t in THREAD_COUNTS:
                _line(ax, side, list(curve), [_per_step(curve[n], f"{side}/{t}", n) for n in curve],
                      f"{name}, {threads_text(t)}", t)
        python = [n for n in curve if "python" in curve[n].seconds]
        if python:
            _line(ax, "python", python, [_per_step(curve[n], "python", n) for n in python], "plain Python, 1 thread")
        _finish(ax, title, "steps", "ns a step (= ms per 10^6 steps)")
    figure.tight_layout()
    figure.savefig(folder / "scaling-steps.png", dpi=110)

    figure, ax = plt.subplots(figsize=(8, 4.5))
    counts = list(curves.programs)
    for side, name in (("c", "C"), ("numba", "Numba"), ("floor", "memory floor")):
        _line(ax, side, counts, [_per_step(curves.operators, f"{side}/{c}", curves.at) for c in counts],
              f"{name}, 1 thread")
    _finish(ax, f"operators, {curves.at:.0e} steps", "operators", "ns a step")
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.tick_params(axis="x", which="minor", labelbottom=False)  # the counts alone, not the log scale's 6x10^0
    figure.tight_layout()
    figure.savefig(folder / "scaling-operators.png", dpi=110)

    figure, ax = plt.subplots(figsize=(8, 4.5))
    means = [case.mean for case in curves.set_cases]
    for side, name in (("c", "C"), ("floor", "memory floor")):
        _line(ax, side, means, [_per_step(curves.sets, f"{side}/{i}", curves.at) for i in range(len(means))],
              f"{name}, 1 thread")
    _finish(ax, f"visible set sizes, household kernel, {curves.at:.0e} steps", "elements per visible set (mean)",
            "ns a step")
    figure.tight_layout()
    figure.savefig(folder / "scaling-sets.png", dpi=110)

    figure, ax = plt.subplots(figsize=(10, 4.8))
    for phase, color in zip(PHASES, ("tab:blue", "tab:orange", "tab:green"), strict=True):
        sizes = [n for p, n in curves.memory if p == phase]
        figures = [curves.memory[phase, n] for n in sizes]
        per_step = {key: [f[key] / n for f, n in zip(figures, sizes, strict=True)] for key in ("inputs", "outputs")}
        peaks = [(f["peak"] - f["before"]) / n for f, n in zip(figures, sizes, strict=True)]
        ax.plot(sizes, peaks, "o-", color=color, label=f"{PHASE_NAMES[phase]}: peak above the start")
        ax.plot(sizes, per_step["outputs"], "s--", color=color, label="its outputs (the floor)")
        ax.plot(sizes, per_step["inputs"], ":", color=color, label="its inputs")
    _finish(ax, "peak resident memory of a phase, per step", "steps", "bytes a step")
    figure.tight_layout()
    figure.savefig(folder / "scaling-memory.png", dpi=110)
    plt.close("all")


if __name__ == "__main__":
    main()
