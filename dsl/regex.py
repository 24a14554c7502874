"""Regex literals, compiled with RE2 (linear-time matching, so an LLM-written rubric cannot stall the fact builder).

One place builds RE2 options, so the checker and the fact builder accept exactly the same patterns.
"""

from __future__ import annotations

from typing import Any

import re2


class RegexSyntaxError(ValueError):
    """The pattern is not valid RE2 syntax; the message says why."""


def compile_regex(pattern: str, ignore_case: bool = False) -> Any:
    options = re2.Options()
    options.log_errors = False  # errors are reported by us, with a location, not printed by RE2
    options.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        reason = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
        raise RegexSyntaxError(reason) from None
