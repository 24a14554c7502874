"""Operator kernels side by side: plain Python per step, numpy masks, the interpreter, Numba, C, and a memory copy.

The program is a 15-operator household rubric built by hand in the IR (5 evidence, 5 execution, 5 invalidity over
location / holding / visible / opened, the verb enum, obj / recep entities, `parsed`, two lifted text bools, two
bindings; context prev.location, prev.holding), on random fact columns with ~10% missing. Every side computes O
and a context key (plain Python: the key tuple a user would build) and is checked against the kernels at 10^3.
The copy reads every fact column the kernel reads, writes a copy, and writes O and the keys: the bandwidth bound.
Also: compile times in fresh processes (cold cache, warm cache, C artifact load) and the design alternatives
(Numba `cfunc` vs `njit` vs `prange` compile time; branch-free vs short-circuit evaluation).
Writes bench/RESULTS.md, section "kernels".
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numba
import numpy as np
import pytest
from tracec.compiler import c_backend, interp, numba_backend
from tracec.compiler.backends import compile_kernel
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
from tracec.dsl.types import BOOL, ENTITY, INT, SET, enum

from bench.results import markdown_table, record
from bench.sides import best_times

COMMAND = "pytest bench/test_kernels_bench.py --benchmark-only -p no:xdist"
SIZES = (10**3, 10**4, 10**5, 10**6)
VERB = enum("go", "take", "put", "open", "close", "toggle", "clean", "heat", "cool", "use", "examine", "look",
            "inventory")
SCALARS = {"prev.location": ENTITY, "next.location": ENTITY, "act.verb": VERB, "act.obj": ENTITY,
           "act.recep": ENTITY, "act.parsed": BOOL, "lift.0": BOOL, "lift.1": BOOL, "bind.target": ENTITY,
           "bind.dest": ENTITY}
SETS = {"prev.holding": (0, 2), "next.holding": (0, 2), "prev.visible": (2, 6), "next.visible": (2, 6),
        "prev.opened": (0, 3), "next.opened": (0, 3)}  # sizes per transition
NAMES = ["kitchen", "livingroom", "bathroom", "bedroom", "garage", "garden", "cellar", "attic", "hall", "office", "mug", "cup", "apple", "knife", "plate", "bowl", "pan", "pot", "spoon", "fork", "sponge", "towel", "soap", "book", "pen", "lamp", "key", "box", "cabinet", "drawer", "fridge", "microwave", "sinkbasin", "countertop", "shelf", "desk", "bed", "sofa", "toilet", "safe"]


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


def make_facts(n: int, seed: int = 0) -> dict[str, Col]:
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
    for name, (low, high) in SETS.items():
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
    rows = {name: np.repeat(np.arange(n), np.diff(f[name].set_offsets)) for name in SETS}
    scalar = {name: (f[name].values, f[name].known.astype(bool)) for name in SCALARS}

    def has(entity: str, set_name: str) -> tuple[np.ndarray, np.ndarray]:
        (x, kx), col, r = scalar[entity], f[set_name], rows[set_name]
        hit = np.zeros(n, bool)
        hit[r[col.values == x[r]]] = True
        return hit, kx & col.known.astype(bool)

    def eq(a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
        return scalar[a][0] == scalar[b][0], scalar[a][1] & scalar[b][1]

    def verb(name: str) -> tuple[np.ndarray, np.ndarray]:
        return scalar["act.verb"][0] == VERB.members.index(name), scalar["act.verb"][1]

    def flag(name: str) -> tuple[np.ndarray, np.ndarray]:
        return scalar[name][0] != 0, scalar[name][1]

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
        ra = rows[a]
        inside = np.flatnonzero((la == lb)[ra])
        position = inside - ca.set_offsets[ra[inside]]
        differs = ca.values[inside] != cb.values[cb.set_offsets[ra[inside]] + position]
        same = la == lb
        same[ra[inside][differs]] = False
        return same, ca.known.astype(bool) & cb.known.astype(bool)

    moved = (scalar["next.location"][0] != scalar["prev.location"][0],
             scalar["next.location"][1] & scalar["prev.location"][1])
    opened = np.diff(f["next.opened"].set_offsets) > np.diff(f["prev.opened"].set_offsets)
    ops = [
        and_(has("bind.target", "next.visible"), not_(has("bind.target", "prev.visible"))),
        and_(moved, has("bind.dest", "next.visible")),
        and_(has("bind.dest", "next.visible"), not_(has("bind.dest", "prev.visible"))),
        and_(moved, has("bind.target", "next.visible")),
        (opened, f["next.opened"].known.astype(bool) & f["prev.opened"].known.astype(bool)),
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
    fired = np.stack([v & k for v, k in ops], axis=1).astype(np.uint8)
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

KERNELS = ("numba", "numba-1thread", "c")
IMPLS = ("python", "numpy", "interp", *KERNELS, "copy")

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
    source = source.replace("range(start, stop)", "numba.prange(start, stop)").replace("import numpy", "import numba\\nimport numpy")
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


@pytest.fixture(scope="module")
def found() -> Iterator[dict]:
    results: dict = {}
    yield results
    record("kernels", _report(results), COMMAND)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict:
    cache = KernelCache(tmp_path_factory.mktemp("kernels"))
    program = household()
    return {"numba": compile_kernel(program, "numba", cache), "c": compile_kernel(program, "c", cache),
            "numba-1thread": numba_backend.compile_numba(program, cache, threads=1)}


@pytest.fixture(scope="module")
def facts() -> dict:
    return {size: make_facts(size, seed=size) for size in SIZES}


@pytest.mark.parametrize("size", SIZES)
def test_kernels(benchmark, found, kernels, facts, size) -> None:
    f, program = facts[size], household()
    reference = kernels["c"].run(f, size)
    steps = to_steps(f, size)
    arrays = marshal(program.columns, f, size)
    copies = [np.empty_like(a) for a in arrays]
    outputs = allocate(size, len(program.operators), True)
    fired_copy, keys_copy = outputs.fired, outputs.keys

    def copy() -> None:
        for source, target in zip(arrays, copies):
            np.copyto(target, source)
        fired_copy.fill(1)
        keys_copy.fill(1)

    # Every side computes the same O (and context keys) before anything is timed; this also warms the kernels.
    np.testing.assert_array_equal(np.array(python_scores(steps)[0], dtype=np.uint8), reference[0])
    for got in (numpy_scores(f, size), *(kernels[k].run(f, size) for k in KERNELS)):
        np.testing.assert_array_equal(got[0], reference[0])
        np.testing.assert_array_equal(got[1], reference[1])
    def kernel_side(k: str) -> Callable[[], object]:
        return lambda: kernels[k].run(f, size)

    fast = max(5, min(100, 10**6 // size))
    sides: dict[str, tuple[Callable[[], object], int]] = {
        "python": (lambda: python_scores(steps), 1), "numpy": (lambda: numpy_scores(f, size), fast)}
    if size <= 10**4:
        np.testing.assert_array_equal(interp.run(program, f, size)[0], reference[0])
        sides["interp"] = (lambda: interp.run(program, f, size), 1)
    sides.update({k: (kernel_side(k), fast) for k in KERNELS})
    sides["copy"] = (copy, fast)
    benchmark.group = f"kernels {size:.0e} transitions"
    best = best_times(benchmark, sides, rounds=2 if size >= 10**6 else 3)
    found.update({(impl, size): seconds for impl, seconds in best.items()})
    found[("bytes", size)] = sum(a.nbytes for a in arrays) + fired_copy.nbytes + keys_copy.nbytes


def test_compile_times(benchmark, found, tmp_path) -> None:
    data = tmp_path / "program.pickle"
    data.write_bytes(pickle.dumps(household()))
    for backend in ("numba", "c"):
        cold, warm, start = [], [], []
        for attempt in range(3):
            cache = tmp_path / f"{backend}-{attempt}"
            first = _fresh_process(COMPILE, backend, cache, data)
            second = _fresh_process(COMPILE, backend, cache, data)
            assert not first["from_cache"] and second["from_cache"]
            cold.append(first["seconds"])
            warm.append(second["seconds"])
            start += [first["start"], second["start"]]
            found["import"] = min(found.get("import", 1e9), first["import"], second["import"])
        found[("cold", backend)], found[("warm", backend)] = min(cold), min(warm)
        found[("start", backend)] = min(start)
    artifact = tmp_path / "household.so"
    c_backend.write_artifact(household(), artifact, KernelCache(tmp_path / "c-0"))
    loads = [_fresh_process(COMPILE, "artifact", artifact, data)["seconds"] for _ in range(3)]
    found["artifact"] = min(loads)
    for variant in ("cfunc", "njit", "prange"):
        found[("variant", variant)] = _fresh_process(VARIANT, variant, data, tmp_path / f"v-{variant}")["seconds"]
    benchmark.pedantic(c_backend.load_artifact, args=(artifact,), rounds=5)


def test_branch_free_against_short_circuit(benchmark, found) -> None:
    """One thread, 10^6 transitions, the operators only (no context key), both compiled with `njit`."""
    n = 10**6
    program = household(context=False)
    f = make_facts(n, seed=1)
    arrays = marshal(program.columns, f, n)
    expected = interp.run(program, f, 2000)[0]
    runs = {}
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
        np.testing.assert_array_equal(fired[:2000], expected)
        runs[name] = (function, args)
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(9):  # alternating, on CPU time: one thread each, so other load on the machine matters less
        for name, (function, args) in runs.items():
            start = time.process_time()
            function(*args)
            best[name] = min(best[name], time.process_time() - start)
    found["branching"] = best
    benchmark.pedantic(runs["branch-free"][0], args=runs["branch-free"][1], rounds=3)


def _run_row(found: dict, size: int) -> list[str]:
    numba_s = found[("numba", size)]

    def ratio(impl: str, form: str) -> str:
        return format(found[(impl, size)] / numba_s, form) if (impl, size) in found else "-"

    cells = [f"{found[(impl, size)] * 1e3:.3g}" if (impl, size) in found else "-" for impl in IMPLS]
    return [f"{size:.0e}", *cells, ratio("python", ".0f") + "x", ratio("numpy", ".1f") + "x", ratio("copy", ".0%")]


def _report(found: dict) -> str:
    parts = []
    names = {"python": "plain Python", "numpy": "numpy masks", "interp": "interpreter", "numba": "Numba",
             "numba-1thread": "Numba, 1 thread", "c": "C", "copy": "memory copy"}
    rows = [_run_row(found, size) for size in SIZES if ("numba", size) in found]
    if rows:
        header = ["transitions", *(f"{names[i]} ms" for i in IMPLS), "Numba vs Python", "Numba vs numpy",
                  "Numba at copy bandwidth"]
        parts.append(markdown_table(header, rows))
        # numba.config sets its NUMBA_* values at run time, out of mypy's sight.
        threads = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
        parts.append(f"Sides interleaved: each round (3, 2 at 10^6) runs plain Python and the interpreter once and "
                     "the others 5 to 100 times; best time of each side. Numba runs "
                     f"{threads} threads (its default, NUMBA_NUM_THREADS = cores), C runs "
                     "OpenMP's default; numpy, plain Python and the copy run one thread. The copy moves "
                     f"{found.get(('bytes', SIZES[-1]), 0) / 1e6:.0f} MB at 10^6 (inputs read and written, O and "
                     "keys written); 'at copy bandwidth' = copy time / Numba time. Targets at 10^6: Numba >= 300x "
                     "plain Python, >= 5x numpy, >= 50% of copy bandwidth.")
    if ("cold", "numba") in found:
        table = [["cold: empty cache dir, new process", f"{found[('cold', 'numba')]:.2f}", f"{found[('cold', 'c')]:.2f}",
                  "<= 1.5"],
                 ["warm: cache filled, new process", f"{found[('warm', 'numba')]:.3f}", f"{found[('warm', 'c')]:.3f}",
                  "<= 0.25"],
                 ["C artifact load, new process", "-", f"{found['artifact']:.4f}", "<= 0.05"],
                 ["Numba's own start, once per process (not in the rows above)", f"{found[('start', 'numba')]:.2f}",
                  "-", ""]]
        parts.append(markdown_table(["compile_kernel(household), seconds", "Numba", "C", "target"], table))
        parts.append(f"Best of 3, timed inside the new process after `import tracec.compiler.backends` "
                     f"(which takes {found['import']:.2f} s: Numba, cffi). Numba spends its start (building its "
                     "typing and target registries) on the first thing it compiles or loads in a process, whatever "
                     "that is; in training, the reward kernels (also Numba) pay it anyway, so it is timed apart.")
        variants = [[name, f"{found[('variant', key)]:.2f}"] for key, name in
                    (("cfunc", "`cfunc` over pointers (shipped)"), ("njit", "`njit` over arrays"),
                     ("prange", "`njit(parallel=True)` with `prange`"))]
        parts.append(markdown_table(["Numba variant of the same source",
                                     "cold compile s, new process, after Numba's start"], variants))
    if "branching" in found:
        free, short = found["branching"]["branch-free"], found["branching"]["short-circuit"]
        parts.append(markdown_table(["evaluation (10^6 transitions, 1 thread, no context)", "CPU ms, best of 9"],
                                    [["branch-free flags, shared subexpressions (shipped)", f"{free * 1e3:.1f}"],
                                     ["short-circuit branches, per operator", f"{short * 1e3:.1f}"],
                                     ["short-circuit / branch-free", f"{short / free:.2f}x"]]))
    return "\n\n".join(parts)
