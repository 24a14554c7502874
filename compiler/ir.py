"""The IR: one node type, `Node(op, args, type, value)`, from the type checker's output down to every backend.

The checker emits resolved, typed nodes with high-level ops (`changed`, `contains`, `setlit`, `bind`, ...). The
lowering pass rewrites them to the kernel ops below; the passes after it (constant folding, common subexpressions)
keep to those. Every node evaluates, per transition, to a pair (value, known) — Kleene three-valued logic for bools,
"unknown if any operand is unknown" for everything else — and an operator fires only when definitely true.

Kernel ops (what backends implement; `a`, `b` are args):
  const               value: bool | int | float (entities as `entity_id`, enum members as their index)
  load                value: column name of a scalar column ("prev.location", "act.verb", "bind.target", "lift.0")
  load_set            value: column name of a set column (only as an argument of has / count / eq / ne)
  not, and, or        Kleene logic on bools
  neg, abs            numbers
  add, sub, mul, div  numbers; `div` is true division, and division by zero is unknown; an int result beyond int64
                      or a float result that is not finite is unknown (`tracec.compiler.values`)
  min, max            two numbers
  eq, ne, lt, le, gt, ge
                      two scalars (numbers, codes) -> bool; eq / ne also take two sets (set equality)
  has                 (element, set) -> bool: membership
  count               (set) -> int: number of elements
Types follow `tracec.dsl.types.Type`; int and float mix by promotion to float.

Context key (per transition, identical in every backend): start from CONTEXT_SEED; for each context node in order,
mix in MISSING_TAG if it is unknown; else for a set its element count and then its elements (sorted ascending); else
for a float the IEEE-754 bits of (value + 0.0) as int64; else the value as int64 (bools 0/1). The result is the
uint64 state reinterpreted as int64. The hash is for speed: a kernel also returns the tuple it hashed
(`tracec.compiler.context`), and step groups are formed from the tuples (`tracec.runtime.rewards.context_groups`).

Entities are interned by a stable 64-bit hash (`entity_id`), so literal ids are compile-time constants and no
interning table has to travel between compiler and fact builder.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from tracec.dsl.errors import NOWHERE, Loc
from tracec.dsl.types import Type

KERNEL_OPS = frozenset(
    ["const", "load", "load_set", "not", "and", "or", "neg", "abs", "add", "sub", "mul", "div", "min", "max",
     "eq", "ne", "lt", "le", "gt", "ge", "has", "count"]
)

MASK64 = (1 << 64) - 1
CONTEXT_SEED = 0xCBF29CE484222325  # FNV-1a 64-bit offset basis
CONTEXT_PRIME = 0x100000001B3  # FNV-1a 64-bit prime
MISSING_TAG = 0x9E3779B97F4A7C15  # mixed in for a missing context value, so "missing" is a value of its own


@dataclass(frozen=True)
class Node:
    op: str
    args: tuple[Node, ...]
    type: Type
    value: Any = None
    loc: Loc = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class ColumnSpec:
    """A fact column a kernel reads: scalar columns have values + known, set columns also offsets."""

    name: str
    type: Type

    @property
    def is_set(self) -> bool:
        return self.type.kind == "set"


@dataclass(frozen=True)
class KernelProgram:
    """What a backend compiles: the operators' expressions and the context expressions, over named columns."""

    operators: tuple[Node, ...]  # one bool node per operator, in declaration order
    context: tuple[Node, ...]  # context key expressions; empty when the rubric declares none
    columns: tuple[ColumnSpec, ...]  # every column the nodes load, sorted by name


def entity_id(text: str) -> int:
    """The interned id of an entity: the first 8 bytes of its BLAKE2b digest, as a signed int64."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def mix(state: int, word: int) -> int:
    """One step of the context hash over 64-bit words (FNV-1a on words); every backend must match it exactly."""
    return ((state ^ (word & MASK64)) * CONTEXT_PRIME) & MASK64


def to_signed(value: int) -> int:
    return value - (1 << 64) if value >= (1 << 63) else value


# ---------------------------------------------------------------------------------------------- fact plan
# What the fact builder must compute so that a kernel can run: plain fields, bindings, lifted text predicates.
# Bindings are evaluated once per episode with the binding ops: `instruction` (the episode's instruction, text),
# `const` (a string or number), `match` (args: (text,), value: (pattern, ignore_case, group)) and `lower` (args: (x,)).


@dataclass(frozen=True)
class FieldSource:
    """Column `column` is the schema field `field` of s_t (`prev`), s_t+1 (`next`) or a_t (`act`)."""

    column: str
    side: str
    field: str
    type: Type


@dataclass(frozen=True)
class BindSource:
    """Column `column` ("bind.NAME") is the episode's binding, broadcast to its transitions; missing if no match."""

    column: str
    name: str
    type: Type
    expr: Node


@dataclass(frozen=True)
class Needle:
    """What `contains` looks for: a string literal, a binding (by name) or an entity fact (side, field)."""

    kind: str  # "const" | "bind" | "fact"
    value: str  # the literal, the binding name, or "side.field"


@dataclass(frozen=True)
class LiftSource:
    """Column `column` ("lift.K"), a bool computed from text once per transition: `contains` or `matches`.

    `text` is "side.field" of a text fact, or "instruction". Unknown when the text (or the needle) is missing.
    `contains` is a case-sensitive substring test; `matches` is an RE2 search (`ignore_case` from the `/i` flag).
    """

    column: str
    kind: str  # "contains" | "matches"
    text: str
    needle: Needle | None = None
    pattern: str = ""
    ignore_case: bool = False


@dataclass(frozen=True)
class SchemaField:
    """A field the schema declares, in `state` or `action`: every value of it is checked against its type, read or
    not (a wrongly typed field is an error even where no operator reads it)."""

    part: str  # "state" | "action"
    field: str
    type: Type


@dataclass(frozen=True)
class FactPlan:
    fields: tuple[FieldSource, ...]
    binds: tuple[BindSource, ...]
    lifts: tuple[LiftSource, ...]
    declared: tuple[SchemaField, ...] = ()  # every field of the schema
