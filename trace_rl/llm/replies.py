"""Reading structured answers out of an LLM's reply: JSON in prose or code fences, checked against a JSON Schema.

Models wrap JSON in chatter ("Sure! Here is the result: ...") and in Markdown fences; a strict `json.loads` of the
whole reply fails on both. `find_json` tries, in order, the contents of each fenced block, then every `{` or `[`
in the text as the start of a JSON value (`raw_decode`), and returns the first candidate that parses and, given a
schema, validates (Draft 2020-12, by `jsonschema`). When none does, `ReplyProblem` says what went wrong with the
first candidate (a located JSON syntax error, or the schema errors with their JSON paths), in words that
can go straight back to the model. Nothing is "fixed up": trailing commas or single quotes are reported, not
guessed at, so an accepted reply is exactly what the model wrote.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_SHOWN_ERRORS = 6


class ReplyProblem(Exception):
    """A reply that cannot be used; the message is written for the model that wrote it."""


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every Markdown code fence; an unclosed last fence runs to the end."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def find_json(text: str, schema: dict[str, Any] | None = None) -> Any:
    """The first JSON value in `text` that parses (and validates against `schema`); raises `ReplyProblem`."""
    syntax: str | None = None
    invalid: list[str] | None = None
    for candidate in _candidates(text):
        try:
            value = json.loads(candidate) if not isinstance(candidate, _Decoded) else candidate.value
        except json.JSONDecodeError as error:
            syntax = syntax or f"the JSON does not parse: {error.msg} at line {error.lineno} column {error.colno}"
            continue
        if not isinstance(value, (dict, list)):
            continue
        errors = schema_errors(value, schema) if schema is not None else []
        if not errors:
            return value
        if invalid is None:  # the first candidate is the one the model meant
            invalid = errors
    if invalid is not None:
        shown = "; ".join(invalid[:_SHOWN_ERRORS])
        more = f" (and {len(invalid) - _SHOWN_ERRORS} more)" if len(invalid) > _SHOWN_ERRORS else ""
        raise ReplyProblem(f"the JSON does not match the required shape: {shown}{more}")
    if syntax is not None:
        raise ReplyProblem(syntax)
    raise ReplyProblem("the reply holds no JSON object")


def schema_errors(value: Any, schema: dict[str, Any]) -> list[str]:
    """Every way `value` breaks `schema`, each as `at $.path: what`, in document order."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"at {e.json_path}: {_short(e.message)}" for e in errors]


class _Decoded:
    """A value `raw_decode` already parsed out of running text."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _candidates(text: str) -> list[str | _Decoded]:
    """Fenced blocks, then each top-level JSON value in the running text (values nested in one are not tried
    again), then the first `{` that starts no value, so that a broken object can explain itself."""
    # A fence holding code (```python def f(): ...) is no JSON candidate; its braces are tried below like any.
    found: list[str | _Decoded] = [body for _, body in fenced_blocks(text) if body.lstrip()[:1] in ("{", "[")]
    decoder = json.JSONDecoder()
    broken: str | None = None
    end = 0
    for match in re.finditer(r"[\[{]", text):
        if match.start() < end:
            continue
        try:
            value, end = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            if broken is None and match.group() == "{":
                broken = text[match.start():]
            continue
        found.append(_Decoded(value))
    if broken is not None:
        found.append(broken)
    return found


def _short(message: str, most: int = 160) -> str:
    return message if len(message) <= most else message[: most - 3] + "..."
