"""Located errors: every problem a user can cause is reported as `file:line:col: error: message`, the source line,
and a caret under the span.

One exception type, `RubricError`, carries one or more diagnostics so that semantic passes can report every error
of a file in one go. Subclasses name the phase. Internal bugs are plain exceptions (or asserts), never these.
"""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Loc:
    """A source span, 1-based lines and columns; `end_column` is exclusive."""

    line: int
    column: int
    end_line: int
    end_column: int

    @staticmethod
    def point(line: int, column: int) -> Loc:
        return Loc(line, column, line, column + 1)


NOWHERE = Loc(0, 0, 0, 0)
_QUOTED = 120  # characters of a source line quoted under a message


@dataclass(frozen=True, order=True)
class Diagnostic:
    path: str
    loc: Loc
    message: str
    source_line: str = ""

    def format(self) -> str:
        if self.loc == NOWHERE:
            return f"{self.path}: error: {self.message}"
        head = f"{self.path}:{self.loc.line}:{self.loc.column}: error: {self.message}"
        if not self.source_line:
            return head
        width = 1
        if self.loc.end_line == self.loc.line:
            width = max(1, self.loc.end_column - self.loc.column)
        width = min(width, max(1, len(self.source_line) - self.loc.column + 1), _QUOTED)
        line, column = self.source_line, self.loc.column
        if len(line) > _QUOTED:  # a window around the column, so a minified file does not flood the terminal
            start = max(0, min(column - 1 - _QUOTED // 2, len(line) - _QUOTED))
            line = (("..." if start else "") + line[start:start + _QUOTED]
                    + ("..." if start + _QUOTED < len(line) else ""))
            column = column - start + (3 if start else 0)
        caret = " " * (column - 1) + "^" * width
        return f"{head}\n    {line}\n    {caret}"


class RubricError(Exception):
    """A user error with one or more located diagnostics, sorted by position."""

    def __init__(self, diagnostics: list[Diagnostic]):
        assert diagnostics, "a RubricError needs at least one diagnostic"
        self.diagnostics = sorted(diagnostics, key=lambda d: (d.path, d.loc.line, d.loc.column, d.message))
        super().__init__(self.format())

    def format(self) -> str:
        return "\n".join(d.format() for d in self.diagnostics)


class ParseError(RubricError):
    """The source does not follow the grammar."""


class CheckError(RubricError):
    """The source parses but names, types or declarations are wrong."""


class DataError(RubricError):
    """Trajectory data does not fit the schema (location: file, line, episode, field)."""


class EnvError(RubricError):
    """An environment could not be instantiated (for example, a pick that never finds a row)."""


@dataclass
class Source:
    """A named source text, able to turn a location into a diagnostic."""

    path: str
    text: str

    def line(self, number: int) -> str:
        """Line `number` as the parser counts lines (only `\n` ends one; `splitlines` would also split at `\v`,
        `\f`, `\x85`, U+2028 and others), ready to quote."""
        lines = self.text.split("\n")
        return printable(lines[number - 1]) if 0 < number <= len(lines) else ""

    def diagnostic(self, loc: Loc, message: str) -> Diagnostic:
        return Diagnostic(self.path, loc, message, self.line(loc.line))


def printable(line: str) -> str:
    """A source line to quote under a message: one character for one column, so the caret stays under its
    column; a tab shows as a space, other control characters and line separators as U+FFFD, a closing `\r` goes."""
    line = line.removesuffix("\r")
    return "".join(" " if c == "\t" else "\ufffd" if unicodedata.category(c) in _UNPRINTABLE else c for c in line)


_UNPRINTABLE = frozenset({"Cc", "Zl", "Zp"})


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A suggestion suffix: '; did you mean `visible`?' or a list of what exists."""
    options = sorted(set(candidates))
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    if close:
        return f"; did you mean `{close[0]}`?"
    if not options:
        return ""
    shown = ", ".join(f"`{o}`" for o in options[:12])
    more = ", ..." if len(options) > 12 else ""
    return f"; expected one of {shown}{more}"
