"""What the environment checker finds out about an `environment` block, for the interpreter to compile it:
tables with their column types and key columns, tools with parameter types, and the limits that bound it all.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracec.dsl import ast
from tracec.dsl.errors import Loc, Source
from tracec.dsl.types import Type

MAX_STEPS = 1000  # the most steps an episode may be given, whatever an environment's own `max_steps` says


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Bounds that keep an LLM-written environment cheap to run; the checker and the interpreter enforce them."""

    max_rows: int = 1000
    max_tables: int = 16
    max_columns: int = 32
    max_tools: int = 32
    max_lets: int = 32
    max_solution: int = 64
    max_steps: int = 30
    max_string: int = 4096  # string literals, argument values, rendered task text
    max_text: int = 16384  # one agent turn


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, kw_only=True)
class ColumnInfo:
    name: str
    generator: ast.Generator
    type: Type


@dataclass(frozen=True, kw_only=True)
class TableInfo:
    name: str
    columns: tuple[ColumnInfo, ...]
    key: str | None  # the `key` column, if the table has one
    rows: tuple[int, int]
    loc: Loc
    where: ast.Expr | None = None  # the condition every generated row satisfies

    def column(self, name: str) -> ColumnInfo | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True, kw_only=True)
class ParamInfo:
    name: str
    type: Type
    written: str  # as declared: `key`, `date`, `enum(a, b)`


@dataclass(frozen=True, kw_only=True)
class ToolInfo:
    name: str
    params: tuple[ParamInfo, ...]
    body: ast.Query | ast.Mutation
    loc: Loc

    @property
    def kind(self) -> str:
        return "query" if isinstance(self.body, ast.Query) else "mutate"

    def signature(self) -> str:
        params = ", ".join(f"{p.name}: {p.written}" for p in self.params)
        if isinstance(self.body, ast.Query):
            return f"{self.name}({params}) -> rows of {self.body.table}"
        return f"{self.name}({params}) changes {', '.join(dict.fromkeys(a.table for a in self.body.assigns))}"


@dataclass(frozen=True, kw_only=True)
class CheckedEnvironment:
    name: str
    description: str
    capability: str | None
    tables: tuple[TableInfo, ...]
    lets: tuple[ast.Let, ...]
    let_types: tuple[Type, ...]
    task: ast.Task
    tools: tuple[ToolInfo, ...]
    solution: ast.Solution
    report: tuple[ast.Expr, ...]
    reward: ast.Expr
    source: Source
    hint: str | None = None  # the `hint` line's text: guidance for hinted rollouts, never the solution's calls

    def table(self, name: str) -> TableInfo:
        return next(t for t in self.tables if t.name == name)

    def tool(self, name: str) -> ToolInfo | None:
        return next((t for t in self.tools if t.name == name), None)
