"""The target's tools as JSON schemas, and whether a written environment declares them faithfully.

TRACE keeps the target's tool names and parameter schemas in its synthetic environments, so that a skill learned
there is exercised through the same calls on the target. A target's tools are a list of OpenAI-style function
schemas (`{"type": "function", "function": {"name", "description", "parameters": {"type": "object",
"properties": {...}, "required": [...]}}}`, or the bare `{"name", "description", "parameters"}`): tau2-bench's
come from its toolkits (`tau2_tools`, `Toolkit.schemas`), any other target's from a JSON file
(`load_tools`; a bad file is a `ToolsFileError` naming the file and the JSON path).

`differences(tools, target)` compares an environment's tools with them: a tool the target does not have, a parameter
missing, extra or renamed, a type that differs. The language's parameter types map to JSON types as the native
call format gives them to the agent (`envs.capability.schemas.param_schema`, their one definition): an `enum(...)`
parameter is a string, whose members must be among the target's `enum` if it has one.
An environment may declare a subset of the target's tools (those its capability needs), and a parameter the
target marks optional may be left out. `transfer_rationale(source)` reads the `# transfer: ...` comment in which the
writer says why the skill transfers to the target (the language has no documentation field; comments are free).
Left out: result shapes (a query returns rows of one table, whatever the target's tool returns) and parameter
descriptions; array and object parameters, which the language cannot declare (such tools are left out).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.dsl.env_model import ToolInfo
from tracec.trace_rl.envs.capability.schemas import param_schema
from tracec.trace_rl.envs.tau2.env import DOMAINS
from tracec.trace_rl.llm.replies import schema_errors

_DECLARABLE = frozenset(("string", "integer", "number", "boolean"))  # what a language parameter can be
# How the writer is told to spell the target's types (`param_schema` is the mapping it follows).
DECLARING = ("a string parameter is `key`, `name`, `city`, `date`, `entity`, `text` or `enum(...)` (of the schema's "
             "enum members, if it has any), an integer `int`, a number `float`, a boolean `bool`")
_TRANSFER = re.compile(r"^[ \t]*#[ \t]*transfer:[ \t]*(.*)$", re.MULTILINE | re.IGNORECASE)
_CONTINUED = re.compile(r"^[ \t]*#(?![ \t]*\w+:)[ \t]?(.*)$")  # a comment line that starts no other `word:` field

_FUNCTION: dict[str, Any] = {
    "type": "object", "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "description": {"type": "string"},
        "parameters": {"type": "object", "required": ["type"], "properties": {
            "type": {"const": "object"},
            "properties": {"type": "object", "additionalProperties": {
                "type": "object", "required": ["type"],
                "properties": {"type": {"enum": ["string", "integer", "number", "boolean", "array", "object"]},
                               "enum": {"type": "array"}}}},
            "required": {"type": "array", "items": {"type": "string"}}}}}}


class ToolsFileError(Exception):
    """A tools file that cannot be read as function schemas; the message is `FILE[:line:col]: error: ...`."""


@dataclass(frozen=True, kw_only=True)
class SchemaParam:
    name: str
    type: str  # a JSON schema type
    enum: tuple[Any, ...] | None
    required: bool


@dataclass(frozen=True, kw_only=True)
class ToolSchema:
    name: str
    description: str
    params: tuple[SchemaParam, ...]
    function: dict[str, Any]  # the function object as given (what the prompt shows)

    @property
    def declarable(self) -> bool:
        """Whether the language can declare it: every parameter a string, number or boolean."""
        return all(p.type in _DECLARABLE for p in self.params)

    def param(self, name: str) -> SchemaParam | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass(frozen=True, kw_only=True)
class TargetTools:
    name: str  # what the target is, for prompts and messages: `tau2 airline, retail`, or the file
    tools: tuple[ToolSchema, ...]

    def tool(self, name: str) -> ToolSchema | None:
        return next((t for t in self.tools if t.name == name), None)

    def prompt_text(self) -> str:
        """The declarable tools' schemas, one JSON object a line, and the names of the others."""
        shown = "\n".join(json.dumps(t.function, ensure_ascii=False) for t in self.tools if t.declarable)
        others = [t.name for t in self.tools if not t.declarable]
        return shown + (f"\n(Not declarable, since their parameters are arrays or objects: {', '.join(others)}.)"
                        if others else "")


def read_tools(data: Any, where: str) -> tuple[ToolSchema, ...]:
    """Function schemas from parsed JSON (a list, or `{"tools": [...]}`); `ToolsFileError` names the JSON path."""
    entries = data.get("tools") if isinstance(data, dict) and "tools" in data else data
    if not isinstance(entries, list) or not entries:
        raise ToolsFileError(f"{where}: error: expected a non-empty JSON list of function schemas "
                             '({"type": "function", "function": {"name", "description", "parameters"}})')
    tools: list[ToolSchema] = []
    for index, entry in enumerate(entries):
        wrapped = isinstance(entry, dict) and entry.get("type") == "function" and "function" in entry
        function, path = (entry["function"], f"$[{index}].function") if wrapped else (entry, f"$[{index}]")
        problems = schema_errors(function, _FUNCTION)
        if problems:
            raise ToolsFileError(f"{where}: error: " + "; ".join(p.replace("at $", f"at {path}", 1)
                                                                 for p in problems[:4]))
        parameters = function.get("parameters", {"type": "object"})
        properties, required = parameters.get("properties", {}), parameters.get("required", [])
        unknown = [name for name in required if name not in properties]
        if unknown:
            raise ToolsFileError(f"{where}: error: at {path}.parameters.required: {unknown[0]!r} is not one of its "
                                 "properties")
        if any(t.name == function["name"] for t in tools):
            raise ToolsFileError(f"{where}: error: at {path}.name: the tool {function['name']!r} is given twice")
        params = tuple(SchemaParam(name=name, type=spec["type"],
                                   enum=tuple(spec["enum"]) if "enum" in spec else None, required=name in required)
                       for name, spec in properties.items())
        tools.append(ToolSchema(name=function["name"], description=function.get("description", ""), params=params,
                                function=function))
    return tuple(tools)


def load_tools(path: Path) -> TargetTools:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ToolsFileError(f"{path}: error: cannot read the tools file: {error.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ToolsFileError(f"{path}:{error.lineno}:{error.colno}: error: not JSON: {error.msg}") from None
    return TargetTools(name=str(path), tools=read_tools(data, str(path)))


def tau2_tools(domains: Sequence[str]) -> TargetTools:
    """The tools of tau2-bench domains; a tool two domains share (`calculate`) is listed once, as the first has it."""
    seen: dict[str, dict[str, Any]] = {}
    for domain in domains:
        if domain not in DOMAINS:
            raise ValueError(f"no tau2 domain {domain!r}; there are {', '.join(sorted(DOMAINS))}")
        for schema in DOMAINS[domain]().schemas():
            seen.setdefault(schema["function"]["name"], schema)
    return TargetTools(name=f"tau2 {', '.join(domains)}", tools=read_tools(list(seen.values()), "tau2"))


def differences(tools: Sequence[ToolInfo], target: TargetTools) -> list[str]:
    """Every way the environment's tools depart from the target's schemas, one message each (empty: faithful)."""
    found = []
    names = [t.name for t in target.tools if t.declarable]
    for tool in tools:
        schema = target.tool(tool.name)
        if schema is None:
            close = difflib.get_close_matches(tool.name, names, n=1)
            found.append(f"tool `{tool.name}` is not one of the target's tools"
                         + (f" (did you mean `{close[0]}`?)" if close else f"; they are: {', '.join(names)}"))
            continue
        found.extend(_param_differences(tool, schema))
    return found


def _param_differences(tool: ToolInfo, schema: ToolSchema) -> list[str]:
    declared = {p.name: p for p in tool.params}
    extra = [name for name in declared if schema.param(name) is None]
    missing = [p.name for p in schema.params if p.required and p.name not in declared]
    signature = ", ".join(f"{p.name}: {p.type}" for p in schema.params)
    if len(extra) == 1 and len(missing) == 1:
        found = [f"`{tool.name}`: parameter `{extra[0]}` is named `{missing[0]}` in the target "
                 + f"({tool.name}({signature}))"]
    else:
        found = [f"`{tool.name}`: parameter `{name}` is not in the target's schema ({tool.name}({signature}))"
                 for name in extra]
        found += [f"`{tool.name}`: the target's parameter `{name}` is missing ({tool.name}({signature}))"
                  for name in missing]
    for name, param in declared.items():
        wanted = schema.param(name)
        if wanted is None:
            continue
        schema_of = param_schema(param)
        kind, members = schema_of["type"], schema_of.get("enum")
        if wanted.type not in _DECLARABLE:
            found.append(f"`{tool.name}`: parameter `{name}` is an {wanted.type} in the target, which the language "
                         "cannot declare; leave this tool out")
        elif kind != wanted.type:
            found.append(f"`{tool.name}`: parameter `{name}` is `{param.written}` (JSON {kind}) here but "
                         f"{wanted.type} in the target")
        elif members is not None and wanted.enum is not None:
            stray = [m for m in members if m not in wanted.enum]
            if stray:
                found.append(f"`{tool.name}`: parameter `{name}` has member(s) {', '.join(stray)} that the target's "
                             f"enum {list(wanted.enum)} lacks")
    return found


def transfer_rationale(source: str) -> str | None:
    """The text of the `# transfer: ...` comment (its following `#` lines continue it), or None."""
    match = _TRANSFER.search(source)
    if match is None:
        return None
    parts = [match.group(1).strip()]
    for line in source[match.end():].splitlines()[1:]:
        more = _CONTINUED.match(line)
        if more is None:
            break
        parts.append(more.group(1).strip())
    text = " ".join(p for p in parts if p)
    return text or None


def target_tools(spec: str) -> TargetTools:
    """`tau2` (both domains), `tau2:airline`, `tau2:airline,retail`, or a JSON file of function schemas."""
    if spec == "tau2" or spec.startswith("tau2:"):
        domains = [d.strip() for d in spec.partition(":")[2].split(",") if d.strip()] or ["airline", "retail"]
        try:
            return tau2_tools(domains)
        except ValueError as error:
            raise ToolsFileError(f"{spec}: error: {error}") from None
    return load_tools(Path(spec))
