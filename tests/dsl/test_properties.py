"""Property tests for the front end: random well-typed modules survive print and parse unchanged, pass the checker and
compile (every pass, every backend's source, the kernels equal to the interpreter on extreme facts); random and
mutated sources fail only with a located `RubricError`, never with another exception.

Modules are built as syntax trees, typed from the start: every expression is drawn for the type it must have, so
the checker has to accept it. Names come from disjoint prefixed pools (`f_`/`g_` fields, `b_` bindings, `m_` enum
members, `o_` operators) so that no name can mean two things. Negative numeric literals are left out of expressions:
the parser reads `-5` as `-(5)`, so only `Unary("-", 5)` round-trips. Expression helpers are plain functions of
`draw` rather than strategies: building a strategy object per tree node made generation many times slower.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import lark
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark
from tracec.compiler import c_backend, interp, numba_backend
from tracec.compiler.backends import compile_kernel
from tracec.compiler.ir import ColumnSpec, KernelProgram, entity_id
from tracec.compiler.pipeline import compile_capability, compile_rubric
from tracec.dsl import ast
from tracec.dsl.check import check
from tracec.dsl.defaults import STEP_SCALES
from tracec.dsl.errors import RubricError
from tracec.dsl.parse import parse
from tracec.dsl.printer import print_module
from tracec.runtime.facts.fact_batch import Column

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REPO = Path(__file__).resolve().parents[2]
KINDS = ("bool", "int", "float", "enum", "entity", "text", "set")

# Characters a description or string literal may hold: everything printable, quotes and backslashes included.
TEXT_CHARS = st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"))
TEXT = st.text(TEXT_CHARS, max_size=12)
# Numbers where the numeric contract decides (docs/language.md, "Numbers"): int64 overflow, ints a float cannot hold,
# floats beyond every int, subnormals; the literals are non-negative (`-5` reads as `-(5)`), INT64_MIN aside.
EXTREME_INTS = (0, 1, 2, 3, 2**31, 2**32, 2**53 - 1, 2**53, 2**53 + 1, 2**62, 2**63 - 1)
EXTREME_FLOATS = (0.0, 0.5, 2.0**53, 2.0**63, 9.3e18, 1e300, 1e308, 1.7976931348623157e308, 5e-324, 1e-300)
FLOATS = (st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
          | st.sampled_from(EXTREME_FLOATS))
UNIT = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
BUDGETS = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
INTS = st.integers(0, 1000) | st.integers(0, 2**63 - 1) | st.sampled_from(EXTREME_INTS)
NUMBER_DEPTH = 3
_SUFFIX = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=5)


def names(prefix: str, min_size: int, max_size: int) -> st.SearchStrategy[list[str]]:
    return st.lists(_SUFFIX.map(lambda s: prefix + s), min_size=min_size, max_size=max_size, unique=True)


def name(prefix: str) -> st.SearchStrategy[str]:
    return _SUFFIX.map(lambda s: prefix + s)


# ---------------------------------------------------------------------------------------------- schemas


@dataclass(frozen=True)
class Scope:
    """What an expression may read: the schema's fields by side and the bindings."""

    state: dict[str, ast.TypeRef]
    action: dict[str, ast.TypeRef]
    binds: dict[str, ast.TypeRef]
    enums: tuple[tuple[str, ...], ...]  # the member lists of the schema's enum fields

    @staticmethod
    def of(schema: ast.Schema, binds: dict[str, ast.TypeRef]) -> Scope:
        enums = tuple(f.type.args for f in schema.state + schema.action if f.type.name == "enum")
        return Scope({f.name: f.type for f in schema.state}, {f.name: f.type for f in schema.action}, binds, enums)


def type_ref(draw: st.DrawFn, kind: str, enums: tuple[tuple[str, ...], ...] = ()) -> ast.TypeRef:
    if kind == "set":
        return ast.TypeRef("set", ("entity",))
    if kind == "enum":
        if enums and draw(st.booleans()):
            return ast.TypeRef("enum", draw(st.sampled_from(enums)))
        return ast.TypeRef("enum", tuple(draw(names("m_", 1, 4))))
    return ast.TypeRef(kind)


def field_decls(draw: st.DrawFn, prefix: str) -> tuple[ast.FieldDecl, ...]:
    """At least one field of every type, in random order."""
    kinds = list(KINDS) + draw(st.lists(st.sampled_from(KINDS), max_size=3))
    enums: tuple[tuple[str, ...], ...] = ()
    fields = []
    for field_name, kind in zip(draw(names(prefix, len(kinds), len(kinds))), draw(st.permutations(kinds))):
        type_ = type_ref(draw, kind, enums)
        if kind == "enum":
            enums += (type_.args,)
        fields.append(ast.FieldDecl(field_name, type_))
    return tuple(fields)


# ---------------------------------------------------------------------------------------------- expressions


def read(draw: st.DrawFn, scope: Scope, kind: str, members: tuple[str, ...] = ()) -> ast.Expr | None:
    """A fact or binding of `kind` (for an enum, of exactly these members), or None when there is none."""
    options: list[ast.Expr] = []
    for side, fields in (("prev", scope.state), ("next", scope.state), ("act", scope.action)):
        for field_name, type_ in fields.items():
            if type_.name == kind and (not members or type_.args == members):
                options.append(ast.Fact(side, field_name))  # type: ignore[arg-type]
    for bind_name, type_ in scope.binds.items():
        if type_.name == kind and (not members or type_.args == members):
            options.append(ast.Name(bind_name))
    return draw(st.sampled_from(options)) if options else None


def must_read(draw: st.DrawFn, scope: Scope, kind: str, members: tuple[str, ...] = ()) -> ast.Expr:
    got = read(draw, scope, kind, members)
    assert got is not None, f"every schema has a {kind} field"
    return got


def number(draw: st.DrawFn, scope: Scope, kind: str, depth: int) -> ast.Expr:
    """An expression of type `int` (kind "int") or of any numeric type (kind "float")."""
    leaf = draw(st.sampled_from(("int", "float"))) if kind == "float" else "int"
    choice = draw(st.sampled_from((0, 1, 2, 3, 3, 3, 4, 5, 6) if depth > 0 else (0, 1)))  # arithmetic weighted up
    if choice == 0:
        return must_read(draw, scope, leaf)
    if choice == 1:
        if leaf == "int" and draw(st.integers(0, 15)) == 0:
            return ast.Literal(-(2**63))  # the one negative literal: it prints and parses back as itself
        return ast.Literal(draw(INTS if leaf == "int" else FLOATS))
    if choice == 2:
        return ast.Unary("-", number(draw, scope, kind, depth - 1))
    if choice == 3:
        op = draw(st.sampled_from(("+", "-", "*", "/") if kind == "float" else ("+", "-", "*")))
        return ast.Binary(op, number(draw, scope, kind, depth - 1), number(draw, scope, kind, depth - 1))
    if choice == 4:
        return ast.Call("abs", (number(draw, scope, kind, depth - 1),))
    if choice == 5:
        args = tuple(number(draw, scope, kind, depth - 1) for _ in range(draw(st.integers(2, 3))))
        return ast.Call(draw(st.sampled_from(("min", "max"))), args)
    return ast.Call("count", (must_read(draw, scope, "set"),))


def regex(draw: st.DrawFn, min_groups: int = 0) -> tuple[ast.Regex, int]:
    """A valid RE2 pattern and its number of capturing groups."""
    pieces = draw(st.lists(st.sampled_from(["take", " ", r"\d+", r"\w*", "(?:a|an)", "[a-z]", r"\/", "é", "x?"]),
                           max_size=4))
    groups = draw(st.lists(st.sampled_from([r"(\w+)", "([a-z]+)", "(on|in)"]), min_size=min_groups, max_size=3))
    pattern = "".join(draw(st.permutations(pieces + groups))) or "a"
    return ast.Regex(pattern, draw(st.booleans())), len(groups)


def entity(draw: st.DrawFn, scope: Scope, literal: bool = True) -> ast.Expr:
    if literal and draw(st.booleans()):
        return ast.Literal(draw(TEXT))
    return must_read(draw, scope, "entity")


def enum_test(draw: st.DrawFn, scope: Scope) -> ast.Expr:
    """`x == member`, `member != x`, or `x in {members}` for an enum fact or binding x."""
    members = draw(st.sampled_from(scope.enums))
    value = must_read(draw, scope, "enum", members)
    member = ast.Name(draw(st.sampled_from(members)))
    style = draw(st.integers(0, 2))
    if style == 0:
        return ast.Binary(draw(st.sampled_from(("==", "!="))), value, member)
    if style == 1:
        return ast.Binary(draw(st.sampled_from(("==", "!="))), member, value)
    chosen = draw(st.lists(st.sampled_from(members), max_size=3))
    return ast.Binary("in", value, ast.SetLiteral(tuple(ast.Name(m) for m in chosen)))


def boolean(draw: st.DrawFn, scope: Scope, depth: int) -> ast.Expr:
    """A transition expression of type bool; every operator and function of the language appears somewhere."""
    choice = draw(st.sampled_from(range(13) if depth > 0 else (0, 1)))
    if choice == 0:
        return read(draw, scope, "bool") or ast.Literal(draw(st.booleans()))
    if choice == 1:
        changeable = [n for n, t in scope.state.items() if t.name != "text"]
        return ast.Call("changed", (ast.Name(draw(st.sampled_from(changeable))),))
    if choice == 2:
        return ast.Unary("not", boolean(draw, scope, depth - 1))
    if choice == 3:
        op = draw(st.sampled_from(("and", "or")))
        return ast.Binary(op, boolean(draw, scope, depth - 1), boolean(draw, scope, depth - 1))
    if choice == 4:
        op = draw(st.sampled_from(("<", "<=", ">", ">=", "==", "!=")))
        kind = draw(st.sampled_from(("int", "float")))
        # Arithmetic gets a depth of its own, so that `*` over `+` and the like turn up often.
        return ast.Binary(op, number(draw, scope, kind, NUMBER_DEPTH), number(draw, scope, kind, NUMBER_DEPTH))
    if choice == 5:
        return enum_test(draw, scope)
    if choice == 6:
        return ast.Binary(draw(st.sampled_from(("==", "!="))), entity(draw, scope), entity(draw, scope))
    if choice == 7:
        return ast.Binary("in", entity(draw, scope), must_read(draw, scope, "set"))
    if choice == 8:
        items = tuple(entity(draw, scope) for _ in range(draw(st.integers(0, 3))))
        return ast.Binary("in", entity(draw, scope, literal=False), ast.SetLiteral(items))
    if choice == 9:
        needle = ast.Literal(draw(TEXT)) if draw(st.booleans()) else entity(draw, scope, literal=False)
        return ast.Call("contains", (must_read(draw, scope, "text"), needle))
    if choice == 10:
        return ast.Call("matches", (must_read(draw, scope, "text"), regex(draw)[0]))
    if choice == 11:
        op = draw(st.sampled_from(("==", "!=")))
        return ast.Binary(op, must_read(draw, scope, "set"), must_read(draw, scope, "set"))
    # Comparisons nest only through parentheses, which the printer must add.
    return ast.Binary("==", boolean(draw, scope, depth - 1), boolean(draw, scope, depth - 1))


def episode(draw: st.DrawFn, scope: Scope, depth: int) -> ast.Expr:
    """A capability's `needed`/`present`: facts only inside one aggregate."""
    choice = draw(st.sampled_from(range(5) if depth > 0 else (0, 1, 2)))
    if choice == 0:
        return ast.Literal(draw(st.booleans()))
    if choice == 1:
        return ast.Call(draw(st.sampled_from(("any", "all"))), (boolean(draw, scope, 2),))
    if choice == 2:
        count = ast.Call("count", (boolean(draw, scope, 2),))
        return ast.Binary(draw(st.sampled_from((">=", ">", "=="))), count, ast.Literal(draw(st.integers(0, 5))))
    if choice == 3:
        return ast.Unary("not", episode(draw, scope, depth - 1))
    op = draw(st.sampled_from(("and", "or")))
    return ast.Binary(op, episode(draw, scope, depth - 1), episode(draw, scope, depth - 1))


# ---------------------------------------------------------------------------------------------- declarations


def binds(draw: st.DrawFn, enums: tuple[tuple[str, ...], ...]) -> list[ast.Bind]:
    out = []
    for bind_name in draw(names("b_", 0, 4)):
        kind = draw(st.sampled_from(("entity", "int", "float", "bool", "enum")))
        type_ = type_ref(draw, kind, enums)
        pattern, groups = regex(draw, min_groups=1)
        value: ast.Expr = ast.Call("match", (ast.Name("instruction"), pattern,
                                             ast.Literal(draw(st.integers(0, groups)))))
        if draw(st.booleans()):
            value = ast.Call("lower", (value,))
        if draw(st.booleans()):
            literal = {
                "entity": TEXT,
                "int": st.integers(0, 10**6),
                "float": st.one_of(FLOATS, st.integers(0, 100)),
                "bool": st.booleans(),
                "enum": st.sampled_from(type_.args or ("x",)),
            }[kind]
            value = ast.Literal(draw(literal))
            if kind in ("int", "float") and draw(st.booleans()):
                value = ast.Unary("-", value)  # `bind n: int = -2`
        out.append(ast.Bind(bind_name, type_, value))
    return out


def rubric(draw: st.DrawFn, rubric_name: str, schema: ast.Schema) -> ast.Rubric:
    bind_items = binds(draw, Scope.of(schema, {}).enums)
    scope = Scope.of(schema, {b.name: b.type for b in bind_items})
    items: list[ast.RubricItem] = [
        ast.Operator(draw(st.sampled_from(ast.CATEGORIES)), op_name, draw(TEXT),
                     boolean(draw, scope, draw(st.integers(1, 3))))
        for op_name in draw(names("o_", 1, 6))
    ]
    categories = draw(st.lists(st.sampled_from(ast.CATEGORIES), unique=True, max_size=3))
    if categories:
        # Invalidity's budget counts by its magnitude, so a negative one is allowed; the others are >= 0.
        entries = [ast.BudgetEntry(c, draw(BUDGETS) * (-1 if c == "invalidity" else 1)) for c in categories]
        items.append(ast.Budget(tuple(entries)))
    for key in draw(st.lists(st.sampled_from(("lambda", "gamma")), unique=True)):
        items.append(ast.Setting(key, draw(UNIT)))
    if draw(st.booleans()):
        items.append(ast.StepScale(draw(st.sampled_from(STEP_SCALES))))
    if draw(st.booleans()):
        makers = (
            lambda: must_read(draw, scope, "entity"),
            lambda: must_read(draw, scope, "set"),
            lambda: number(draw, scope, "int", NUMBER_DEPTH),
            lambda: boolean(draw, scope, 1),
        )
        keys = tuple(draw(st.sampled_from(makers))() for _ in range(draw(st.integers(1, 3))))
        items.append(ast.Context(keys))
    # Bindings come first, since an operator reads only the bindings above it; the rest may come in any order.
    return ast.Rubric(rubric_name, schema.name, tuple(bind_items) + tuple(draw(st.permutations(items))))


def capability(draw: st.DrawFn, capability_name: str, schema: ast.Schema) -> ast.Capability:
    scope = Scope.of(schema, {})
    return ast.Capability(capability_name, draw(TEXT), schema.name, episode(draw, scope, 2), episode(draw, scope, 2))


@st.composite
def rubric_modules(draw: st.DrawFn) -> ast.Module:
    schema = ast.Schema("s_main", field_decls(draw, "f_"), field_decls(draw, "g_"))
    decls: list[ast.Decl] = [schema]
    decls += [rubric(draw, f"r_{i}", schema) for i in range(draw(st.integers(1, 2)))]
    decls += [capability(draw, f"c_{i}", schema) for i in range(draw(st.integers(0, 2)))]
    return ast.Module(tuple(decls))


# ---------------------------------------------------------------------------------------------- environments

_NAME = name("v_").map(ast.Name)
_PARAM = name("p_").map(ast.Param)
_COLUMN = name("c_")
_TABLE = name("t_")
# Untyped row expressions, what a `where`, `require`, `set`, `report` or template may hold.
ENV_LEAF = st.one_of(
    _NAME,
    _PARAM,
    st.builds(ast.Attr, _NAME, _COLUMN),
    st.builds(lambda t, k, c: ast.Attr(ast.Index(ast.Name(t), k), c), _TABLE, _PARAM, _COLUMN),
    INTS.map(ast.Literal),
)
ENV_EXPR = st.recursive(
    st.builds(ast.Binary, st.sampled_from(("==", "!=", "<", ">=")), ENV_LEAF, ENV_LEAF),
    lambda inner: st.builds(ast.Binary, st.sampled_from(("and", "or")), inner, inner)
    | st.builds(ast.Unary, st.just("not"), inner),
    max_leaves=4,
)
GENERATOR = st.one_of(
    st.sampled_from(("key", "name", "city", "date", "bool")).map(ast.Generator),
    st.tuples(st.integers(-100, 0), st.integers(0, 100)).map(lambda r: ast.Generator("int", r)),
    st.tuples(FLOATS, FLOATS).map(lambda r: ast.Generator("float", r)),
    names("e_", 1, 3).map(lambda members: ast.Generator("enum", tuple(members))),
    _TABLE.map(lambda t: ast.Generator("ref", (t,))),
)


@st.composite
def templates(draw: st.DrawFn) -> ast.Template:
    """Text and `{expr}` parts as the parser builds them: no empty text, no two text parts in a row."""
    parts: list[str | ast.Expr] = []
    for _ in range(draw(st.integers(0, 4))):
        if (parts and isinstance(parts[-1], str)) or draw(st.booleans()):
            parts.append(draw(ENV_LEAF))
        else:
            parts.append(draw(st.text(TEXT_CHARS, min_size=1, max_size=8)))
    return ast.Template(tuple(parts))


_WHERE = st.none() | ENV_EXPR
_ASSIGN = st.builds(ast.Assign, _TABLE, ENV_LEAF, _COLUMN, ENV_LEAF)
_BODY = st.one_of(
    st.builds(ast.Query, _TABLE, _WHERE),
    st.builds(
        ast.Mutation,
        st.lists(st.builds(ast.Require, ENV_EXPR, templates()), max_size=2).map(tuple),
        st.lists(_ASSIGN, min_size=1, max_size=2).map(tuple),
    ),
)
_TOOL_PARAM = st.builds(ast.ToolParam, name("p_"), st.sampled_from(("key", "name", "int")).map(ast.TypeRef))
_CALL = st.builds(ast.SolutionCall, name("u_"), st.lists(ENV_LEAF, max_size=2).map(tuple))
_SCORE = st.sampled_from(("state", "report")).map(ast.Score)
_REWARD = _SCORE | st.builds(lambda w, s: ast.Binary("+", ast.Binary("*", ast.Literal(w), s), ast.Literal(0.5)),
                             UNIT, _SCORE)


@st.composite
def environments(draw: st.DrawFn, env_name: str) -> ast.Environment:
    tables = [
        ast.Table(t, tuple(ast.Column(c, draw(GENERATOR)) for c in draw(names("c_", 1, 4))), 1,
                  draw(st.integers(1, 50)))
        for t in draw(names("t_", 1, 2))
    ]
    picks = st.builds(ast.Pick, st.sampled_from([t.name for t in tables]), _WHERE)
    lets = [ast.Let(v, draw(picks | ENV_EXPR)) for v in draw(names("v_", 0, 2))]
    tools = [ast.Tool(n, tuple(draw(st.lists(_TOOL_PARAM, max_size=2))), draw(_BODY)) for n in draw(names("u_", 0, 3))]
    items: list[ast.EnvItem] = [ast.EnvCapability("cap"), *tables, *lets, ast.Task(draw(templates())), *tools]
    if draw(st.booleans()):
        items.append(ast.Hint(draw(TEXT)))
    items.append(ast.Solution(tuple(draw(st.lists(_CALL, min_size=1, max_size=3)))))
    items.append(ast.Report(tuple(draw(st.lists(ENV_LEAF, min_size=1, max_size=2)))))
    items.append(ast.Reward(draw(_REWARD)))
    return ast.Environment(env_name, draw(TEXT), tuple(items))


@st.composite
def modules(draw: st.DrawFn) -> ast.Module:
    rubrics = draw(rubric_modules())
    envs = tuple(draw(environments(f"n_{i}")) for i in range(draw(st.integers(0, 2))))
    return ast.Module(rubrics.decls + envs)


# ---------------------------------------------------------------------------------------------- properties


@pytest.mark.slow
@SETTINGS
@given(modules())
def test_print_then_parse_gives_the_same_tree_and_the_checker_accepts_it(module: ast.Module) -> None:
    text = print_module(module)
    parsed = parse(text, "printed.rubric")
    assert parsed == module, text
    # Environments are left to their own checker's tests: these are untyped, drawn only for the round trip.
    typed = ast.Module(tuple(d for d in parsed.decls if not isinstance(d, ast.Environment)), "printed.rubric", text)
    checked = check(typed)
    rubrics = [d for d in module.decls if isinstance(d, ast.Rubric)]
    assert set(checked.rubrics) == {r.name for r in rubrics}
    for decl in rubrics:
        operators = [i.name for i in decl.items if isinstance(i, ast.Operator)]
        assert [o.name for o in checked.rubrics[decl.name].operators] == operators


def _parse_and_check(text: str) -> None:
    try:
        check(parse(text, "fuzz.rubric"))
    except RubricError as error:
        assert error.diagnostics and all(d.message for d in error.diagnostics)
        str(error)  # formatting must not fail either


def _padded(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return strategy.map(lambda s: f" {s} ")


# Terminals whose regexes make poor samples: short values, close to what people write, with some wrong ones.
_FUZZ_NAME = (st.sampled_from(["a", "target", "visible", "take", "instruction", "match", "count", "any", "key",
                               "users", "state", "set", "in", "where", "x_1"])
              | st.from_regex(r"[A-Za-z_]\w{0,6}", fullmatch=True))
_FUZZ_TERMINALS = {
    "NAME": _padded(_FUZZ_NAME),
    "PARAM": _padded(_FUZZ_NAME.map(lambda n: "$" + n)),
    "STRING": _padded(st.text(st.sampled_from('ab {}\\"é'), max_size=8).map(
        lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"')),
    "REGEX": _padded(st.sampled_from(["/a/", r"/(\w+)/", "/x(y/", "/[/i", r"/a\/b/i", "/(?P<n>a)/", r"/\pN/"])),
    "INT": _padded(st.sampled_from(["0", "1", "42", "9223372036854775807", "9223372036854775808", "1" + "0" * 30])),
    "FLOAT": _padded(st.sampled_from(["0.5", "1.0", "1e3", "2.5E-2", "1e999"])),
    "COMMENT": st.just(" # note\n"),
}


def _fuzz_sources() -> st.SearchStrategy[str]:
    # Built here rather than loaded from the parser cache: Hypothesis reads the analysed grammar, which a cached
    # parser leaves out.
    text = resources.files("tracec.grammars").joinpath("rubric.lark").read_text(encoding="utf-8")
    grammar = lark.Lark(text, parser="lalr", start=["start", "expr"])
    # Keywords and punctuation padded with spaces, so a drawn token list lexes as the tokens it was drawn as.
    words = {t.name: st.just(f" {t.pattern.value} ") for t in grammar.terminals if t.pattern.type == "str"}
    return from_lark(grammar, start="start", explicit={**words, **_FUZZ_TERMINALS})


@pytest.mark.slow
@SETTINGS
@given(st.deferred(_fuzz_sources))
def test_grammar_fuzz_fails_only_with_located_errors(text: str) -> None:
    _parse_and_check(text)


EXAMPLE_SOURCES = sorted([*REPO.glob("examples/**/*.rubric"), *REPO.glob("tests/golden/ok/*.rubric")])
_MUTATION_CHARS = st.sampled_from(list('{}()[]"/\\#$.:,;=<>!&|-+*0123456789aezZ_ \n\t\r\x00é\u2028'))


@st.composite
def mutated_sources(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(EXAMPLE_SOURCES)).read_text()
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(("insert", "delete", "replace")))
        char = draw(_MUTATION_CHARS)
        keep = at if edit == "insert" else at + 1
        text = text[:at] + ("" if edit == "delete" else char) + text[keep:]
    return text


@SETTINGS
@given(mutated_sources())
def test_mutated_examples_fail_only_with_located_errors(text: str) -> None:
    _parse_and_check(text)


@pytest.mark.parametrize("path", EXAMPLE_SOURCES, ids=lambda p: p.name)
def test_every_shipped_source_prints_and_parses_back_to_itself(path: Path) -> None:
    """The fuzz mutates these; unmutated, each one is a fixed point of print and parse, and still checks."""
    module = parse(path.read_text(), path.name)
    printed = print_module(module)
    assert parse(printed, path.name) == module
    check(parse(printed, path.name))


# ------------------------------------------------------------------------------------- the checker and compiler agree


def _programs(module: ast.Module) -> list[KernelProgram]:
    """The kernel programs of every rubric and capability of a checked module (what the compiler makes of it)."""
    text = print_module(module)
    typed = ast.Module(tuple(d for d in parse(text, "printed.rubric").decls if not isinstance(d, ast.Environment)),
                       "printed.rubric", text)
    checked = check(typed)
    programs = [compile_rubric(r).program for r in checked.rubrics.values()]
    return programs + [compile_capability(c).program for c in checked.capabilities.values()]


def random_columns(specs: tuple[ColumnSpec, ...], n: int, seed: int) -> dict[str, Column]:
    """Columns for a program: ~20% missing, garbage (even NaN) behind missing flags, extreme numbers often."""
    rng = np.random.default_rng(seed)
    pool = np.array(sorted({entity_id(x) for x in ("a", "b", "", "é")} | {-(2**63), 2**63 - 1}), dtype=np.int64)
    ints = np.array([*EXTREME_INTS, *(-x for x in EXTREME_INTS), -(2**63), -7, 5], dtype=np.int64)
    floats = np.array([*EXTREME_FLOATS, *(-x for x in EXTREME_FLOATS), -0.0, 1.5], dtype=np.float64)
    columns = {}
    for spec in specs:
        known = (rng.random(n) > 0.2).astype(np.uint8)
        kind = spec.type.kind
        if kind == "set":
            sizes = rng.integers(0, 4, n)
            rows = [np.unique(rng.choice(pool, size)) for size in sizes]
            offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
            columns[spec.name] = Column(np.concatenate([np.zeros(0, np.int64), *rows]), known, offsets)
            continue
        if kind == "bool":
            values: np.ndarray = rng.integers(0, 2, n).astype(np.uint8)
        elif kind == "int":
            values = np.where(rng.random(n) < 0.5, rng.choice(ints, n), rng.integers(-5, 6, n))
        elif kind == "float":
            values = np.where(known == 1, np.where(rng.random(n) < 0.6, rng.choice(floats, n), rng.normal(0, 5, n)),
                              np.nan)
        elif kind == "enum":
            values = rng.integers(0, len(spec.type.members), n)
        else:
            values = rng.choice(pool, n)
        columns[spec.name] = Column(values, known)
    return columns


@SETTINGS
@given(rubric_modules(), st.integers(0, 2**32 - 1))
def test_what_the_checker_accepts_compiles_and_the_generated_kernels_agree(module: ast.Module, seed: int) -> None:
    """Every well-typed module lowers, passes every pass and becomes Numba and C source; the generated source, run
    as plain Python, equals the interpreter on extreme facts (the compiled kernels: the slow test below)."""
    for program in _programs(module):
        c_backend.generate_source(program)
        n = seed % 9
        columns = random_columns(program.columns, n, seed)
        expected = interp.run(program, columns, n)
        got = numba_backend.run_unjitted(program, columns, n)
        np.testing.assert_array_equal(got[0], expected[0])
        if expected[1] is not None:
            assert got[1] is not None
            np.testing.assert_array_equal(got[1].hash, expected[1].hash)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rubric_modules(), st.integers(0, 2**32 - 1))
def test_what_the_checker_accepts_compiles_on_every_backend(module: ast.Module, seed: int) -> None:
    for program in _programs(module)[:2]:
        columns = random_columns(program.columns, 12, seed)
        expected = interp.run(program, columns, 12)
        for backend in ("numba", "c"):
            fired, keys = compile_kernel(program, backend, None).run(columns, 12)
            np.testing.assert_array_equal(fired, expected[0])
            if expected[1] is not None:
                assert keys is not None
                np.testing.assert_array_equal(keys.hash, expected[1].hash)
