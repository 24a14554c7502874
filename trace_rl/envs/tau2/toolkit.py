"""Tool specifications for the tau2 domains: typed parameters, argument checking, and the tool registry.

A tool is a plain function `run(db, args) -> result` plus its spec: name, kind (query or mutate), a one-line
description for the agent's prompt, and typed parameters. `Toolkit.call` checks the arguments against the spec
before the function sees them, the way the benchmark's typed models do (lax: `"3"` and `3.0` are the integer
3, an integer id is its digits as a string; extra keys inside objects are dropped), and a refusal is a
`ToolError` whose message is what the agent reads after `Error: `.

`Toolkit.schemas()` is the same specs as OpenAI-style JSON schemas (the native call format: every parameter
required, `str` a string, `int` an integer, a choice a string enum, lists arrays, records objects with their
fields required), `describe()` as the text list a text-format prompt shows.
Left out: optional parameters (every tool here takes all of its arguments).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tracec.trace_rl.envs.tau2.db import Db

_INTEGRAL = re.compile(r"-?\d+(\.0*)?")


class ToolError(ValueError):
    """A refusal: the service answers `Error: <message>` and the database is left as it was."""


@dataclass(frozen=True, kw_only=True)
class Scalar:
    kind: Literal["str", "int"]

    def show(self) -> str:
        return self.kind

    def schema(self) -> dict[str, Any]:
        return {"type": "string" if self.kind == "str" else "integer"}


@dataclass(frozen=True, kw_only=True)
class Choice:
    values: tuple[str, ...]

    def show(self) -> str:
        return " | ".join(f'"{value}"' for value in self.values)

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.values)}


@dataclass(frozen=True, kw_only=True)
class ListOf:
    item: ParamType

    def show(self) -> str:
        return f"list[{self.item.show()}]"

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "items": self.item.schema()}


@dataclass(frozen=True, kw_only=True)
class Record:
    fields: tuple[tuple[str, ParamType], ...]

    def show(self) -> str:
        return "{" + ", ".join(f"{name}: {kind.show()}" for name, kind in self.fields) + "}"

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {name: kind.schema() for name, kind in self.fields},
                "required": [name for name, _ in self.fields]}


ParamType = Scalar | Choice | ListOf | Record
STR, INT = Scalar(kind="str"), Scalar(kind="int")


@dataclass(frozen=True, kw_only=True)
class Param:
    name: str
    type: ParamType
    doc: str


@dataclass(frozen=True, kw_only=True)
class Tool:
    name: str
    kind: Literal["query", "mutate"]
    doc: str
    params: tuple[Param, ...]
    run: Callable[[Db, dict[str, Any]], Any]
    # how the ids in a result are found: "fields" walks id-named keys, "value" is an id itself (a user id
    # found by email), "values" maps names to ids (the product catalogue)
    reveals: Literal["fields", "value", "values"] = "fields"

    def ids_in(self, result: Any) -> set[str]:
        """The ids a result shows the agent: values under id-named keys, or per `reveals`."""
        if self.reveals == "value":
            return {result} if isinstance(result, str) else set()
        if self.reveals == "values":
            return {v for v in result.values() if isinstance(v, str)} if isinstance(result, dict) else set()
        return set(_ids_under(result, False))

    def signature(self) -> str:
        args = ", ".join(f"{param.name}: {param.type.show()}" for param in self.params)
        return f"{self.name}({args})"

    def schema(self) -> dict[str, Any]:
        """The tool as `{"type": "function", "function": {"name", "description", "parameters"}}`."""
        properties = {p.name: {**p.type.schema(), **({"description": p.doc} if p.doc else {})} for p in self.params}
        parameters = {"type": "object", "properties": properties, "required": [p.name for p in self.params]}
        return {"type": "function", "function": {"name": self.name, "description": self.doc,
                                                 "parameters": parameters}}


def param(name: str, kind: ParamType = STR, doc: str = "") -> Param:
    return Param(name=name, type=kind, doc=doc)


def tool(
    name: str,
    kind: Literal["query", "mutate"],
    run: Callable[[Db, dict[str, Any]], Any],
    doc: str,
    *params: Param,
    reveals: Literal["fields", "value", "values"] = "fields",
) -> Tool:
    """A tool spec in one line: name, kind, function, description, then its parameters."""
    return Tool(name=name, kind=kind, run=run, doc=doc, params=params, reveals=reveals)


class Toolkit:
    """The tools of one domain, by name."""

    def __init__(self, domain: str, tools: tuple[Tool, ...]) -> None:
        self.domain = domain
        self.tools: Mapping[str, Tool] = {tool.name: tool for tool in tools}

    def call(self, db: Db, name: str, arguments: Mapping[str, Any]) -> tuple[Any, bool]:
        """Check the arguments and run the tool: (result, whether the database changed).

        A refused call raises ToolError and leaves `db` as it was.
        """
        spec = self.tools.get(name)
        if spec is None:
            raise ToolError(f"Tool '{name}' not found.")
        args = check_arguments(spec, arguments)
        with db.transaction() as done:
            result = spec.run(db, args)
        return result, done.changed

    def schemas(self) -> list[dict[str, Any]]:
        """The tools as JSON schemas, by name (the order `describe` lists them in)."""
        return [spec.schema() for spec in sorted(self.tools.values(), key=lambda t: t.name)]

    def describe(self) -> str:
        """The tool list for the agent's prompt: one signature and one line of description each."""
        lines = []
        for spec in sorted(self.tools.values(), key=lambda t: t.name):
            lines.append(f"- {spec.signature()}: {spec.doc}")
            lines.extend(f"    {arg.name}: {arg.doc}" for arg in spec.params if arg.doc)
        return "\n".join(lines)


_ID_KEYS = frozenset(
    {"id", "flight_number", "reservations", "orders", "exchange_items", "exchange_new_items", "return_items"}
)


def _ids_under(value: Any, is_id: bool) -> Iterator[str]:
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _ids_under(sub, key in _ID_KEYS or key.endswith(("_id", "_ids")))
    elif isinstance(value, list):
        for item in value:
            yield from _ids_under(item, is_id)
    elif is_id and isinstance(value, str) and value:
        yield value


def check_arguments(spec: Tool, arguments: Mapping[str, Any]) -> dict[str, Any]:
    names = [arg.name for arg in spec.params]
    unknown = sorted(set(arguments) - set(names))
    if unknown:
        expected = ", ".join(names) or "none"
        raise ToolError(
            f"{spec.name}() got unexpected argument(s) {', '.join(unknown)}; expected: {expected}"
        )
    missing = [name for name in names if name not in arguments]
    if missing:
        raise ToolError(f"{spec.name}() is missing argument(s) {', '.join(missing)}")
    return {arg.name: coerce(arguments[arg.name], arg.type, arg.name) for arg in spec.params}


def coerce(value: Any, kind: ParamType, where: str) -> Any:
    """The value as the parameter's type, or a ToolError naming the argument path and what was expected."""
    if isinstance(kind, Scalar):
        return _scalar(value, kind.kind, where)
    if isinstance(kind, Choice):
        if isinstance(value, str) and value in kind.values:
            return value
        raise ToolError(f"argument `{where}` must be one of {kind.show()}, got {_show(value)}")
    if isinstance(kind, ListOf):
        if not isinstance(value, list):
            raise ToolError(f"argument `{where}` must be a list, got {_show(value)}")
        return [coerce(item, kind.item, f"{where}[{index}]") for index, item in enumerate(value)]
    if not isinstance(value, dict):
        raise ToolError(f"argument `{where}` must be an object {kind.show()}, got {_show(value)}")
    missing = [name for name, _ in kind.fields if name not in value]
    if missing:
        raise ToolError(f"argument `{where}` is missing field(s) {', '.join(missing)}")
    return {name: coerce(value[name], sub, f"{where}.{name}") for name, sub in kind.fields}


def _scalar(value: Any, kind: str, where: str) -> Any:
    if isinstance(value, bool):  # a bool is an int to Python, never an id or a count
        pass
    elif kind == "str":
        if isinstance(value, str):
            return value
        if isinstance(value, int):  # a numeric id written without quotes
            return str(value)
    elif isinstance(value, int):
        return value
    elif isinstance(value, float) and value.is_integer():
        return int(value)
    elif isinstance(value, str) and _INTEGRAL.fullmatch(value.strip()):
        return int(value.strip().split(".")[0])
    raise ToolError(f"argument `{where}` must be a {_NAMES[kind]}, got {_show(value)}")


_NAMES = {"str": "string", "int": "whole number"}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
