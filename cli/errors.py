"""The errors a command raises to say "the user's mistake" (exit 1) or "arguments that do not fit" (exit 2).

Located problems inside a `.rubric` or trajectory file are `tracec.dsl.errors.RubricError`s, raised by the layers
below; these two are for what only the command line knows: the paths, the options and how they combine.
"""

from __future__ import annotations

EXIT_OK, EXIT_USER, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class UserError(Exception):
    """Exit 1 with `path: error: message` (or `tracec COMMAND: error: message` when no path is to blame)."""

    def __init__(self, message: str, path: object = None):
        super().__init__(message)
        self.message, self.path = message, path

    def format(self, command: str) -> str:
        where = str(self.path) if self.path is not None else f"tracec {command}"
        return f"{where}: error: {self.message}"

    @staticmethod
    def from_os_error(error: OSError, path: object = None) -> UserError:
        """`error` about `path` (the path the user gave; by default the one the error names), in plain words."""
        shown = path if path is not None else error.filename
        reason = error.strerror or str(error)
        return UserError(reason[0].lower() + reason[1:] if reason else "cannot be used", shown)


class UsageError(Exception):
    """Arguments that parse but do not make sense (together): exit 2, like an argparse error."""
