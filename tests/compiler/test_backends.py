"""Every backend equals the reference interpreter bit for bit: O and context keys (hashes and the words of computed
context expressions), on random well-typed programs over random fact columns with missing values, empty sets,
garbage behind missing values and extreme numbers drawn on purpose (INT64_MIN / MAX, 2^53 +- 1, -0.0, huge and
tiny floats), where int64 overflow and exact int/float comparison decide the answer.

Compiling costs seconds, so the always-on tests compile one large random program per backend and vary the data;
the generated Numba source runs un-jitted on fresh random programs for every example; the `slow` test compiles
fresh random programs too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracec.compiler import interp, numba_backend
from tracec.compiler.backends import compile_kernel
from tracec.compiler.cache import KernelCache
from tracec.compiler.context import ContextKeys
from tracec.compiler.ir import KERNEL_OPS, ColumnSpec, KernelProgram, Node, entity_id
from tracec.dsl.types import BOOL, ENTITY, FLOAT, INT, SET, Type, enum

T = TypeVar("T")
VERB = enum("go", "take", "put")
SCALARS: dict[str, Type] = {
    "act.parsed": BOOL, "lift.0": BOOL, "prev.n": INT, "next.n": INT, "prev.x": FLOAT, "next.x": FLOAT,
    "act.verb": VERB, "act.obj": ENTITY, "bind.target": ENTITY,
}
SETS = ("prev.holding", "next.holding")
NAMES = ("mug", "cup", "table", "kitchen", "apple")
ENTITIES = tuple(sorted({entity_id(name) for name in NAMES} | {-(2**63), 2**63 - 1}))
MAX_DEPTH = 3  # of bool expressions
NUMBER_LEVELS = 3
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Numbers where the contract is decided: int64 overflow, floats that cannot hold an int, signed zeros, subnormals.
EXTREME_INTS = (INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1, 2**62, -(2**62), 3, 2**53, 2**53 + 1,
                2**53 - 1, -(2**53) - 1, 2**32, -1, 0)
EXTREME_FLOATS = (-0.0, 0.0, 2.0**53, 2.0**53 + 2, 2.0**63, -(2.0**63), 2.0**62, 1e308, -1e308, 5e-324, 1e-300,
                  0.5, -1.5, 1.7976931348623157e308)


@dataclass(frozen=True)
class Col:
    values: np.ndarray
    known: np.ndarray
    offsets: np.ndarray | None = None


# --- random programs ---------------------------------------------------------------------------------------------


class Chooser(Protocol):
    def choice(self, options: Sequence[T]) -> T: ...
    def integer(self, low: int, high: int) -> int: ...


class RandomChooser:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def choice(self, options: Sequence[T]) -> T:
        return self.rng.choice(list(options))

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)


class DrawChooser:
    def __init__(self, draw: Any) -> None:
        self.draw = draw

    def choice(self, options: Sequence[T]) -> T:
        return self.draw(st.sampled_from(list(options)))

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))


def node(op: str, type_: Type, *args: Node, value: Any = None) -> Node:
    return Node(op, tuple(args), type_, value)


def const(value: Any, type_: Type) -> Node:
    return node("const", type_, value=value)


def load(name: str) -> Node:
    return node("load", SCALARS[name], value=name)


def load_set(name: str) -> Node:
    return node("load_set", SET, value=name)


def gen_number(ch: Chooser, levels: int = NUMBER_LEVELS) -> Node:
    if levels == 0 or ch.integer(0, 2) == 0:
        kind = ch.choice(["load_int", "load_float", "int", "float", "count"])
        if kind == "load_int":
            return load(ch.choice(["prev.n", "next.n"]))
        if kind == "load_float":
            return load(ch.choice(["prev.x", "next.x"]))
        if kind == "int":
            return const(ch.choice([0, 1, -1, 2, 3, 1000, -7, *EXTREME_INTS]), INT)
        if kind == "float":
            return const(ch.choice([0.0, -0.0, 0.5, -1.5, 2.0, 1e-3, 999.25, *EXTREME_FLOATS]), FLOAT)
        return node("count", INT, load_set(ch.choice(SETS)))
    op = ch.choice(["neg", "abs", "add", "sub", "mul", "div", "min", "max"])
    args = [gen_number(ch, levels - 1) for _ in range(1 if op in ("neg", "abs") else 2)]
    is_float = op == "div" or any(a.type == FLOAT for a in args)
    return node(op, FLOAT if is_float else INT, *args)


def gen_bool(ch: Chooser, depth: int) -> Node:
    if depth >= MAX_DEPTH:
        kinds = ["load", "const", "compare", "has", "enum", "entity"]
    else:
        kinds = ["load", "const", "not", "and", "or", "and", "or", "compare", "has", "enum", "entity", "bool_eq",
                 "set_eq"]
    kind = ch.choice(kinds)
    if kind == "load":
        return load(ch.choice(["act.parsed", "lift.0"]))
    if kind == "const":
        return const(ch.choice([True, False]), BOOL)
    if kind == "not":
        return node("not", BOOL, gen_bool(ch, depth + 1))
    if kind in ("and", "or"):
        return node(kind, BOOL, gen_bool(ch, depth + 1), gen_bool(ch, depth + 1))
    comparison = ch.choice(["eq", "ne", "lt", "le", "gt", "ge"])
    if kind == "compare":
        return node(comparison, BOOL, gen_number(ch), gen_number(ch))
    equality = ch.choice(["eq", "ne"])
    if kind == "has":
        return node("has", BOOL, gen_entity(ch), load_set(ch.choice(SETS)))
    if kind == "enum":
        code = const(ch.integer(0, 2), VERB)
        return node(comparison, BOOL, *ch.choice([(load("act.verb"), code), (code, load("act.verb"))]))
    if kind == "entity":
        return node(equality, BOOL, gen_entity(ch), gen_entity(ch))
    if kind == "bool_eq":
        return node(equality, BOOL, gen_bool(ch, depth + 1), gen_bool(ch, depth + 1))
    return node(equality, BOOL, load_set(ch.choice(SETS)), load_set(ch.choice(SETS)))


def gen_entity(ch: Chooser) -> Node:
    if ch.integer(0, 2) == 0:
        return const(ch.choice(ENTITIES), ENTITY)
    return load(ch.choice(["act.obj", "bind.target"]))


CONTEXT_KINDS = ("bool", "int", "float", "enum", "entity", "set")


def gen_context(ch: Chooser, kind: str) -> Node:
    if kind == "bool":
        return gen_bool(ch, 1)
    if kind == "int":
        number = gen_number(ch)
        return number if number.type == INT else node("count", INT, load_set(ch.choice(SETS)))
    if kind == "float":
        number = gen_number(ch)
        return number if number.type == FLOAT else node("div", FLOAT, number, const(3, INT))
    if kind == "enum":
        return load("act.verb")
    if kind == "entity":
        return gen_entity(ch)
    return load_set(ch.choice(SETS))


def gen_program(ch: Chooser, n_operators: int, n_context: int) -> KernelProgram:
    operators = tuple(gen_bool(ch, 0) for _ in range(n_operators))
    context = tuple(gen_context(ch, ch.choice(CONTEXT_KINDS)) for _ in range(n_context))
    return with_columns(operators, context)


def with_columns(operators: tuple[Node, ...], context: tuple[Node, ...]) -> KernelProgram:
    names: set[str] = set()

    def walk(n: Node) -> None:
        if n.op in ("load", "load_set"):
            names.add(n.value)
        for arg in n.args:
            walk(arg)

    for n in operators + context:
        walk(n)
    columns = tuple(ColumnSpec(name, SCALARS.get(name, SET)) for name in sorted(names))
    return KernelProgram(operators, context, columns)


@st.composite
def programs(draw: Any, max_operators: int = 4) -> KernelProgram:
    ch = DrawChooser(draw)
    return gen_program(ch, ch.integer(1, max_operators), ch.integer(0, 4))


# --- random fact columns -----------------------------------------------------------------------------------------


def gen_columns(seed: int, n: int) -> dict[str, Col]:
    """Every column, ~20% missing; values behind missing flags are garbage the kernels must ignore."""
    rng = np.random.default_rng(seed)
    columns: dict[str, Col] = {}
    for name, type_ in SCALARS.items():
        known = (rng.random(n) > 0.2).astype(np.uint8)
        if type_ == BOOL:
            values: np.ndarray = rng.integers(0, 2, n).astype(np.uint8)
        elif type_ == INT:
            extreme = rng.choice(np.array(EXTREME_INTS, dtype=np.int64), n)
            values = np.where(rng.random(n) < 0.4, rng.integers(-3, 4, n), rng.integers(-1000, 1001, n))
            values = np.where(rng.random(n) < 0.3, extreme, values)
        elif type_ == FLOAT:
            special = rng.choice([0.0, -0.0, 0.5, -1.5, 2.0, 1e-3, *EXTREME_FLOATS], n)
            values = np.where(rng.random(n) < 0.5, special, rng.uniform(-1000, 1000, n))
            values = np.where(known == 0, np.nan, values)  # garbage behind missing values, even NaN
        elif type_.kind == "enum":
            values = rng.integers(0, 3, n)
        else:
            values = rng.choice(np.array(ENTITIES, dtype=np.int64), n)
        columns[name] = Col(values, known)
    pool = np.array(ENTITIES, dtype=np.int64)  # sorted, so sorted indices give sorted elements
    for name in SETS:
        sizes = rng.integers(0, 4, n)
        picks = np.argsort(rng.random((n, pool.size)), axis=1)[:, :3]  # 3 distinct entities per transition
        picks = np.sort(np.where(np.arange(3) < sizes[:, None], picks, pool.size), axis=1)  # unused ones last
        values = pool[picks[np.arange(3) < sizes[:, None]]]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        columns[name] = Col(values, (rng.random(n) > 0.2).astype(np.uint8), offsets)
    return columns


def tuple_arrays(keys: ContextKeys) -> list[np.ndarray]:
    """What identifies the context tuples: the hashes, then per scalar component its known flags and its words where
    known, per set component its known flags and elements."""
    words, known = keys.scalar_words()
    values, offsets, set_known = keys.sets()
    out = [np.asarray(keys.hash)]
    for w, k in zip(words, known):
        out += [k != 0, np.where(k != 0, w, 0)]
    for v, o, k in zip(values, offsets, set_known):
        out += [k != 0, *(v[o[t]:o[t + 1]] for t in range(len(k)) if k[t])]
    return out


def assert_same(expected: tuple[np.ndarray, ContextKeys | None], got: tuple[np.ndarray, ContextKeys | None]) -> None:
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[0].dtype == np.uint8 and got[0].shape == expected[0].shape
    if expected[1] is None:
        assert got[1] is None
        return
    assert got[1] is not None and got[1].hash.dtype == np.int64
    assert [c.kind for c in got[1].components] == [c.kind for c in expected[1].components]
    for a, b in zip(tuple_arrays(got[1]), tuple_arrays(expected[1])):
        np.testing.assert_array_equal(a, b)


# --- tests -------------------------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs(), seed=st.integers(0, 2**32 - 1), n=st.integers(0, 24))
def test_generated_numba_source_runs_unjitted_like_the_interpreter(program: KernelProgram, seed: int, n: int) -> None:
    columns = gen_columns(seed, n)
    assert_same(interp.run(program, columns, n), numba_backend.run_unjitted(program, columns, n))


def test_dividing_two_int_constants_divides_their_floats_in_the_unjitted_source_too() -> None:
    # Found by the test above: plain Python divides two int literals exactly, Numba and the contract as floats.
    ok = Node("load", (), BOOL, "act.parsed")
    quotient = Node("div", (Node("const", (), INT, 2**53 + 1), Node("const", (), INT, 3)), FLOAT)
    program = KernelProgram(operators=(ok,), context=(quotient,), columns=(ColumnSpec("act.parsed", BOOL),))
    columns = gen_columns(0, 1)
    assert_same(interp.run(program, columns, 1), numba_backend.run_unjitted(program, columns, 1))


def big_program(seed: int) -> KernelProgram:
    """Many random operators and a context expression of every type, then a few random ones."""
    ch = RandomChooser(seed)
    random_part = gen_program(ch, n_operators=24, n_context=2)
    context = tuple(gen_context(ch, kind) for kind in CONTEXT_KINDS) + random_part.context
    return with_columns(random_part.operators, context)


BIG = big_program(20240)


@pytest.fixture(scope="module")
def big_cache(tmp_path_factory: pytest.TempPathFactory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(scope="module")
def big_kernels(big_cache: KernelCache) -> dict[str, Any]:
    return {backend: compile_kernel(BIG, backend, big_cache) for backend in ("numba", "c")}


def test_big_program_covers_every_kernel_op() -> None:
    ops: set[str] = set()

    def walk(n: Node) -> None:
        ops.add(n.op)
        for arg in n.args:
            walk(arg)

    for n in BIG.operators + BIG.context:
        walk(n)
    assert ops == KERNEL_OPS
    assert {n.type.kind for n in BIG.context} == set(CONTEXT_KINDS)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60))
def test_compiled_backends_equal_the_interpreter(big_kernels: dict[str, Any], seed: int, n: int) -> None:
    columns = gen_columns(seed, n)
    expected = interp.run(BIG, columns, n)
    for kernel in big_kernels.values():
        assert_same(expected, kernel.run(columns, n))


def test_threaded_runs_equal_one_thread(big_kernels: dict[str, Any], big_cache: KernelCache) -> None:
    n = 40_000  # two ranges for the Numba thread pool, and OpenMP's parallel loop in C
    columns = gen_columns(9, n)
    single = numba_backend.compile_numba(BIG, big_cache, threads=1).run(columns, n)
    threaded = numba_backend.compile_numba(BIG, big_cache, threads=3)
    assert threaded.from_cache
    assert_same(single, threaded.run(columns, n))
    assert_same(single, big_kernels["c"].run(columns, n))
    head = interp.run(BIG, columns, 300)
    assert single[1] is not None and head[1] is not None
    np.testing.assert_array_equal(single[0][:300], head[0])
    np.testing.assert_array_equal(single[1].hash[:300], head[1].hash)


def test_backends_accept_bool_and_read_only_arrays(big_kernels: dict[str, Any]) -> None:
    n = 50
    columns = gen_columns(7, n)
    expected = interp.run(BIG, columns, n)
    frozen = {}
    for name, col in columns.items():
        values = col.values.astype(np.bool_) if col.values.dtype == np.uint8 else col.values.copy()
        known = col.known.astype(np.bool_)
        for array in (values, known):
            array.flags.writeable = False
        frozen[name] = Col(values, known, col.offsets)
    for kernel in big_kernels.values():
        assert_same(expected, kernel.run(frozen, n))


def test_division_by_zero_and_signed_zero() -> None:
    x, zero = load("prev.x"), const(-0.0, FLOAT)
    quotient = node("div", FLOAT, x, load("prev.n"))
    operators = (
        node("ge", BOOL, quotient, const(0.0, FLOAT)),  # unknown where prev.n == 0, whatever prev.x
        node("not", BOOL, node("lt", BOOL, quotient, const(0.0, FLOAT))),
        node("eq", BOOL, node("div", FLOAT, x, zero), node("div", FLOAT, x, zero)),  # never known
    )
    program = with_columns(operators, (node("mul", FLOAT, x, zero), quotient))
    n = 4
    columns = gen_columns(0, n)
    columns["prev.n"] = Col(np.array([0, 2, 0, -1]), np.ones(n, np.uint8))
    columns["prev.x"] = Col(np.array([1.0, -0.0, 0.0, 0.0]), np.ones(n, np.uint8))
    expected = interp.run(program, columns, n)
    assert expected[0].tolist() == [[0, 0, 0], [1, 1, 0], [0, 0, 0], [1, 1, 0]]
    assert expected[1] is not None and len(set(expected[1].hash[[1, 3]].tolist())) == 1  # -0.0 and 0.0 hash alike
    for backend in ("numba", "c"):
        assert_same(expected, compile_kernel(program, backend, None).run(columns, n))


def test_program_without_context_gives_no_keys() -> None:
    program = with_columns(BIG.operators[:4], ())
    columns = gen_columns(11, 30)
    expected = interp.run(program, columns, 30)
    assert expected[1] is None
    for backend in ("numba", "c"):
        assert_same(expected, compile_kernel(program, backend, None).run(columns, 30))


def test_missing_column_and_bad_shapes_are_named(big_kernels: dict[str, Any]) -> None:
    columns = gen_columns(1, 10)
    for kernel in big_kernels.values():
        without = {k: v for k, v in columns.items() if k != "act.obj"}
        with pytest.raises(ValueError, match="`act.obj`"):
            kernel.run(without, 10)
        with pytest.raises(ValueError, match=r"expected \(11,\)"):
            kernel.run(columns, 11)
        broken = dict(columns, **{"next.holding": Col(np.zeros(0, np.int64), np.ones(10, np.uint8),
                                                       np.arange(11, dtype=np.int64))})
        with pytest.raises(ValueError, match="offsets run outside"):
            kernel.run(broken, 10)


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=programs(max_operators=6), seeds=st.lists(st.integers(0, 2**32 - 1), min_size=3, max_size=3))
def test_fresh_random_programs_compile_to_the_interpreter(program: KernelProgram, seeds: list[int],
                                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    cache = KernelCache(tmp_path_factory.mktemp("fresh"))
    kernels = [compile_kernel(program, backend, cache) for backend in ("numba", "c")]
    for seed in seeds:
        n = seed % 70
        columns = gen_columns(seed, n)
        expected = interp.run(program, columns, n)
        for kernel in kernels:
            assert_same(expected, kernel.run(columns, n))


def test_unknown_backend_is_named() -> None:
    with pytest.raises(ValueError, match="backends: auto, interp, numba, c"):
        compile_kernel(BIG, "llvm", None)  # type: ignore[arg-type]


def test_interp_backend_wraps_the_interpreter() -> None:
    columns = gen_columns(3, 12)
    assert_same(interp.run(BIG, columns, 12), compile_kernel(BIG, "interp", None).run(columns, 12))
