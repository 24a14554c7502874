"""Operator kernels side by side: plain Python per step, numpy masks, the interpreter, Numba, C, and a memory floor.

The program is a 15-operator household rubric built by hand in the IR (5 evidence, 5 execution, 5 invalidity over
location / holding / visible / opened, the verb enum, obj / recep entities, `parsed`, two lifted text bools, two
bindings; context prev.location, prev.holding), on random fact columns with ~10% missing. Every side computes O
and a context key (plain Python: the key tuple a user would build) and is checked against the C kernel's first.
The numpy side computes each distinct mask once and reuses it, as the kernel shares subexpressions. The floor
(bench/floors.py) reads every fact column the kernel reads once and writes O and the keys into fresh memory: what no
implementation can beat. Each kernel and the floor run 1 thread and all (os.cpu_count()); the plain Python and numpy
baselines run one and
compare with the 1-thread rows. Measured by bench/sides.py: interleaved rounds, medians, paired ratios.
Also: compile times in fresh processes (cold cache, warm cache, C artifact load) and the design alternatives
(Numba `cfunc` vs `njit` vs `prange` compile time; branch-free vs short-circuit evaluation).
Writes bench/RESULTS.md, section "kernels".

Environment overrides, for a quick trial (the figures in RESULTS.md come from the defaults):
KERNELS_SIZES (comma-separated transitions, e.g. `1000`; default 1e3,1e4,1e5,1e6; the branch comparison runs at
the largest), KERNELS_ROUNDS (rounds of the run and branch tables, default bench.sides.ROUNDS = 5) and
KERNELS_COMPILE_ROUNDS (new processes per compile figure, default 5).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import itertools
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numba
import numpy as np
import pytest
from tracec.compiler import c_backend, interp, numba_backend
from tracec.compiler.backends import compile_kernel
from tracec.compiler.c_backend import CKernel
from tracec.compiler.cache import KernelCache
from tracec.compiler.ir import (
    CONTEXT_PRIME,
    CONTEXT_SEED,
    MISSING_TAG,
    ColumnSpec,
    KernelProgram,
    Node,
    entity_id,
)
from tracec.compiler.kernel_abi import allocate, marshal
from tracec.compiler.threads import MIN_ITEMS_PER_PART
from tracec.dsl.types import BOOL, ENTITY, INT, SET, enum

from bench.floors import read_write_floor
from bench.results import markdown_table, record
from bench.sides import ROUNDS, Rounds, Spread, collected, describe, from_env, interleaved, load_average, threads_text

COMMAND = "pytest bench/test_kernels_bench.py --benchmark-only -p no:xdist"
VERB = enum("go", "take", "put", "open", "close", "toggle", "clean", "heat", "cool", "use", "examine", "look",
            "inventory")
SCALARS = {"prev.location": ENTITY, "next.location": ENTITY, "act.verb": VERB, "act.obj": ENTITY,
           "act.recep": ENTITY, "act.parsed": BOOL, "lift.0": BOOL, "lift.1": BOOL, "bind.target": ENTITY,
           "bind.dest": ENTITY}
SETS = {"prev.holding": (0, 2), "next.holding": (0, 2), "prev.visible": (2, 6), "next.visible": (2, 6),
        "prev.opened": (0, 3), "next.opened": (0, 3)}  # sizes per transition
NAMES = ["kitchen", "livingroom", "bathroom", "bedroom", "garage", "garden", "cellar", "attic", "hall", "office", "mug",
         "cup", "apple", "knife", "plate", "bowl", "pan", "pot", "spoon", "fork", "sponge", "towel", "soap", "book",
         "pen", "lamp", "key", "box", "cabinet", "drawer", "fridge", "microwave", "sinkbasin", "countertop", "shelf",
         "desk", "bed", "sofa", "toilet", "safe"]


# --- the program -------------------------------------------------------------------------------------------------


def _load(name: str) -> Node:
    return Node("load", (), SCALARS[name], name)


def _set(name: str) -> Node:
    return Node("load_set", (), SET, name)


def _op(op: str, *args: Node, type_: object = BOOL) -> Node:
    return Node(op, args, type_)  # type: ignore[arg-type]


def _verb(name: str) -> Node:
    return _op("eq", _load("act.verb"), Node("const", (), VERB, VERB.members.index(name)))


def _has(entity: str, set_name: str) -> Node:
    return _op("has", _load(entity), _set(set_name))


def _all(*terms: Node) -> Node:
    out = terms[0]
    for term in terms[1:]:
        out = _op("and", out, term)
    return out


def household(context: bool = True) -> KernelProgram:
    moved = _op("ne", _load("next.location"), _load("prev.location"))  # changed(location)
    target_gone = _op("not", _has("bind.target", "next.holding"))
    operators = (
        _all(_has("bind.target", "next.visible"), _op("not", _has("bind.target", "prev.visible"))),
        _all(moved, _has("bind.dest", "next.visible")),
        _all(_has("bind.dest", "next.visible"), _op("not", _has("bind.dest", "prev.visible"))),
        _all(moved, _has("bind.target", "next.visible")),
        _op("gt", _op("count", _set("next.opened"), type_=INT), _op("count", _set("prev.opened"), type_=INT)),
        _all(_verb("take"), _op("eq", _load("act.obj"), _load("bind.target")), _has("bind.target", "next.holding")),
        _all(_verb("put"), _op("eq", _load("act.recep"), _load("bind.dest")), target_gone),
        _all(_verb("open"), _op("eq", _load("act.obj"), _load("bind.dest")), _has("bind.dest", "next.opened")),
        _all(_has("bind.target", "next.holding"), _has("bind.dest", "next.visible")),
        _all(_verb("examine"), _op("eq", _load("act.obj"), _load("bind.target"))),
        _op("not", _load("act.parsed")),
        _load("lift.0"),
        _all(_verb("look"), _op("not", moved)),
        _all(_load("lift.1"), _op("not", _op("ne", _set("next.holding"), _set("prev.holding")))),
        _all(_verb("open"), _has("act.obj", "prev.opened")),
    )
    columns = tuple(sorted([ColumnSpec(k, v) for k, v in SCALARS.items()] + [ColumnSpec(s, SET) for s in SETS],
                           key=lambda c: c.name))
    return KernelProgram(operators, (_load("prev.location"), _set("prev.holding")) if context else (), columns)


# --- facts -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Col:
    values: np.ndarray
    known: np.ndarray
    offsets: np.ndarray | None = None  # a set column's: transition t holds values[offsets[t]:offsets[t + 1]]

    @property
    def set_offsets(self) -> np.ndarray:
        assert self.offsets is not None, "a scalar column has no offsets"
        return self.offsets


def make_facts(n: int, seed: int = 0, sets: Mapping[str, tuple[int, int]] = SETS) -> dict[str, Col]:
    """Random columns of `n` transitions, ~10% missing; each set column's sizes drawn from its (low, high) in
    `sets`, before duplicates (of the 40 NAMES) are dropped."""
    rng = np.random.default_rng(seed)
    pool = np.array(sorted(entity_id(name) for name in NAMES), dtype=np.int64)
    known = lambda: (rng.random(n) > 0.1).astype(np.uint8)
    facts = {}
    for name, type_ in SCALARS.items():
        values: np.ndarray
        if type_ == BOOL:
            values = rng.integers(0, 2, n).astype(np.uint8)
        elif type_ == VERB:
            values = rng.integers(0, len(VERB.members), n)
        else:
            values = rng.choice(pool[:12] if name.startswith("bind") else pool, n)
        facts[name] = Col(values, known())
    for name, (low, high) in sets.items():
        drawn = rng.integers(low, high + 1, n)
        rows = np.repeat(np.arange(n), drawn)
        values = rng.choice(pool, rows.size)
        order = np.lexsort((values, rows))  # sorted within each transition, then duplicates dropped
        rows, values = rows[order], values[order]
        keep = np.ones(rows.size, bool)
        keep[1:] = (rows[1:] != rows[:-1]) | (values[1:] != values[:-1])
        sizes = np.bincount(rows[keep], minlength=n)
        facts[name] = Col(values[keep], known(), np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    return facts


# --- plain Python, one dict per step -----------------------------------------------------------------------------


def to_steps(facts: dict[str, Col], n: int) -> list[dict]:
    """What a hand-written scorer holds: one dict per step, None for a missing fact, lists for sets."""
    lists = {name: (c.values.tolist(), c.known.tolist(), None if c.offsets is None else c.offsets.tolist())
             for name, c in facts.items()}
    steps = []
    for t in range(n):
        step: dict[str, dict] = {"prev": {}, "next": {}, "act": {}, "lift": {}, "bind": {}}
        for name, (values, known, offsets) in lists.items():
            side, field = name.split(".")
            value = values[t] if offsets is None else values[offsets[t]:offsets[t + 1]]
            if name == "act.verb":
                value = VERB.members[value]
            elif SCALARS.get(name) == BOOL:
                value = bool(value)
            step[side][field] = value if known[t] else None
        steps.append(step)
    return steps


def _has3(x, s):
    return None if x is None or s is None else x in s


def _ne3(a, b):
    return None if a is None or b is None else a != b


def _eq3(a, b):
    return None if a is None or b is None else a == b


def _not3(x):
    return None if x is None else not x


def _and3(*xs):
    return False if any(x is False for x in xs) else (True if all(x is True for x in xs) else None)


def python_scores(steps: list[dict]) -> tuple[list[list[int]], list[tuple]]:
    fired, keys = [], []
    for s in steps:
        p, x, a, lift, b = s["prev"], s["next"], s["act"], s["lift"], s["bind"]
        target, dest, verb = b["target"], b["dest"], a["verb"]
        moved = _ne3(x["location"], p["location"])
        values = [
            _and3(_has3(target, x["visible"]), _not3(_has3(target, p["visible"]))),
            _and3(moved, _has3(dest, x["visible"])),
            _and3(_has3(dest, x["visible"]), _not3(_has3(dest, p["visible"]))),
            _and3(moved, _has3(target, x["visible"])),
            None if x["opened"] is None or p["opened"] is None else len(x["opened"]) > len(p["opened"]),
            _and3(_eq3(verb, "take"), _eq3(a["obj"], target), _has3(target, x["holding"])),
            _and3(_eq3(verb, "put"), _eq3(a["recep"], dest), _not3(_has3(target, x["holding"]))),
            _and3(_eq3(verb, "open"), _eq3(a["obj"], dest), _has3(dest, x["opened"])),
            _and3(_has3(target, x["holding"]), _has3(dest, x["visible"])),
            _and3(_eq3(verb, "examine"), _eq3(a["obj"], target)),
            _not3(a["parsed"]),
            lift["0"],
            _and3(_eq3(verb, "look"), _not3(moved)),
            _and3(lift["1"], _not3(_ne3(x["holding"], p["holding"]))),
            _and3(_eq3(verb, "open"), _has3(a["obj"], p["opened"])),
        ]
        fired.append([1 if v is True else 0 for v in values])
        keys.append((p["location"], None if p["holding"] is None else tuple(p["holding"])))
    return fired, keys


# --- numpy, value and known masks --------------------------------------------------------------------------------


def numpy_scores(f: dict[str, Col], n: int) -> tuple[np.ndarray, np.ndarray]:
    """As a careful numpy user writes it: each distinct mask (a membership, a verb test, an equality, a set's rows)
    computed once and reused wherever operators share it, as the kernel shares subexpressions."""
    known = {name: col.known.view(np.bool_) for name, col in f.items()}  # known flags are 0/1 bytes: a free view

    @functools.cache
    def rows(set_name: str) -> np.ndarray:
        return np.repeat(np.arange(n), np.diff(f[set_name].set_offsets))

    @functools.cache
    def has(entity: str, set_name: str) -> tuple[np.ndarray, np.ndarray]:
        x, col, r = f[entity].values, f[set_name], rows(set_name)
        hit = np.zeros(n, bool)
        hit[r[col.values == x[r]]] = True
        return hit, known[entity] & known[set_name]

    @functools.cache
    def eq(a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
        return f[a].values == f[b].values, known[a] & known[b]

    @functools.cache
    def verb(name: str) -> tuple[np.ndarray, np.ndarray]:
        return f["act.verb"].values == VERB.members.index(name), known["act.verb"]

    def flag(name: str) -> tuple[np.ndarray, np.ndarray]:
        return f[name].values != 0, known[name]

    def not_(a: tuple) -> tuple[np.ndarray, np.ndarray]:
        return ~a[0], a[1]

    def and_(*terms: tuple) -> tuple[np.ndarray, np.ndarray]:
        (v, k), *rest = terms
        for vb, kb in rest:
            v, k = v & vb, (k & kb) | (k & ~v) | (kb & ~vb)
        return v, k

    def same_set(a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
        ca, cb = f[a], f[b]
        la, lb = np.diff(ca.set_offsets), np.diff(cb.set_offsets)
        ra = rows(a)
        same = la == lb
        inside = np.flatnonzero(same[ra])
        position = inside - ca.set_offsets[ra[inside]]
        differs = ca.values[inside] != cb.values[cb.set_offsets[ra[inside]] + position]
        same[ra[inside][differs]] = False
        return same, known[a] & known[b]

    moved = (f["next.location"].values != f["prev.location"].values, known["next.location"] & known["prev.location"])
    opened = np.diff(f["next.opened"].set_offsets) > np.diff(f["prev.opened"].set_offsets)
    ops = [
        and_(has("bind.target", "next.visible"), not_(has("bind.target", "prev.visible"))),
        and_(moved, has("bind.dest", "next.visible")),
        and_(has("bind.dest", "next.visible"), not_(has("bind.dest", "prev.visible"))),
        and_(moved, has("bind.target", "next.visible")),
        (opened, known["next.opened"] & known["prev.opened"]),
        and_(verb("take"), eq("act.obj", "bind.target"), has("bind.target", "next.holding")),
        and_(verb("put"), eq("act.recep", "bind.dest"), not_(has("bind.target", "next.holding"))),
        and_(verb("open"), eq("act.obj", "bind.dest"), has("bind.dest", "next.opened")),
        and_(has("bind.target", "next.holding"), has("bind.dest", "next.visible")),
        and_(verb("examine"), eq("act.obj", "bind.target")),
        not_(flag("act.parsed")),
        flag("lift.0"),
        and_(verb("look"), not_(moved)),
        and_(flag("lift.1"), same_set("next.holding", "prev.holding")),
        and_(verb("open"), has("act.obj", "prev.opened")),
    ]
    fired = np.stack([v & k for v, k in ops], axis=1).view(np.uint8)  # bools are 0/1 bytes: a view, no copy
    return fired, numpy_context_keys(f, n)


def numpy_context_keys(f: dict[str, Col], n: int) -> np.ndarray:
    prime, missing = np.uint64(CONTEXT_PRIME), np.uint64(MISSING_TAG)
    h = np.full(n, CONTEXT_SEED, dtype=np.uint64)
    location = f["prev.location"]
    h = np.where(location.known != 0, (h ^ location.values.view(np.uint64)) * prime, (h ^ missing) * prime)
    holding = f["prev.holding"]
    starts, sizes = holding.set_offsets[:-1], np.diff(holding.set_offsets)
    mixed = (h ^ sizes.astype(np.uint64)) * prime
    for j in range(int(sizes.max(initial=0))):
        longer = sizes > j
        mixed[longer] = (mixed[longer] ^ holding.values[starts[longer] + j].view(np.uint64)) * prime
    return np.where(holding.known != 0, mixed, (h ^ missing) * prime).view(np.int64)


# --- the short-circuit alternative (measured, not shipped) -------------------------------------------------------


class ShortCircuit:
    """Numba source that evaluates each operator on its own, lazily: `and` / `or` skip their second operand once
    the first decides, strict ops skip the rest once an operand is unknown. No sharing between operators."""

    def __init__(self, program: KernelProgram) -> None:
        self.program = program
        self.column = {c.name: i for i, c in enumerate(program.columns)}
        self.count = 0

    def source(self) -> str:
        from tracec.compiler.kernel_abi import arguments

        params = ", ".join(["start", "stop", *(a.name for a in arguments(self.program.columns)), "out", "keys"])
        body, width = [], len(self.program.operators)
        for j, node in enumerate(self.program.operators):
            lines, t = self.emit(node)
            body += [*lines, f"out[r * {width} + {j}] = y{t}"]
        return "\n".join([f"def kernel({params}):", "    for r in range(start, stop):",
                          *("        " + line for line in body)]) + "\n"

    def emit(self, node: Node) -> tuple[list[str], int]:
        self.count += 1
        t, op = self.count, node.op
        if op == "const":
            return [f"y{t} = {bool(node.value)}", f"n{t} = {not node.value}"] if node.type == BOOL else \
                [f"v{t} = {node.value!r}", f"k{t} = True"], t
        if op in ("load", "load_set"):
            c = self.column[node.value]
            if op == "load_set":
                return [f"lo{t} = c{c}_o[r]", f"hi{t} = c{c}_o[r + 1]", f"k{t} = c{c}_k[r] != 0"], t
            if node.type == BOOL:
                return [f"k{t} = c{c}_k[r] != 0", f"y{t} = k{t} & (c{c}_v[r] != 0)", f"n{t} = k{t} ^ y{t}"], t
            return [f"v{t} = c{c}_v[r]", f"k{t} = c{c}_k[r] != 0"], t
        if op == "not":
            lines, a = self.emit(node.args[0])
            return [*lines, f"y{t} = n{a}", f"n{t} = y{a}"], t
        if op in ("and", "or"):
            (la, a), (lb, b) = self.emit(node.args[0]), self.emit(node.args[1])
            if op == "and":
                decided, fixed, tail = f"n{a}", ["False", "True"], [f"y{a} & y{b}", f"n{b}"]
            else:
                decided, fixed, tail = f"y{a}", ["True", "False"], [f"y{b}", f"n{a} & n{b}"]
            rest = [*lb, f"y{t} = {tail[0]}", f"n{t} = {tail[1]}"]
            return [*la, f"if {decided}:", f"    y{t} = {fixed[0]}", f"    n{t} = {fixed[1]}", "else:",
                    *("    " + line for line in rest)], t
        parts = [self.emit(arg) for arg in node.args]
        body = self.compute(node, t, [p for _, p in parts])
        unknown = [f"y{t} = False", f"n{t} = False"] if node.type == BOOL else [f"v{t} = 0", f"k{t} = False"]
        for (lines, a), arg in reversed(list(zip(parts, node.args))):
            known = f"(y{a} | n{a})" if arg.type == BOOL else f"k{a}"
            body = [*lines, f"if {known}:", *("    " + line for line in body), "else:", *("    " + u for u in unknown)]
        return body, t

    def compute(self, node: Node, t: int, args: list[int]) -> list[str]:
        op = node.op
        if op == "count":
            return [f"v{t} = hi{args[0]} - lo{args[0]}", f"k{t} = True"]
        if op == "has":
            values = f"c{self.column[node.args[1].value]}_v"
            return [f"m{t} = False", f"for j in range(lo{args[1]}, hi{args[1]}):",
                    f"    if {values}[j] == v{args[0]}:", f"        m{t} = True", "        break",
                    f"y{t} = m{t}", f"n{t} = not m{t}"]
        if node.args[0].type == SET:
            a, b = args
            va, vb = (f"c{self.column[arg.value]}_v" for arg in node.args)
            same = [f"m{t} = (hi{a} - lo{a}) == (hi{b} - lo{b})", f"if m{t}:", f"    for j in range(hi{a} - lo{a}):",
                    f"        if {va}[lo{a} + j] != {vb}[lo{b} + j]:", f"            m{t} = False", "            break"]
            return [*same, f"y{t} = {'' if op == 'eq' else 'not '}m{t}", f"n{t} = not y{t}"]
        symbol = {"eq": "==", "ne": "!=", "gt": ">", "lt": "<", "ge": ">=", "le": "<="}[op]
        left, right = ((f"y{x}" if arg.type == BOOL else f"v{x}") for x, arg in zip(args, node.args))
        return [f"y{t} = {left} {symbol} {right}", f"n{t} = not y{t}"]


# --- measurements ------------------------------------------------------------------------------------------------

THREADS = os.cpu_count() or 1  # the all-threads rows
THREAD_COUNTS = tuple(sorted({1, THREADS}))
TARGET_SIZE = 10**6  # where the targets apply


SIZES = from_env("KERNELS_SIZES", (10**3, 10**4, 10**5, 10**6))
RUN_ROUNDS = int(os.environ.get("KERNELS_ROUNDS", str(ROUNDS)))
COMPILE_ROUNDS = int(os.environ.get("KERNELS_COMPILE_ROUNDS", str(ROUNDS)))
BRANCH_N = max(SIZES)  # the branch-free / short-circuit comparison's transitions (10^6 unless KERNELS_SIZES says)


# {side: (name in the tables, threads)}; a kernel or floor side is "<what>/<threads>".
SIDES = {"python": ("plain Python, a dict per step", 1), "numpy": ("numpy masks, each distinct mask once", 1),
         "interp": ("interpreter", 1),
         **{f"numba/{t}": ("Numba", t) for t in THREAD_COUNTS}, **{f"c/{t}": ("C", t) for t in THREAD_COUNTS},
         **{f"floor/{t}": ("memory floor: inputs read once, outputs written", t) for t in THREAD_COUNTS}}


COMPILE = """
import json, pickle, sys, time
from pathlib import Path
start = time.perf_counter()
from tracec.compiler import c_backend
from tracec.compiler.backends import compile_kernel
from tracec.compiler.cache import KernelCache
imported = time.perf_counter()
mode, target, data = sys.argv[1:4]
if mode == "numba":  # Numba's once-per-process start (its typing and target registries), timed on its own
    from numba.core.registry import cpu_target
    cpu_target.target_context.refresh()
    cpu_target.typing_context.refresh()
started = time.perf_counter()
if mode == "artifact":
    kernel = c_backend.load_artifact(Path(target))
else:
    kernel = compile_kernel(pickle.loads(Path(data).read_bytes()), mode, KernelCache(Path(target)))
print(json.dumps({"import": imported - start, "start": started - imported, "seconds": time.perf_counter() - started,
                  "from_cache": kernel.from_cache}))
"""

VARIANT = """
import json, pickle, sys, time
from pathlib import Path
import numba
from numba import types
from tracec.compiler import numba_backend
from tracec.compiler.cache import KernelCache
from tracec.compiler.kernel_abi import arguments
variant, data, scratch = sys.argv[1:4]
program = pickle.loads(Path(data).read_bytes())
source = numba_backend.generate_source(program)
if variant == "prange":
    source = source.replace("range(start, stop)", "numba.prange(start, stop)")
    source = source.replace("import numpy", "import numba\\nimport numpy")
namespace = {}
exec(compile(source, "<variant>", "exec"), namespace)
from numba.core.registry import cpu_target
cpu_target.target_context.refresh()  # Numba's own start, as in the table above
cpu_target.typing_context.refresh()
start = time.perf_counter()
if variant == "cfunc":
    numba_backend.compile_numba(program, KernelCache(Path(scratch)))
else:
    dtypes = {"int64": types.int64, "float64": types.float64, "uint8": types.uint8}
    inputs = [types.Array(dtypes[a.dtype], 1, "C", readonly=True) for a in arguments(program.columns)]
    signature = types.void(types.int64, types.int64, *inputs, types.Array(types.uint8, 1, "C"),
                           types.Array(types.int64, 1, "C"), types.Array(types.int64, 1, "C"),
                           types.Array(types.uint8, 1, "C"))
    numba.njit(signature, parallel=variant == "prange", error_model="numpy")(namespace["kernel"])
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def _fresh_process(script: str, *args: object) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def omp_threads(kernel: CKernel) -> Callable[[int], None]:
    """`omp_set_num_threads` of the OpenMP runtime the C kernel's library loaded (found through the library's own
    handle, so it is that runtime's): it sets the threads of the parallel regions the calling thread starts next.
    The kernel ABI has no thread argument; the kernel runs on the calling thread, so this is its thread control."""
    library = ctypes.CDLL(str(kernel.path))
    set_threads = library.omp_set_num_threads
    set_threads.argtypes, set_threads.restype = [ctypes.c_int], None
    return set_threads


@pytest.fixture(scope="module")
def found() -> Iterator[dict]:
    results: dict = {}
    yield results
    record("kernels", _report(results), COMMAND)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict:
    cache = KernelCache(tmp_path_factory.mktemp("kernels"))
    program = household()
    return {"numba": compile_kernel(program, "numba", cache), "c": compile_kernel(program, "c", cache)}


@pytest.fixture(scope="module")
def facts() -> dict:
    return {size: make_facts(size, seed=size) for size in SIZES}


@pytest.mark.parametrize("size", SIZES)
def test_kernels(benchmark, found, kernels, facts, size) -> None:
    f, program = facts[size], household()
    reference = kernels["c"].run(f, size)
    steps = to_steps(f, size)
    arrays = marshal(program.columns, f, size)
    width = len(program.operators)
    set_c_threads = omp_threads(kernels["c"])

    def numba_side(threads: int) -> Callable[[], tuple]:
        kernel = dataclasses.replace(kernels["numba"], threads=threads)
        return lambda: kernel.run(f, size)

    def c_side(threads: int) -> Callable[[], tuple]:
        def run() -> tuple:
            set_c_threads(threads)
            return kernels["c"].run(f, size)
        return run

    outputs = [((width,), np.uint8), ((), np.int64)]  # O and the context keys, as the kernels write them

    def floor_side(threads: int) -> Callable[[], None]:
        return lambda: read_write_floor(arrays, size, outputs, threads)

    fast = max(5, min(100, 10**6 // size))  # runs a round of each fast side
    sides: dict[str, tuple[Callable[[], object], int]] = {
        "python": (lambda: python_scores(steps), 1), "numpy": (lambda: numpy_scores(f, size), fast)}
    if size <= 10**4:
        sides["interp"] = (lambda: interp.run(program, f, size), 1)
    sides.update({f"numba/{t}": (numba_side(t), fast) for t in THREAD_COUNTS})
    sides.update({f"c/{t}": (c_side(t), fast) for t in THREAD_COUNTS})
    sides.update({f"floor/{t}": (floor_side(t), fast) for t in THREAD_COUNTS})
    # Every side computes the same O (and context keys) before anything is timed; this also warms every side, so
    # the rounds need no warming run (which would cost plain Python at 10^6 another 12 s).
    for name, (run, _) in sides.items():
        got = run()
        if name == "python":
            np.testing.assert_array_equal(np.array(got[0], dtype=np.uint8), reference[0])  # type: ignore[index]
        elif got is not None:
            np.testing.assert_array_equal(got[0], reference[0])  # type: ignore[index]
            np.testing.assert_array_equal(got[1], reference[1])  # type: ignore[index]
    benchmark.group = f"kernels {size:.0e} transitions"
    try:
        found[("rounds", size)] = interleaved(benchmark, sides, RUN_ROUNDS, warm=False)
    finally:
        set_c_threads(THREADS)
    found[("bytes", size)] = (sum(a.nbytes for a in arrays), size * width + 8 * size)


def test_compile_times(benchmark, found, tmp_path) -> None:
    """Every figure from a new process; each round runs every side in turn (bench/sides.py `collected`)."""
    data = tmp_path / "program.pickle"
    data.write_bytes(pickle.dumps(household()))
    artifact = tmp_path / "household.so"
    c_backend.write_artifact(household(), artifact, KernelCache(tmp_path / "artifact-cache"))
    fresh = itertools.count()

    def backend(name: str) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            cache = tmp_path / f"{name}-{next(fresh)}"  # an empty cache folder, then the one it filled
            first = _fresh_process(COMPILE, name, cache, data)
            second = _fresh_process(COMPILE, name, cache, data)
            assert not first["from_cache"] and second["from_cache"]
            return {"cold": first["seconds"], "warm": second["seconds"], "start": first["start"],
                    "import": first["import"]}
        return run

    def variant(name: str) -> Callable[[], dict[str, float]]:
        return lambda: _fresh_process(VARIANT, name, data, tmp_path / f"v-{name}-{next(fresh)}")

    sides = {"numba": backend("numba"), "c": backend("c"),
             "artifact": lambda: _fresh_process(COMPILE, "artifact", artifact, data),
             **{f"variant/{name}": variant(name) for name in ("cfunc", "njit", "prange")}}
    found["compile"] = collected(benchmark, sides, COMPILE_ROUNDS)


def test_branch_free_against_short_circuit(benchmark, found) -> None:
    """One thread, BRANCH_N transitions, the operators only (no context key), both compiled with `njit`."""
    n = BRANCH_N
    program = household(context=False)
    f = make_facts(n, seed=1)
    arrays = marshal(program.columns, f, n)
    checked = min(n, 2000)
    expected = interp.run(program, f, checked)[0]
    sides: dict[str, tuple[Callable[[], object], int]] = {}
    for name, source in (("branch-free", numba_backend.generate_source(program)),
                         ("short-circuit", "import numpy as np\n" + ShortCircuit(program).source())):
        namespace: dict = {}
        exec(compile(source, f"<{name}>", "exec"), namespace)  # noqa: S102
        function = numba.njit(error_model="numpy")(namespace["kernel"])
        outputs = allocate(n, len(program.operators), False)
        fired = outputs.fired
        context_outputs = (outputs.words.reshape(-1), outputs.known.reshape(-1)) if name == "branch-free" else ()
        args = (0, n, *arrays, fired.reshape(-1), outputs.keys, *context_outputs)
        function(*args)
        np.testing.assert_array_equal(fired[:checked], expected)
        sides[name] = (functools.partial(function, *args), 3)
    found["branching"] = interleaved(benchmark, sides, RUN_ROUNDS)


# --- the report --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """One row of the ratio table: numerator / denominator seconds, paired round by round."""

    name: str
    numerator: str
    denominator: str
    percent: bool = False  # shown as a percentage (floor time / kernel time: the share of what memory allows)
    target: float | None = None  # at TARGET_SIZE, as the median of the ratio (percent rows: in percent)

    def cell(self, rounds: Rounds, size: int) -> str:
        if self.numerator not in rounds.seconds or self.denominator not in rounds.seconds:
            return "-"
        spread = rounds.ratio(self.numerator, self.denominator).scaled(100 if self.percent else 1)
        text = spread.cell(0, "%") if self.percent else spread.cell(suffix="x")
        missed = self.target is not None and size == TARGET_SIZE and spread.median < self.target
        return text + (" missed" if missed else "")

    def target_text(self) -> str:
        return "" if self.target is None else f">= {self.target:g}{'%' if self.percent else 'x'}"


def _comparisons() -> list[Comparison]:
    rows = [Comparison("plain Python / Numba, 1 thread each", "python", "numba/1", target=300),
            Comparison("numpy masks / Numba, 1 thread each", "numpy", "numba/1", target=5),
            *(Comparison(f"Numba at the memory floor (floor / Numba), {threads_text(t)} each", f"floor/{t}",
                         f"numba/{t}", percent=True, target=50) for t in THREAD_COUNTS),
            Comparison("plain Python / C, 1 thread each", "python", "c/1"),
            Comparison("numpy masks / C, 1 thread each", "numpy", "c/1"),
            *(Comparison(f"C at the memory floor (floor / C), {threads_text(t)} each", f"floor/{t}", f"c/{t}",
                         percent=True, target=50) for t in THREAD_COUNTS)]
    if THREADS > 1:
        rows += [Comparison(f"{what}: 1 thread / {threads_text(THREADS)} (speed-up)", f"{side}/1", f"{side}/{THREADS}",
                            target=target) for side, what, target in (("numba", "Numba", 1.8), ("c", "C", 1.8),
                                                                      ("floor", "memory floor", None))]
    return rows


def _run_tables(found: dict) -> list[str]:
    measured = [size for size in SIZES if ("rounds", size) in found]
    if not measured:
        return []
    runs: dict[int, Rounds] = {size: found[("rounds", size)] for size in measured}
    rows = []
    for side, (name, threads) in SIDES.items():
        if any(side in runs[size].seconds for size in measured):
            rows.append([name, str(threads), *(runs[size].time(side).scaled(1e3).cell()
                                               if side in runs[size].seconds else "-" for size in measured)])
    times = markdown_table(["side", "threads", *(f"{size:.0e} ms" for size in measured)], rows)
    comparisons = _comparisons()
    ratios = markdown_table(["ratio (> 1x: the second side is faster)", *(f"{size:.0e}" for size in measured),
                             f"target at {TARGET_SIZE:.0e}"],
                            [[c.name, *(c.cell(runs[size], size) for size in measured), c.target_text()]
                             for c in comparisons])
    rounds = min(len(runs[size]) for size in measured)
    inputs, outputs = found[("bytes", measured[-1])]
    note = (describe(rounds, "in-process", f"plain Python, numpy and the interpreter 1; each kernel and the floor 1 "
                                            f"and {THREADS} (os.cpu_count()), as the threads column says")
            + f" Each round runs plain Python and the interpreter once and the other sides 5 to 100 times (a "
            "round's figure: the median of those runs); every side is checked against the C kernel's O and keys "
            "first, which also warms it. Numba's threads are its kernel's own thread pool (`NumbaKernel.threads`: "
            "the transitions cut into parts, `compiler/threads.py`; the kernel is a serial `cfunc`, so "
            "`numba.set_num_threads` does not apply); C's are OpenMP's, set by `omp_set_num_threads` before "
            f"each call. Both split a batch only from {2 * MIN_ITEMS_PER_PART} (Numba) and "
            f"{c_backend.MIN_ROWS_PER_RANGE} (C) transitions: below that their "
            "all-threads rows run one thread, as does the all-threads floor, which cuts as Numba does. The numpy "
            "baseline computes each of its 7 distinct memberships, the verb tests and equalities once and reuses "
            "them, as the kernel shares subexpressions. The memory floor (bench/floors.py) reads every column array "
            f"the kernel reads once ({inputs / 1e6:.3g} MB at {measured[-1]:.0e}) and writes O and the keys "
            f"({outputs / 1e6:.3g} MB) into fresh `np.empty` memory each call, as the kernels write their outputs "
            "into a new block each call: no implementation does less. 'at the memory floor' = floor time / kernel "
            "time at equal threads (the machine's read bandwidth is in the header). "
            f"Targets at {TARGET_SIZE:.0e}: Numba >= 300x plain Python and >= 5x numpy (1 thread each), each kernel "
            f">= 50% of the floor's speed (within 2x of it) at each thread count, and {THREADS} threads >= 1.8x one; "
            "'missed' marks a median short of its target. Load average "
            f"(1 min) at the end: {load_average()}.")
    return [times, ratios, note]


def _compile_tables(found: dict) -> list[str]:
    reports = found.get("compile")
    if not reports:
        return []

    def spread(side: str, key: str) -> Spread:
        return Spread.of([report[key] for report in reports[side]])

    def cell(side: str, key: str, target: float | None = None) -> str:
        figure = spread(side, key)
        return figure.cell() + (" missed" if target is not None and figure.median > target else "")

    table = [["cold: empty cache dir, new process", cell("numba", "cold", 1.5), cell("c", "cold", 1.5), "<= 1.5"],
             ["warm: cache filled, new process", cell("numba", "warm", 0.25), cell("c", "warm", 0.25), "<= 0.25"],
             ["C artifact load, new process", "-", cell("artifact", "seconds", 0.05), "<= 0.05"],
             ["Numba's own start, once per process (not in the rows above)", cell("numba", "start"), "-", ""]]
    imports = Spread.of([report["import"] for side in ("numba", "c", "artifact") for report in reports[side]])
    rounds = min(len(rows) for rows in reports.values())
    variants = [[name, cell(f"variant/{key}", "seconds")] for key, name in
                (("cfunc", "`cfunc` over pointers (shipped)"), ("njit", "`njit` over arrays"),
                 ("prange", "`njit(parallel=True)` with `prange`"))]
    return [markdown_table(["compile_kernel(household), seconds", "Numba", "C", "target"], table),
            describe(rounds, "in-process", "1 (a compile)") + f" Every figure is a new process's ({rounds} per row, "
            "the rows' processes interleaved round by round), timed inside it after `import "
            f"tracec.compiler.backends` (which takes {imports.cell()} s: Numba, cffi); 'missed' marks a median over "
            "its target. Numba spends its start (building its typing and target registries) on the first thing it "
            "compiles or loads in a process, whatever that is; in training, the reward kernels (also Numba) pay it "
            "anyway, so it is timed apart.",
            markdown_table(["Numba variant of the same source", "cold compile s, new process, after Numba's start"],
                           variants)]


def _branch_table(found: dict) -> list[str]:
    branching: Rounds | None = found.get("branching")
    if branching is None:
        return []
    ms = {side: branching.time(side).scaled(1e3).cell() for side in ("branch-free", "short-circuit")}
    table = markdown_table([f"evaluation ({BRANCH_N:.0e} transitions, 1 thread, no context)", "ms"],
                           [["branch-free flags, shared subexpressions (shipped)", ms["branch-free"]],
                            ["short-circuit branches, per operator", ms["short-circuit"]],
                            ["short-circuit / branch-free",
                             branching.ratio("short-circuit", "branch-free").cell(suffix="x")]])
    return [table, describe(len(branching), "in-process", "1 each (`njit`, serial)")
            + " Each round runs each side 3 times (a round's figure: their median), wall time."]


def _report(found: dict) -> str:
    return "\n\n".join([*_run_tables(found), *_compile_tables(found), *_branch_table(found)])
