"""The agent's tool-call format, shared by every environment that reads agent text.

An agent turn is either a tool call or a plain message to the user. Two spellings of a call are recognised:

- `<action>tool(arg=value, ...)</action>`: values are JSON-ish literals ("double" or 'single' quoted strings,
  numbers, true/false/null, [lists], {objects}); anything else up to the next `,` `)` `]` `}` is a bare word
  and reads as a string, so `<action>get_order_details(order_id=#W2378156)</action>` works. A token that is a
  valid JSON number reads as a number (`zip=02134` stays a string: JSON numbers have no leading zero).
- The JSON function call `{"name": ..., "arguments": {...}}` (also `"parameters"`, and `arguments` given as a
  JSON string), inside `<tool_call>` tags, a ```json fence, or as the whole text.

`parse_tool_call` never raises: it returns a `ToolCall`, a `ToolCallError` with a short message for a call
that is malformed, or `None` for a plain message. A flat call (strings, numbers, literals), the usual turn, is
read by a regex first: exactly what the recursive parser would read, at a third of the cost.
`format_tool_call` writes the `<action>` form, `format_native_call` the native one (Hermes-style `<tool_call>{"name":
..., "arguments": {...}}</tool_call>`, what a model given tools as JSON schemas writes), `format_call` the one of an
environment's `call_format` (`CALL_FORMATS`); all round-trip. A malformed JSON call's error is located
(`<tool_call>: invalid JSON at line 1 column 17: ...`). Left out: several calls in one turn (the first one counts),
positional arguments (an error: calls name their arguments).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

CALL_FORMATS = ("native", "text")  # how an agent is given tools and writes calls: JSON schemas and <tool_call>, or
#   a prose tool list in the system prompt and <action>
DEFAULT_CALL_FORMAT = "native"  # training's, evaluation's and `tracec env`'s unless a setting says otherwise
_MAX_DEPTH = 32
_MAX_LEAF_DEPTH = 8
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_ACTION = re.compile(r"<action>(.*?)(</action>|$)", re.IGNORECASE | re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.IGNORECASE | re.DOTALL)
_FENCE = re.compile(r"```(?:json)?[ \t]*\n?(.*?)```", re.IGNORECASE | re.DOTALL)
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "/": "/", "0": "\0"}
# The usual turn, a flat call `name(key="text", key=12, key=true)`: one regex checks the whole body, a second reads
# the arguments. It takes only what the full parser reads the same way (strings without escapes or control
# characters, JSON numbers with at most 18 digits before the point, literals); the rest goes to the full parser.
_FLAT_ARG = (
    r"([A-Za-z_][A-Za-z0-9_.\-]*)\s*[=:]\s*"
    r"""(?:"([^"\\\x00-\x1f]*)"|'([^'\\]*)'|(-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"""
    r"|(true|false|null|True|False|None))"
)
_FLAT_CALL = re.compile(rf"([A-Za-z_][A-Za-z0-9_.\-]*)\s*\(\s*((?:{_FLAT_ARG}\s*,\s*)*{_FLAT_ARG})?\s*\)")
_FLAT_ARGS = re.compile(rf"{_FLAT_ARG}\s*,?\s*")


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ToolCallError:
    message: str


class _Malformed(Exception):
    """Internal: unwinds the recursive parser; becomes a ToolCallError at the boundary."""


def parse_tool_call(text: str) -> ToolCall | ToolCallError | None:
    """Read one agent turn: its tool call, why that call is malformed, or None for a plain message."""
    if not isinstance(text, str):
        return ToolCallError(message=f"expected text, got {type(text).__name__}")
    try:
        return _parse(text)
    except _Malformed as err:
        return ToolCallError(message=str(err))
    except RecursionError:
        return ToolCallError(message="tool call is nested too deeply")
    except ValueError as err:  # e.g. an integer past Python's 4300-digit conversion limit
        return ToolCallError(message=f"a value in the tool call cannot be read: {err}")


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The `<action>` spelling of a call; values written as JSON so that parsing gives them back unchanged."""
    args = ", ".join(f"{key}={_json_value(value)}" for key, value in arguments.items())
    return f"<action>{name}({args})</action>"


def format_native_call(name: str, arguments: dict[str, Any]) -> str:
    """The native spelling of a call, as Qwen-style templates write it: `<tool_call>` and one JSON object."""
    return f"<tool_call>\n{_json_value({'name': name, 'arguments': arguments})}\n</tool_call>"


def format_call(name: str, arguments: dict[str, Any], call_format: str) -> str:
    """The call in `call_format` (one of `CALL_FORMATS`)."""
    if call_format not in CALL_FORMATS:
        raise ValueError(f"call_format={call_format!r}: expected one of {', '.join(CALL_FORMATS)}")
    return format_native_call(name, arguments) if call_format == "native" else format_tool_call(name, arguments)


def argument_leaves(value: Any, depth: int = 0) -> Iterator[str]:
    """A call argument's values as `args` facts: the leaves of lists and objects, strings as they are, numbers and
    booleans as JSON writes them, nulls dropped. Environments and tau2-bench record `args` this way."""
    if depth > _MAX_LEAF_DEPTH:  # a malformed call may nest arbitrarily deep; no id lives down there
        return
    if isinstance(value, dict):
        for sub in value.values():
            yield from argument_leaves(sub, depth + 1)
    elif isinstance(value, list):
        for sub in value:
            yield from argument_leaves(sub, depth + 1)
    elif isinstance(value, str):
        yield value
    elif value is not None:
        yield json.dumps(value)


def _json_value(value: Any) -> str:
    # `</` only occurs inside JSON strings; `<\/` decodes to the same text and cannot close the tag early
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/")


def render_result(obj: Any) -> str:
    """A tool result as compact, key-sorted JSON: the same object always reads the same to the agent."""
    return _RESULT_ENCODER.encode(obj)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=str)
    return str(obj)


# Built once: `json.dumps` with options builds a new encoder on every call, a fifth of a small result's cost.
# An encoder holds only its options, so sharing it is safe.
_RESULT_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False, default=_jsonable)


def _parse(text: str) -> ToolCall | ToolCallError | None:
    action = _ACTION.search(text)
    if action is not None:
        if not action.group(2):
            raise _Malformed("<action> is not closed with </action>")
        body = action.group(1).strip()
        if body.startswith("{"):
            return _from_json(body, where="<action>")
        flat = _flat_call(body)
        return flat if flat is not None else _ActionParser(body).call()
    tagged = _TOOL_CALL.search(text)
    if tagged is not None:
        if not tagged.group(2):
            raise _Malformed("<tool_call> is not closed with </tool_call>")
        return _from_json(_unfence(tagged.group(1).strip()), where="<tool_call>")
    for fence in _FENCE.finditer(text):
        call = _json_call_or_none(fence.group(1).strip())
        if call is not None:
            return call
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        return _json_call_or_none(stripped)
    return None


def _flat_call(body: str) -> ToolCall | None:
    """The call when `body` is flat (see `_FLAT_CALL`); None sends it to the full parser."""
    flat = _FLAT_CALL.fullmatch(body)
    if flat is None:
        return None
    args: dict[str, Any] = {}
    count = 0
    if flat.start(2) >= 0:
        for match in _FLAT_ARGS.finditer(body, flat.start(2), flat.end(2)):
            key, double, single, number, literal = match.groups()
            count += 1
            if double is not None:
                args[key] = double
            elif single is not None:
                args[key] = single
            elif number is not None:
                value = float(number) if "." in number or "e" in number or "E" in number else int(number)
                if not math.isfinite(value):
                    return None  # the full parser keeps the word
                args[key] = value
            else:
                args[key] = _LITERALS[literal]
    if len(args) != count:
        return None  # a key given twice: the full parser reports where
    return ToolCall(name=flat.group(1), arguments=args)


def _unfence(body: str) -> str:
    fence = _FENCE.fullmatch(body)
    return fence.group(1).strip() if fence else body


def _load_json(body: str, where: str) -> Any:
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        raise _Malformed(f"{where}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    except ValueError as err:
        raise _Malformed(f"{where}: invalid JSON: {err}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _json_call_or_none(body: str) -> ToolCall | None:
    """A fenced or bare JSON object is a call only with the call's keys; other JSON is message text."""
    try:
        obj = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or "name" not in obj or not ({"arguments", "parameters"} & obj.keys()):
        return None
    return _call_from_object(obj, where="JSON call")


def _from_json(body: str, *, where: str) -> ToolCall:
    if not body:
        raise _Malformed(f"empty {where}")
    obj = _load_json(body, where)
    if not isinstance(obj, dict):
        raise _Malformed(f'{where} must hold an object {{"name": ..., "arguments": {{...}}}}')
    return _call_from_object(obj, where=where)


def _call_from_object(obj: dict[str, Any], *, where: str) -> ToolCall:
    name = obj.get("name")
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise _Malformed(f'{where}: "name" must be a tool name, got {json.dumps(name)[:40]}')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI-style calls carry the arguments as a JSON string
        args = _load_json(args, f'{where} "arguments"') if args.strip() else {}
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise _Malformed(f'{where}: "arguments" must be an object')
    return ToolCall(name=name, arguments=args)


class _ActionParser:
    """Recursive descent over `name(key=value, ...)`; error positions are 1-based columns of the body."""

    def __init__(self, body: str) -> None:
        self.text = body
        self.pos = 0

    def call(self) -> ToolCall:
        if not self.text:
            raise _Malformed("empty <action>: expected tool(arg=value, ...)")
        name = self._ident("a tool name")
        self._skip()
        if self.pos == len(self.text):
            return ToolCall(name=name)
        self._expect("(")
        args: dict[str, Any] = {}
        self._skip()
        while not self._peek(")"):
            key = self._ident("an argument name")
            self._skip()
            if not (self._peek("=") or self._peek(":")):
                raise self._error("arguments must be named: tool(key=value)")
            self.pos += 1
            if key in args:
                raise self._error(f"argument `{key}` given twice")
            args[key] = self._value(depth=0, stops=",)")
            self._skip()
            if self._peek(","):
                self.pos += 1
                self._skip()
            elif not self._peek(")"):
                raise self._error("expected `,` or `)` after an argument (quote text with commas or brackets)")
        self.pos += 1
        self._skip()
        if self.pos != len(self.text):
            raise self._error("unexpected text after the closing `)`")
        return ToolCall(name=name, arguments=args)

    def _value(self, *, depth: int, stops: str) -> Any:
        if depth > _MAX_DEPTH:
            raise self._error("value is nested too deeply")
        self._skip()
        if self.pos == len(self.text):
            raise self._error("expected a value")
        char = self.text[self.pos]
        if char == '"':
            return self._json_string()
        if char == "'":
            return self._single_quoted()
        if char == "[":
            return self._list(depth)
        if char == "{":
            return self._object(depth)
        return self._bare(stops)

    def _list(self, depth: int) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        self._skip()
        while not self._peek("]"):
            items.append(self._value(depth=depth + 1, stops=",]"))
            self._skip()
            if self._peek(","):
                self.pos += 1
                self._skip()
            elif not self._peek("]"):
                raise self._error("expected `,` or `]` in a list")
        self.pos += 1
        return items

    def _object(self, depth: int) -> dict[str, Any]:
        self.pos += 1
        obj: dict[str, Any] = {}
        self._skip()
        while not self._peek("}"):
            key = self._value(depth=depth + 1, stops=":=,}")
            if not isinstance(key, str):
                key = json.dumps(key)
            self._skip()
            if not (self._peek(":") or self._peek("=")):
                raise self._error("expected `:` after an object key")
            self.pos += 1
            obj[key] = self._value(depth=depth + 1, stops=",}")
            self._skip()
            if self._peek(","):
                self.pos += 1
                self._skip()
            elif not self._peek("}"):
                raise self._error("expected `,` or `}` in an object")
        self.pos += 1
        return obj

    def _json_string(self) -> str:
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, self.pos)
        except ValueError:
            raise self._error("unterminated or invalid double-quoted string") from None
        self.pos = end
        assert isinstance(value, str)
        return value

    def _single_quoted(self) -> str:
        out: list[str] = []
        index = self.pos + 1
        while index < len(self.text):
            char = self.text[index]
            if char == "\\" and index + 1 < len(self.text):
                nxt = self.text[index + 1]
                out.append(_ESCAPES.get(nxt, "\\" + nxt))
                index += 2
                continue
            if char == "'":
                self.pos = index + 1
                return "".join(out)
            out.append(char)
            index += 1
        raise self._error("unterminated single-quoted string")

    def _bare(self, stops: str) -> Any:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in stops + ")[]{}":
            self.pos += 1
        word = self.text[start : self.pos].strip()
        if not word:
            raise self._error("expected a value")
        if word in _LITERALS:
            return _LITERALS[word]
        if _NUMBER.fullmatch(word):
            number = float(word) if any(c in word for c in ".eE") else int(word)
            if math.isfinite(number):
                return number
        return word

    def _ident(self, what: str) -> str:
        self._skip()
        match = _IDENT.match(self.text, self.pos)
        if match is None:
            raise self._error(f"expected {what}")
        self.pos = match.end()
        return match.group(0)

    def _expect(self, char: str) -> None:
        if not self._peek(char):
            raise self._error(f"expected `{char}`")
        self.pos += 1

    def _peek(self, char: str) -> bool:
        if self.pos >= len(self.text):
            raise self._error("unexpected end of the call")
        return self.text[self.pos] == char

    def _skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def _error(self, message: str) -> _Malformed:
        return _Malformed(f"malformed <action> at column {self.pos + 1}: {message}")
