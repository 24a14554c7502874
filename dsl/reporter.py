"""What every checker shares: collecting located errors for one source, and the words no name may take."""

from __future__ import annotations

from tracec.dsl.errors import Diagnostic, Loc, Source

# Words that would read two ways inside an expression; none may name a declaration, field, binding, operator,
# table, column or member. The words that open a declaration or item (`schema`, `tool`, `table`, `task`, ...) are
# keywords only where an item starts, so they stay free as names (a tool-call fact is naturally called `tool`).
RESERVED = frozenset([
    "and", "or", "not", "in", "true", "false", "prev", "next", "act", "state", "report", "where", "pick",
])


class Reporter:
    """Collects every error of a pass, so that a file's problems are reported together."""

    def __init__(self, source: Source):
        self.source = source
        self.errors: list[Diagnostic] = []

    def error(self, loc: Loc, message: str) -> None:
        self.errors.append(self.source.diagnostic(loc, message))

    def name_ok(self, name: str, loc: Loc, what: str) -> None:
        if name in RESERVED:
            article = "an" if what[0] in "aeiou" else "a"
            self.error(loc, f"`{name}` is a reserved word and cannot name {article} {what}")
