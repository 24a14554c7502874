"""The grammar's LALR parser, and its rejections as located messages.

`parse_tree` runs Lark (LALR, strict, positions) and turns whatever it rejects into a `ParseError` with
file:line:col, a caret and what was expected instead, in the language's own words: a chained comparison, an
unterminated string or regex, `&` for `and`. `tracec.dsl.parse` builds the syntax tree from what it returns.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import sys
from importlib import resources
from pathlib import Path

import lark
from lark import Token
from tracec.dsl.errors import Diagnostic, Loc, ParseError, Source, printable

from tracec.atomic import atomic_open
from tracec.cache_dir import cache_root

# Readable names for the grammar's terminals in "expected ..." messages.
_TERMINAL_NAMES = {
    "NAME": "a name",
    "PARAM": "a `$parameter`",
    "STRING": "a string",
    "REGEX": "a regex",
    "INT": "an integer",
    "FLOAT": "a decimal number",
    "$END": "end of file",
}


_OPTIONS = {"parser": "lalr", "strict": True, "propagate_positions": True, "maybe_placeholders": True,
            "start": ["start", "expr"]}


@functools.cache
def lark_parser() -> lark.Lark:
    """The grammar's parser, built once per process. Its tables are cached on disk (`cached_parser`): the install
    saves them beside the grammar (`python -m tracec.dsl.syntax`, run by `make venv`), so that a process with an
    empty cache folder does not build them; otherwise they are built once into the `parser` folder of tracec's cache
    ($TRACEC_CACHE_DIR, else ~/.cache/tracec)."""
    return cached_parser(_grammar(), cache_root(os.environ) / "parser", installed=_installed_folder())


def _grammar() -> str:
    return resources.files("tracec.grammars").joinpath("rubric.lark").read_text(encoding="utf-8")


def _installed_folder() -> Path:
    """Where the install keeps the parser's tables: the grammar's own bytecode-cache folder, as Python does."""
    return Path(str(resources.files("tracec.grammars"))) / "__pycache__"


def cached_parser(grammar: str, folder: Path, installed: Path | None = None) -> lark.Lark:
    """Lark's parser of `grammar`, loaded from `installed` or `folder` when a build of this grammar by this Lark and
    Python is there (building costs a few hundred ms, loading a few), else built and saved in `folder`, atomically.
    A folder that cannot be read or written, or a damaged file, only costs the build."""
    name = _table_name(grammar)
    for candidate in ([installed] if installed else []) + [folder]:
        # Absent, unreadable, truncated or foreign: try the next, then build it.
        with contextlib.suppress(Exception), open(candidate / name, "rb") as handle:
            return lark.Lark.load(handle)
    parser = lark.Lark(grammar, **_OPTIONS)
    # A read-only home or cache folder: the parser is only built again next time.
    with contextlib.suppress(OSError), atomic_open(folder / name, "wb") as handle:
        parser.save(handle)
    return parser


def _table_name(grammar: str) -> str:
    key = hashlib.sha256("\0".join([grammar, lark.__version__, sys.version, repr(sorted(_OPTIONS.items()))])
                         .encode("utf-8")).hexdigest()[:32]
    return f"rubric-{key}.lark.pickle"


# Every pass walks expressions recursively, a few Python frames a level: past this depth it would run out of stack.
MAX_DEPTH = 100
# Lark reads some 40,000 tokens a second: a file of at most this many parses in about a second.
MAX_TOKENS = 50_000
# Roughly the grammar's tokens: strings, words and numbers, one symbol at a time; comments and whitespace skipped.
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|#[^\n]*|\w+|\S')
# The grammar rules that nest expressions (the tree of `a and b and c` is two `and_` deep).
_NESTING = frozenset(["or_", "and_", "not_", "compare", "in_", "arith", "neg", "attr", "index", "call", "set_literal"])


def parse_tree(text: str, start: str, source: Source) -> lark.Tree:
    """Lark's tree of `text` from the grammar rule `start`; a ParseError where the grammar rejects it or an
    expression nests deeper than MAX_DEPTH."""
    check_line_ends(text, source)
    _check_size(text, source)
    try:
        tree = lark_parser().parse(text, start=start)
    except lark.exceptions.UnexpectedInput as error:
        raise ParseError([source.diagnostic(*describe(error, text))]) from None
    too_deep = _too_deep(tree)
    if too_deep is not None:
        raise ParseError([source.diagnostic(too_deep, f"this expression nests more than {MAX_DEPTH} levels deep (a "
                                            "chain `a and b and ...` is one level per operator); split it")])
    return tree


_LONE_CR = re.compile(r"\r(?!\n)")


def check_line_ends(text: str, source: Source) -> None:
    """A ParseError at the first `\\r` that does not start a `\\r\\n`. Editors and Python's `splitlines` break a
    line there, Lark does not (to it `\\r` is whitespace, and a comment runs on past it), so after it the line
    numbers of a message and of the reader's editor would differ. Up to it every reader counts alike: the message
    names its line and column in any reader's terms, and quotes that line as far as the `\\r`."""
    match = _LONE_CR.search(text)
    if match is None:
        return
    start = match.start()
    line_start = text.rfind("\n", 0, start) + 1
    loc = Loc.point(text.count("\n", 0, start) + 1, start - line_start + 1)
    message = "a carriage return (\\r) not followed by a newline; lines end with \\n or \\r\\n"
    raise ParseError([Diagnostic(source.path, loc, message, printable(text[line_start:start]) + "\ufffd")])


def _check_size(text: str, source: Source) -> None:
    """A ParseError at the token past MAX_TOKENS: a longer file would keep the parser for seconds."""
    count = 0
    for match in _TOKEN.finditer(text):
        if match.group().startswith("#"):
            continue
        count += 1
        if count > MAX_TOKENS:
            start = match.start()
            line = text.count("\n", 0, start) + 1
            column = start - (text.rfind("\n", 0, start) + 1) + 1
            message = f"the source has more than {MAX_TOKENS:,} tokens (names, numbers, strings, symbols); split it"
            raise ParseError([source.diagnostic(Loc.point(line, column), message)])


def _too_deep(tree: lark.Tree) -> Loc | None:
    """Where an expression first nests deeper than MAX_DEPTH, found without recursion (the tree may be as deep as
    the source is long)."""
    stack: list[tuple[lark.Tree, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if node.data in _NESTING:
            depth += 1
            if depth > MAX_DEPTH:
                meta = node.meta
                return Loc.point(meta.line, meta.column) if not meta.empty else Loc.point(1, 1)
        stack.extend((child, depth) for child in node.children if isinstance(child, lark.Tree))
    return None


END_OF_FILE = "unexpected end of file"  # how a message about the text's end begins


def describe(error: lark.exceptions.UnexpectedInput, text: str) -> tuple[Loc, str]:
    """Where Lark stopped in `text`, and why, for a person."""
    line, column = max(error.line, 1), max(error.column, 1)
    if isinstance(error, lark.exceptions.UnexpectedCharacters):
        assert error.pos_in_stream is not None, "Lark sets the position of an unexpected character"
        char = text[error.pos_in_stream]
        if char == '"':
            return Loc(line, column, line, len(text.split("\n")[line - 1]) + 1), "unterminated string"
        if char == "/":
            return Loc.point(line, column), "unterminated regex (a regex is written /.../ on one line)"
        if char in _CHARACTER_HINTS:
            return Loc.point(line, column), f"unexpected character `{char}`; {_CHARACTER_HINTS[char]}"
        shown = repr(char)[1:-1]
        return Loc.point(line, column), f"unexpected character `{shown}`{_expected(error.allowed)}"
    if isinstance(error, lark.exceptions.UnexpectedToken):
        token = error.token
        if token.value == "/" and "REGEX" in error.expected:
            return Loc.point(line, column), "unterminated regex (a regex is written /.../ on one line)"
        if token.type == "$END":
            return Loc.point(line, column), f"{END_OF_FILE}{_expected(error.expected)}"
        loc = Loc(token.line, token.column, token.end_line or token.line, token.end_column or token.column + 1)
        if token.value in _COMPARISONS and _after_comparison(error):
            return loc, f"comparisons do not chain: write `a < b and b < c`, not `a < b {token.value} c`"
        after_regex = token.start_pos and text[token.start_pos - 1] == "/" and "REGEX" not in error.expected
        if token.type == "NAME" and after_regex:
            return loc, f"unknown regex flag `{token.value}` (the only flag is `i`, as in /abc/i)"
        return loc, f"unexpected `{token.value}`{_expected(error.expected)}"
    return Loc.point(line, column), END_OF_FILE


# Characters other languages use for operators this one spells as words.
_CHARACTER_HINTS = {"&": "write `and`", "|": "write `or`", "!": "write `not` (or `!=` to compare)"}
_COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">=", "in"})


def _after_comparison(error: lark.exceptions.UnexpectedToken) -> bool:
    """Whether the parser had just read `a <op> b` when the token came: a chained comparison."""
    parser = getattr(error, "interactive_parser", None)
    stack = parser.parser_state.value_stack if parser is not None else []
    if len(stack) < 2:
        return False
    operator = stack[-2]
    if isinstance(operator, Token):
        return operator.value == "in"
    return isinstance(operator, lark.Tree) and operator.data == "compare_op"


@functools.cache
def _expression_start() -> frozenset[str]:
    """The terminals that may begin an expression, read off the parser itself."""
    try:
        lark_parser().parse("", start="expr")
    except lark.exceptions.UnexpectedToken as error:
        return frozenset(error.expected)
    raise AssertionError("the empty string parsed as an expression")


def _expected(terminals: set[str] | frozenset[str] | None) -> str:
    if not terminals:
        return ""
    shown = set()
    rest = set(terminals)
    # Listed one by one, the seventeen ways to start an expression drown the message.
    if _expression_start() <= rest:
        rest -= _expression_start()
        shown.add("an expression")
    for name in rest:
        if name in _TERMINAL_NAMES:
            shown.add(_TERMINAL_NAMES[name])
            continue
        pattern = lark_parser().get_terminal(name).pattern
        shown.add(f"`{pattern.value}`" if pattern.type == "str" else name.lower())
    ordered = sorted(shown, key=lambda s: (not s.startswith("`"), s))
    if len(ordered) > 10:
        ordered = ordered[:10] + ["..."]
    return "; expected " + ", ".join(ordered)


if __name__ == "__main__":  # the install step: save the parser's tables beside the grammar
    cached_parser(_grammar(), _installed_folder())
    print(f"tracec: the rubric parser's tables are in {_installed_folder()}")
