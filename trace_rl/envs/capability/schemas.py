"""A capability environment's tools as OpenAI-style JSON schemas: what an agent is given in the native call format.

Built from the checked program (`ToolInfo`, `ParamInfo`): one function per tool, every parameter required (a call
must name them all, `program._Tool.bind`), typed as the interpreter reads it: entities and text are strings (an
`enum` lists its members), `int` an integer, `float` a number, `bool` a boolean. The declared kind of an entity
(`key`, `date`, ...) is the parameter's description, and the tool's effect (the rows it returns, the tables it
changes) the function's. Left out: value ranges (a parameter's type says nothing of the rows that exist).
"""

from __future__ import annotations

from typing import Any

from tracec.dsl import ast
from tracec.dsl.env_model import ParamInfo, ToolInfo

_JSON_TYPES = {"entity": "string", "text": "string", "enum": "string", "int": "integer", "float": "number",
               "bool": "boolean"}
_ENTITY_DOCS = {"key": "an id", "name": "a name", "city": "a city", "date": "a date, written YYYY-MM-DD"}


def tool_schemas(tools: list[ToolInfo]) -> list[dict[str, Any]]:
    """The tools as function schemas, in declaration order."""
    return [tool_schema(info) for info in tools]


def tool_schema(info: ToolInfo) -> dict[str, Any]:
    """One tool as `{"type": "function", "function": {"name", "description", "parameters"}}`."""
    parameters = {"type": "object", "properties": {p.name: param_schema(p) for p in info.params},
                  "required": [p.name for p in info.params]}
    return {"type": "function", "function": {"name": info.name, "description": _effect(info),
                                             "parameters": parameters}}


def param_schema(param: ParamInfo) -> dict[str, Any]:
    """A parameter's JSON type, its enum members, and what kind of entity it names."""
    schema: dict[str, Any] = {"type": _JSON_TYPES[param.type.kind]}
    if param.type.kind == "enum":
        schema["enum"] = list(param.type.members)
    doc = _ENTITY_DOCS.get(param.written)
    if doc:
        schema["description"] = doc
    return schema


def _effect(info: ToolInfo) -> str:
    if isinstance(info.body, ast.Query):
        return f"Looks up rows of the `{info.body.table}` table; returns the matching rows as JSON."
    tables = ", ".join(f"`{name}`" for name in dict.fromkeys(a.table for a in info.body.assigns))
    return f"Changes the {tables} table{'s' if ',' in tables else ''}; refuses when a requirement fails."
