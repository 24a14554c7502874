"""The language's types: `bool`, `int`, `float`, `enum(...)`, `entity`, `text`, `set(entity)`.

Two more exist only inside the checker: `string` (a string literal, which compares with an entity and feeds
`contains`) and `regex`. Every fact may be missing; that is a property of values, not of types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["bool", "int", "float", "enum", "entity", "text", "set", "string", "regex", "row", "table"]


@dataclass(frozen=True)
class Type:
    kind: Kind
    members: tuple[str, ...] = ()  # enum members, in declaration order
    table: str = ""  # for row and table types inside environments

    def __str__(self) -> str:
        if self.kind == "enum":
            return f"enum({', '.join(self.members)})"
        if self.kind == "set":
            return "set(entity)"
        if self.kind in ("row", "table"):
            return f"{self.kind} of `{self.table}`"
        return self.kind

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float")


BOOL = Type("bool")
INT = Type("int")
FLOAT = Type("float")
ENTITY = Type("entity")
TEXT = Type("text")
SET = Type("set")
STRING = Type("string")
REGEX = Type("regex")

# Plain type names a schema, binding or tool parameter may use; `enum(...)` and `set(entity)` take arguments.
PLAIN_TYPES = {"bool": BOOL, "int": INT, "float": FLOAT, "entity": ENTITY, "text": TEXT}


def enum(*members: str) -> Type:
    return Type("enum", tuple(members))


def comparable(left: Type, right: Type) -> bool:
    """Whether `==`/`!=` may compare the two: same kind, numbers with numbers, entities with string literals."""
    if left.numeric and right.numeric:
        return True
    textual = {"entity", "string"}
    if left.kind in textual and right.kind in textual:
        return True
    if left.kind == "enum" and right.kind == "enum":
        return left.members == right.members
    return left.kind == right.kind and left.kind in ("bool", "set")
