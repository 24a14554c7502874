"""A source file's bytes to text: UTF-8, a leading byte-order mark dropped; the first byte that is not UTF-8 is a
`ParseError` at its line and column, with the line shown. A lone `\\r` before that byte is reported
instead (`tracec.dsl.syntax.check_line_ends`): past one, editors and the message would count lines differently.

Used for `.rubric` files (`tracec.dsl.parse.parse_file`) and for the other sources a user writes (the command
line's inputs, TOML settings), so that all of them report a bad byte the same way.
"""

from __future__ import annotations

import re

from tracec.dsl.errors import Diagnostic, Loc, ParseError, Source, printable
from tracec.dsl.syntax import check_line_ends


def read_source(path: str) -> str:
    """The text of a `.rubric` file: UTF-8, a leading byte-order mark dropped. Bytes that are not UTF-8 are a
    ParseError at their line and column; a file that cannot be read raises OSError."""
    with open(path, "rb") as handle:
        return decode_source(handle.read(), path)


_LINE_END = re.compile(rb"\n|\r(?!\n)")


def decode_source(data: bytes, path: str) -> str:
    """The text of a source's bytes (`path` only names it in errors); see the module docstring."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        start = error.start
        # A lone `\r` before the byte comes first: past it, the byte's line would be another in some editors.
        check_line_ends(data[:start].decode("utf-8").removeprefix("\ufeff"), Source(path, ""))
        line_start = data.rfind(b"\n", 0, start) + 1
        line_end = _LINE_END.search(data, start)  # a later lone `\r` ends the line as an editor shows it
        line = data[line_start:None if line_end is None else line_end.start()].decode("utf-8", errors="replace")
        column = len(data[line_start:start].decode("utf-8", errors="replace")) + 1
        loc = Loc.point(data.count(b"\n", 0, start) + 1, column)
        message = f"the file is not UTF-8 text: byte 0x{data[start]:02x} here {error.reason}"
        raise ParseError([Diagnostic(path, loc, message, printable(line))]) from None
