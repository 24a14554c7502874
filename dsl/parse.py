"""Source text to syntax tree: `parse` (a whole `.rubric` file), `parse_expr` (one expression), `parse_file`.

Lark (`tracec.dsl.syntax.parse_tree`) reads the text, anything the grammar rejects a `ParseError` with
file:line:col and a caret; `tracec.dsl.ast_builder.AstBuilder` turns the tree into `tracec.dsl.ast` nodes, and what
it finds wrong (a bad escape, a number outside 64 bits) is raised here as one `ParseError`. A file's bytes become
text in `tracec.dsl.source_file`.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from tracec.dsl import ast
from tracec.dsl.ast_builder import AstBuilder
from tracec.dsl.errors import ParseError, Source
from tracec.dsl.source_file import read_source
from tracec.dsl.syntax import parse_tree


def parse(text: str, path: str = "<string>") -> ast.Module:
    """Parse a whole `.rubric` file."""
    source = Source(path, text)
    with _collector_paused():
        tree = parse_tree(text, "start", source)
        builder = AstBuilder(source)
        decls = builder.transform(tree)
        builder.finish()
    if builder.errors:
        raise ParseError(builder.errors)
    return ast.Module(tuple(decls), path=path, source=text)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector held off while a file is parsed: the parse makes tens of thousands of short-lived,
    acyclic objects, enough to set off a full collection, which in a process that has imported Numba walks some
    100,000 long-lived objects (~80 ms, twice the parse; bench/RESULTS.md, "startup"). Nothing is lost: what the
    parse drops is freed by reference counting, and the collector resumes as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse_expr(text: str, path: str = "<string>") -> ast.Expr:
    """Parse one expression (used by tests)."""
    source = Source(path, text)
    builder = AstBuilder(source)
    expr = builder.transform(parse_tree(text, "expr", source))
    builder.finish()
    if builder.errors:
        raise ParseError(builder.errors)
    return expr


def parse_file(path: str) -> ast.Module:
    """Parse a `.rubric` file (see `read_source` for how its bytes become text)."""
    return parse(read_source(path), path)
