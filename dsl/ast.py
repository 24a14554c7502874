"""The syntax tree of a `.rubric` file: frozen dataclasses named after the grammar's rules.

Every node carries its source span in `loc`, which is left out of equality so that `parse(print(tree)) == tree`.
Declarations keep their items in source order; the type checker, not the tree, decides what a name means.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal as OneOf

from tracec.dsl.errors import NOWHERE, Loc

# ---------------------------------------------------------------------------------------------- types


@dataclass(frozen=True)
class TypeRef:
    """A type as written: `int`, `enum(a, b)`, `set(entity)`; `args` holds the names inside the parentheses."""

    name: str
    args: tuple[str, ...] = ()
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


# ---------------------------------------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Literal:
    value: bool | int | float | str
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Regex:
    pattern: str
    ignore_case: bool = False
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Name:
    """A bare name: a binding, an enum member, a `let`, a table, a column inside `where`, a state field in `changed`."""

    id: str
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Param:
    """`$name`: a tool parameter."""

    id: str
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


Side = OneOf["prev", "next", "act"]


@dataclass(frozen=True)
class Fact:
    """`prev.f`, `next.f` (state s_t, s_t+1) or `act.f` (action a_t)."""

    side: Side
    field: str
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Attr:
    """`base.field`: a column of a row (`me.name`, `trips[$trip].status`)."""

    base: Expr
    field: str
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Index:
    """`table[key]`: the row of `table` whose key is `key`."""

    base: Expr
    key: Expr
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Unary:
    op: OneOf["not", "-"]
    operand: Expr
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


BinaryOp = OneOf["or", "and", "==", "!=", "<", "<=", ">", ">=", "in", "+", "-", "*", "/"]


@dataclass(frozen=True)
class Binary:
    op: BinaryOp
    left: Expr
    right: Expr
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Expr, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class SetLiteral:
    items: tuple[Expr, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Score:
    """`state` or `report` inside an environment's `reward` formula."""

    kind: OneOf["state", "report"]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Template:
    """A string with `{expr}` interpolations (environment task text and require messages)."""

    parts: tuple[str | Expr, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


Expr = Literal | Regex | Name | Param | Fact | Attr | Index | Unary | Binary | Call | SetLiteral | Score

# ---------------------------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class FieldDecl:
    name: str
    type: TypeRef
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Schema:
    name: str
    state: tuple[FieldDecl, ...]
    action: tuple[FieldDecl, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


# ---------------------------------------------------------------------------------------------- rubric

Category = OneOf["evidence", "execution", "invalidity"]
CATEGORIES: tuple[Category, ...] = ("evidence", "execution", "invalidity")


@dataclass(frozen=True)
class Bind:
    name: str
    type: TypeRef
    value: Expr
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Operator:
    category: Category
    name: str
    description: str
    expr: Expr
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class BudgetEntry:
    category: Category
    value: float
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Budget:
    entries: tuple[BudgetEntry, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Setting:
    """`lambda x` or `gamma x`."""

    key: OneOf["lambda", "gamma"]
    value: float
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class StepScale:
    """`step_scale std` or `step_scale none`: whether A_S is divided by its step group's std (the checker keeps
    the mode a name, so that a misspelt one is an error at its place)."""

    mode: str
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Context:
    exprs: tuple[Expr, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


RubricItem = Bind | Operator | Budget | Setting | StepScale | Context


@dataclass(frozen=True)
class Rubric:
    name: str
    schema: str
    items: tuple[RubricItem, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)
    schema_loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


# ---------------------------------------------------------------------------------------------- capability


@dataclass(frozen=True)
class Capability:
    name: str
    description: str
    schema: str
    needed: Expr
    present: Expr
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)
    schema_loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


# ---------------------------------------------------------------------------------------------- environment


@dataclass(frozen=True)
class EnvCapability:
    name: str
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Generator:
    """A column generator: `key`, `name`, `city`, `date`, `bool`, `int a..b`, `float a..b`, `enum(...)`, `ref t`;
    `args` holds the range bounds (numbers), the enum members or the referenced table (strings)."""

    kind: str
    args: tuple[int | float | str, ...] = ()
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Column:
    name: str
    generator: Generator
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    rows_min: int
    rows_max: int
    where: Expr | None = None  # every generated row satisfies it (a row that does not is drawn again)
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Pick:  # `pick(table where cond)`: one row of `table`, chosen by the seed among those where `cond` holds
    table: str
    where: Expr | None
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Let:
    name: str
    value: Pick | Expr
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Task:
    text: Template
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Hint:
    text: str  # `hint "..."`: the guidance a trainer may show (plain text, the same for every seed: no task's values)
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class ToolParam:
    name: str
    type: TypeRef
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Query:
    """`-> table where cond`: the rows a query tool returns."""

    table: str
    where: Expr | None
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Require:
    cond: Expr
    message: Template
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Assign:
    """`set table[key].column = value`."""

    table: str
    key: Expr
    column: str
    value: Expr
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Mutation:
    requires: tuple[Require, ...]
    assigns: tuple[Assign, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Tool:
    name: str
    params: tuple[ToolParam, ...]
    body: Query | Mutation
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class SolutionCall:
    tool: str
    args: tuple[Expr, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Solution:
    calls: tuple[SolutionCall, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Report:
    exprs: tuple[Expr, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Reward:
    expr: Expr
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


EnvItem = EnvCapability | Table | Let | Task | Hint | Tool | Solution | Report | Reward


@dataclass(frozen=True)
class Environment:
    name: str
    description: str
    items: tuple[EnvItem, ...]
    loc: Loc = dataclasses.field(default=NOWHERE, compare=False, repr=False)


# ---------------------------------------------------------------------------------------------- file

Decl = Schema | Rubric | Capability | Environment


@dataclass(frozen=True)
class Module:
    """One parsed `.rubric` file."""

    decls: tuple[Decl, ...]
    path: str = dataclasses.field(default="<string>", compare=False)
    source: str = dataclasses.field(default="", compare=False, repr=False)
