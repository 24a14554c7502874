"""How a ToolSandbox tool is declared, given to the agent and called: typed parameters, argument binding, errors.

A tool is a function `run(call, args) -> result` plus its spec. `Tool.bind` does what the benchmark's Python call
does to the agent's keyword arguments: unknown or missing ones are a TypeError, the values are checked against
the annotations as its `typechecked` decorator checks them (an int is a float, a bool is an int), and defaults
are filled in. Optional search filters default to `NOT_GIVEN`, which means "not given" and is left out of the
call's trace. A refusal is a `ToolError`: the exception's type and message, which the agent reads as the last
line of a Python traceback (`PermissionError: Wifi cannot be turned on in low battery mode`), and the world is
left as it was.

`Tool.schema()` is the tool as the agent sees it, the JSON schema the benchmark derives from the signature and
docstring: every parameter typed (`Optional[float]` is a number), the ones without a default required.
Left out: the benchmark's tool augmentations (scrambled names and descriptions, distraction tools).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tracec.trace_rl.envs.toolsandbox.clock import Clock
from tracec.trace_rl.envs.toolsandbox.world import World

Kind = Literal["str", "int", "float", "bool"]
_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
_ACCEPTS: Mapping[str, tuple[type, ...]] = {"str": (str,), "int": (int, bool), "float": (float, int, bool),
                                            "bool": (bool,)}
_PHONE_PUNCTUATION = re.compile(r"[\s\-().\[\]/~]")
MIN_TIMESTAMP, MAX_TIMESTAMP = 315529200.0, 2524604400.0  # 1980 to 2050: a unit slip (ms for s) is refused


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOT_GIVEN = _Marker("NOT_GIVEN")  # an optional filter left out (distinct from None)
REQUIRED = _Marker("REQUIRED")  # no default: the agent must give it


class ToolError(Exception):
    """A refused call: the exception type the benchmark raises and its message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


@dataclass(kw_only=True)
class Call:
    """What a running tool sees: the world (a tool that changes it sets a new one), the clock, fresh ids."""

    world: World
    clock: Clock
    new_id: Callable[[], str]


@dataclass(frozen=True, kw_only=True)
class Param:
    name: str
    kind: Kind
    doc: str
    default: Any = REQUIRED
    nullable: bool = False  # Optional[...]: None is a value

    def schema(self) -> dict[str, Any]:
        return {"type": _JSON_TYPES[self.kind], "description": self.doc}

    def check(self, value: Any) -> None:
        """The benchmark's `validate_type`: the exact type, or an int where a float is wanted, or a bool where a
        number is wanted."""
        if value is None and self.nullable:
            return
        if type(value) in _ACCEPTS[self.kind]:
            return
        expected = f"<class '{self.kind}'>"
        if self.nullable:
            expected = f"typing.Optional[{self.kind}]"
        if self.default is NOT_GIVEN:
            expected = f"typing.Union[{expected}, NotGiven]"
        raise ToolError("TypeError", f"Parameter '{self.name}' is of type '{type(value)}', but expected '{expected}'.")


@dataclass(frozen=True, kw_only=True)
class Tool:
    name: str
    doc: str
    params: tuple[Param, ...]
    run: Callable[[Call, dict[str, Any]], Any] = field(repr=False)
    changes: bool = False  # whether it can change the world (what the transition facts call a mutation)

    def bind(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments, checked and with defaults filled in (NOT_GIVEN ones included)."""
        names = {param.name for param in self.params}
        unknown = [key for key in arguments if key not in names]
        if unknown:
            raise ToolError("TypeError", f"got an unexpected keyword argument '{unknown[0]}'")
        bound: dict[str, Any] = {}
        for param in self.params:
            if param.name in arguments:
                param.check(arguments[param.name])
                bound[param.name] = arguments[param.name]
            elif param.default is REQUIRED:
                raise ToolError("TypeError", f"missing a required argument: '{param.name}'")
            else:
                bound[param.name] = param.default
        return bound

    def schema(self) -> dict[str, Any]:
        """`{"type": "function", "function": {"name", "description", "parameters"}}`, as the agent is given it."""
        parameters = {"type": "object", "properties": {p.name: p.schema() for p in self.params},
                      "required": [p.name for p in self.params if p.default is REQUIRED]}
        return {"type": "function", "function": {"name": self.name, "description": self.doc,
                                                 "parameters": parameters}}


def param(name: str, kind: Kind, doc: str, default: Any = REQUIRED, *, nullable: bool = False) -> Param:
    return Param(name=name, kind=kind, doc=doc, default=default, nullable=nullable)


def given(value: Any) -> bool:
    return value is not NOT_GIVEN


def check_phone_number(value: Any) -> None:
    """A number the benchmark's `phonenumbers.parse(number)` (no default region) accepts: international form,
    `+` and 3 to 17 digits, spaces and dashes and brackets allowed. NOT_GIVEN passes."""
    if value is NOT_GIVEN:
        return
    text = str(value).strip()
    start = next((i for i, char in enumerate(text) if char.isdigit() or char == "+"), None)
    if start is None:
        raise ToolError("NumberParseException", "(1) The string supplied did not seem to be a phone number.")
    text = text[start:]
    if not text.startswith("+"):
        raise ToolError("NumberParseException", "(0) Missing or invalid default region.")
    digits = _PHONE_PUNCTUATION.sub("", text[1:])
    if not digits.isdigit():
        raise ToolError("NumberParseException", "(1) The string supplied did not seem to be a phone number.")
    if len(digits) < 3:
        raise ToolError("NumberParseException", "(3) The string supplied is too short to be a phone number.")
    if len(digits) > 17:
        raise ToolError("NumberParseException", "(4) The string supplied is too long to be a phone number.")


def check_range(value: Any, name: str, low: float, high: float) -> None:
    """The benchmark's `validate_range` for a number that is given (None and NOT_GIVEN pass)."""
    if not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and math.isnan(value):
        raise ToolError("ValueError", f"Parameter '{name}' is not a number.")
    if value < low:
        raise ToolError("ValueError", f"Parameter '{name}' is smaller than its valid range minimum of {low}.")
    if value > high:
        raise ToolError("ValueError", f"Parameter '{name}' is larger than its valid range maximum of {high}.")


def check_timestamp(value: Any, name: str) -> None:
    check_range(value, name, MIN_TIMESTAMP, MAX_TIMESTAMP)


def check_latitude(value: Any, name: str) -> None:
    check_range(value, name, -90.0, 90.0)


def check_longitude(value: Any, name: str) -> None:
    check_range(value, name, -180.0, 180.0)
