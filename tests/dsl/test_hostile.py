"""Hostile and broken `.rubric` sources: each one is rejected with a located `file:line:col` error, never another
exception, through the functions the command line calls (`parse_file`, `check`, the compiler, `load_rubric`); at the
stated limits (MAX_DEPTH levels of nesting, MAX_TOKENS tokens) what is accepted compiles on every backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracec.compiler import interp, numba_backend
from tracec.compiler.backends import compile_kernel
from tracec.compiler.load import load_rubric
from tracec.compiler.pipeline import compile_rubric
from tracec.dsl.check import check
from tracec.dsl.errors import NOWHERE, RubricError
from tracec.dsl.parse import parse, parse_file
from tracec.dsl.syntax import MAX_DEPTH, MAX_TOKENS
from tracec.runtime.facts.fact_batch import Column

REPO = Path(__file__).resolve().parents[2]
HOUSEHOLD = (REPO / "examples" / "household.rubric").read_bytes()
SCHEMA = "schema s {\n  state { g: int  bag: set(entity) }\n  action { a: bool  obj: entity }\n}\n"


def rubric(body: str) -> str:
    return SCHEMA + f'rubric r for s {{\n  evidence e "e": {body}\n}}\n'


def rejected(path: Path) -> RubricError:
    """The located error that parsing, checking and compiling the file ends in."""
    with pytest.raises(RubricError) as caught:
        checked = check(parse_file(str(path)))
        for r in checked.rubrics.values():
            compile_rubric(r)
    error = caught.value
    for diagnostic in error.diagnostics:
        assert diagnostic.loc != NOWHERE and diagnostic.loc.line >= 1 and diagnostic.loc.column >= 1
        assert diagnostic.path == str(path)
    assert str(path) in error.format()
    return error


def write(tmp_path: Path, data: bytes | str, name: str = "hostile.rubric") -> Path:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def test_a_file_that_is_not_utf8_is_located_at_its_byte(tmp_path):
    path = write(tmp_path, b"schema s {\n  state { x: int }\n  action { a: bo\xffol }\n}\n")
    (diagnostic,) = rejected(path).diagnostics
    assert (diagnostic.loc.line, diagnostic.loc.column) == (3, 17)
    assert "not UTF-8 text: byte 0xff" in diagnostic.message
    assert diagnostic.format().splitlines()[1:] == ["      action { a: bo\ufffdol }", "                    ^"]


def test_a_byte_order_mark_is_no_error(tmp_path):
    path = write(tmp_path, b"\xef\xbb\xbf" + HOUSEHOLD)
    assert parse_file(str(path)) == parse(HOUSEHOLD.decode("utf-8"))


def test_a_nul_byte_is_an_unexpected_character(tmp_path):
    at = HOUSEHOLD.index(b"evidence")
    path = write(tmp_path, HOUSEHOLD[:at] + b"\x00" + HOUSEHOLD[at:])
    (diagnostic,) = rejected(path).diagnostics
    line = HOUSEHOLD[:at].count(b"\n") + 1
    assert diagnostic.loc.line == line and "unexpected character `\\x00`" in diagnostic.message


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_random_bytes_fail_only_with_located_errors(tmp_path, data):
    path = write(tmp_path, data)
    try:
        check(parse_file(str(path)))
    except RubricError as error:
        assert all(d.loc != NOWHERE for d in error.diagnostics) and error.format()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, len(HOUSEHOLD)), st.binary(min_size=1, max_size=4))
def test_bytes_spliced_into_a_rubric_fail_only_with_located_errors(tmp_path, at, junk):
    path = write(tmp_path, HOUSEHOLD[:at] + junk + HOUSEHOLD[at:])
    try:
        for r in check(parse_file(str(path))).rubrics.values():
            compile_rubric(r)
    except RubricError as error:
        assert all(d.loc != NOWHERE for d in error.diagnostics) and error.format()


@pytest.mark.parametrize("joiner, tail", [(" and ", ""), (" + ", " > 0")])
def test_twenty_thousand_terms_are_a_stated_limit(tmp_path, joiner, tail):
    term = "act.a" if joiner == " and " else "next.g"
    path = write(tmp_path, rubric(joiner.join([term] * 20_000) + tail))
    (diagnostic,) = rejected(path).diagnostics
    assert f"more than {MAX_TOKENS:,} tokens" in diagnostic.message and diagnostic.loc.line == 6
    assert len(diagnostic.format().splitlines()[1]) < 140  # a window of the 200,000-character line, not all of it


DEEP = {
    "not": lambda n: "not " * n + "act.a",
    "minus": lambda n: "-" * (n - 1) + "next.g > 0",
    "abs": lambda n: "abs(" * (n - 1) + "next.g" + ")" * (n - 1) + " > 0",
    "and": lambda n: " and ".join(["act.a"] * (n + 1)),
    "or in parentheses": lambda n: "(" * n + " or ".join(["act.a"] * (n + 1)) + ")" * n,
}


@pytest.mark.parametrize("shape", DEEP)
def test_nesting_beyond_the_limit_is_located(tmp_path, shape):
    path = write(tmp_path, rubric(DEEP[shape](MAX_DEPTH + 1)))
    (diagnostic,) = rejected(path).diagnostics
    assert f"nests more than {MAX_DEPTH} levels deep" in diagnostic.message and diagnostic.loc.line == 6


@pytest.mark.parametrize("shape", DEEP)
def test_nesting_at_the_limit_compiles_and_runs(shape):
    compiled = load_rubric(rubric(DEEP[shape](MAX_DEPTH)), "deep.rubric")
    program = compiled.program
    n = 3
    columns = {"act.a": Column(np.array([1, 0, 1], np.uint8), np.array([1, 1, 0], np.uint8)),
               "next.g": Column(np.array([5, -(2**63), 0]), np.ones(n, np.uint8))}
    expected = interp.run(program, columns, n)[0]
    np.testing.assert_array_equal(numba_backend.run_unjitted(program, columns, n)[0], expected)


@pytest.mark.slow
def test_the_deepest_expressions_compile_on_numba_and_c():
    operators = "\n".join(f'  evidence e{i} "": {make(MAX_DEPTH)}' for i, make in enumerate(DEEP.values()))
    compiled = load_rubric(SCHEMA + f"rubric r for s {{\n{operators}\n}}\n", "deep.rubric")
    columns = {"act.a": Column(np.array([1, 0], np.uint8), np.ones(2, np.uint8)),
               "next.g": Column(np.array([5, -3]), np.ones(2, np.uint8))}
    expected = interp.run(compiled.program, columns, 2)[0]
    for backend in ("numba", "c"):
        np.testing.assert_array_equal(compile_kernel(compiled.program, backend, None).run(columns, 2)[0], expected)


def test_a_set_literal_of_many_items_lowers_to_a_shallow_tree():
    items = ", ".join(f'"e{i}"' for i in range(4_000))
    compiled = load_rubric(rubric(f"act.obj in {{{items}}}"), "wide.rubric")
    depth, stack = 0, [(compiled.program.operators[0], 1)]
    while stack:
        node, level = stack.pop()
        depth = max(depth, level)
        stack.extend((arg, level + 1) for arg in node.args)
    assert depth <= 20
    numba_backend.generate_source(compiled.program)  # every pass got through it


@pytest.mark.parametrize("breaker", ["\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_a_diagnostic_quotes_the_line_the_parser_counted(breaker):
    """Python's splitlines ends a line at each of these, the parser only at \\n: the quoted line is the parser's."""
    text = SCHEMA + f"# a comment with a {breaker} in it\n" + 'rubric r for s {\n  evidence e "e": act.b\n}\n'
    with pytest.raises(RubricError) as caught:
        check(parse(text, "lines.rubric"))
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.loc.line == 7 and "unknown field `b`" in diagnostic.message
    _, quoted, caret = diagnostic.format().splitlines()
    assert quoted == '      evidence e "e": act.b' and caret.index("^") == quoted.index("act.b")


@pytest.mark.parametrize("before", ["# a comment with a ", "schema t { state { } action { } }", ""])
def test_a_lone_carriage_return_is_an_error_where_every_reader_puts_it(before):
    """Editors break a line at a lone \\r, the parser would not: the first one is an error at a line and column on
    which all agree, quoting the line as far as it; `\\r\\n` ends a line as `\\n` does."""
    head, tail = SCHEMA.replace("\n", "\r\n") + before, 'rubric r for s {\n  evidence e "e": act.a\n}\n'
    text = head + "\r" + tail
    with pytest.raises(RubricError) as caught:
        parse(text, "cr.rubric")
    (diagnostic,) = caught.value.diagnostics
    assert (diagnostic.loc.line, diagnostic.loc.column) == (5, len(before) + 1)
    head_line = (f"cr.rubric:5:{len(before) + 1}: error: a carriage return (\\r) not followed by a newline; lines "
                 "end with \\n or \\r\\n")
    assert diagnostic.format().splitlines() == [head_line, f"    {before}\ufffd", "    " + " " * len(before) + "^"]
    assert parse(head + "\r\n" + tail, "crlf.rubric").decls


def test_a_lone_carriage_return_before_a_byte_that_is_not_utf8_comes_first(tmp_path):
    path = write(tmp_path, b"schema s {\r  state { x: int }\n  action { a: bo\xffol }\n}\n")
    (diagnostic,) = rejected(path).diagnostics
    assert (diagnostic.loc.line, diagnostic.loc.column) == (1, 11) and "carriage return" in diagnostic.message
    path = write(tmp_path, b"schema s {\n  state { x: int }\n  action { a: bo\xffol }\r}\n")
    (diagnostic,) = rejected(path).diagnostics
    assert diagnostic.format().splitlines()[1:] == ["      action { a: bo\ufffdol }", "                    ^"]


def test_a_stray_control_character_is_shown_in_its_column():
    with pytest.raises(RubricError) as caught:
        parse(SCHEMA + "rubric r for s {\n\tevidence e \"e\":\x0b act.a\n}\n", "ctl.rubric")
    _, quoted, caret = caught.value.diagnostics[0].format().splitlines()
    assert quoted == '     evidence e "e":\ufffd act.a' and quoted[caret.index("^")] == "\ufffd"
