"""The compiler pipeline: a checked rubric to a kernel program and the fact plan that feeds it.

The passes, in order:
  1. lower          names, enum members, entity literals, `changed`, set literals -> IR nodes   (lower.py)
  2. lift_text      contains / matches -> derived bool columns the fact builder computes         (lift.py)
  3. fold           constant folding with the three-valued rules                                  (fold.py)
  4. cse            one shared node per distinct subexpression                                    (cse.py)
  5. plan           the columns the kernel reads: fields, bindings, lifted predicates             (below)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracec.compiler.cse import eliminate_common_subexpressions
from tracec.compiler.fold import fold_constants
from tracec.compiler.ir import (
    BindSource,
    ColumnSpec,
    FactPlan,
    FieldSource,
    KernelProgram,
    LiftSource,
    Node,
    SchemaField,
)
from tracec.compiler.lift import lift_text
from tracec.compiler.lower import Lowerer
from tracec.compiler.rewrite import walk_nodes
from tracec.dsl import ast
from tracec.dsl import types as T
from tracec.dsl.check import CheckedCapability, CheckedRubric, CheckedSchema


@dataclass(frozen=True)
class OperatorInfo:
    name: str
    category: str
    description: str
    weight: float  # r_c / M_c: what firing earns (evidence, execution) or costs (invalidity, as a magnitude)


@dataclass(frozen=True)
class CompiledRubric:
    name: str
    schema: CheckedSchema
    operators: tuple[OperatorInfo, ...]
    program: KernelProgram
    plan: FactPlan
    budgets: dict[str, float]
    lam: float
    gamma: float
    step_scale: str

    @property
    def categories(self) -> tuple[str, ...]:
        return tuple(op.category for op in self.operators)


@dataclass(frozen=True)
class CompiledCapability:
    """A capability's two episode-level formulas; their aggregates' per-transition bodies form a kernel program."""

    name: str
    description: str
    needed: Node  # over ops any / all / agg_count whose argument is the index of a body in `program.operators`
    present: Node
    program: KernelProgram
    plan: FactPlan


# The rewrites after lifting (3 and 4 above), in order; each returns roots that compute what its input did.
PASSES: tuple[Callable[[tuple[Node, ...]], tuple[Node, ...]], ...] = (fold_constants, eliminate_common_subexpressions)


def run_passes(lowered: tuple[Node, ...]) -> tuple[tuple[Node, ...], tuple[LiftSource, ...]]:
    """Every pass after lowering, for rubrics and capabilities alike: the text predicates lifted, then PASSES."""
    roots, lifts = lift_text(lowered)
    for rewrite in PASSES:
        roots = rewrite(roots)
    return roots, lifts


def compile_rubric(checked: CheckedRubric) -> CompiledRubric:
    lowerer = Lowerer(checked.schema, checked.typing, checked.bind_types)
    operators = tuple(lowerer.expr(op.expr) for op in checked.operators)
    context = tuple(lowerer.expr(expr) for expr in checked.context)
    roots, lifts = run_passes(operators + context)
    binds = {b.name: lowerer.bind_expr(b.value) for b in checked.binds}
    program, plan = _program_and_plan(roots[: len(operators)], roots[len(operators) :], lifts, checked, binds,
                                      checked.schema)
    return CompiledRubric(
        name=checked.decl.name,
        schema=checked.schema,
        operators=_operator_table(checked),
        program=program,
        plan=plan,
        budgets=checked.budgets,
        lam=checked.lam,
        gamma=checked.gamma,
        step_scale=checked.step_scale,
    )


def compile_capability(checked: CheckedCapability) -> CompiledCapability:
    lowerer = Lowerer(checked.schema, checked.typing, {})
    needed, present = lowerer.expr(checked.decl.needed), lowerer.expr(checked.decl.present)
    bodies: list[Node] = []

    def collect(node: Node) -> Node:
        if node.op in ("any", "all", "agg_count"):
            bodies.append(node.args[0])
            return Node(node.op, (), node.type, len(bodies) - 1, loc=node.loc)
        return Node(node.op, tuple(collect(a) for a in node.args), node.type, node.value, loc=node.loc)

    needed, present = collect(needed), collect(present)
    roots, lifts = run_passes(tuple(bodies))
    program, plan = _program_and_plan(roots, (), lifts, None, {}, checked.schema)
    return CompiledCapability(checked.decl.name, checked.decl.description, needed, present, program, plan)


def _operator_table(checked: CheckedRubric) -> tuple[OperatorInfo, ...]:
    counts = {c: sum(op.category == c for op in checked.operators) for c in ast.CATEGORIES}
    return tuple(
        OperatorInfo(op.name, op.category, op.description, abs(checked.budgets[op.category]) / counts[op.category])
        for op in checked.operators
    )


def _program_and_plan(
    operators: tuple[Node, ...],
    context: tuple[Node, ...],
    lifts: tuple[LiftSource, ...],
    checked: CheckedRubric | None,
    binds: dict[str, Node],
    schema: CheckedSchema | None = None,
) -> tuple[KernelProgram, FactPlan]:
    columns: dict[str, T.Type] = {}
    for node in walk_nodes(operators + context):
        if node.op in ("load", "load_set"):
            columns[node.value] = node.type
    fields, bind_sources = [], []
    for name, type_ in sorted(columns.items()):
        prefix, _, rest = name.partition(".")
        if prefix in ("prev", "next", "act"):
            fields.append(FieldSource(name, prefix, rest, type_))
        elif prefix == "bind":
            assert checked is not None
            bind_sources.append(BindSource(name, rest, checked.bind_types[rest], binds[rest]))
    # Lifted predicates read raw text and facts themselves, but may need a binding that no kernel node loads.
    for lift in lifts:
        if lift.needle and lift.needle.kind == "bind" and f"bind.{lift.needle.value}" not in columns:
            name = lift.needle.value
            assert checked is not None
            bind_sources.append(BindSource(f"bind.{name}", name, checked.bind_types[name], binds[name]))
    specs = tuple(ColumnSpec(name, type_) for name, type_ in sorted(columns.items()))
    declared = () if schema is None else tuple(
        [SchemaField("state", f, t) for f, t in schema.state.items()]
        + [SchemaField("action", f, t) for f, t in schema.action.items()])
    plan = FactPlan(tuple(dict.fromkeys(fields)), tuple(dict.fromkeys(bind_sources)), lifts, declared)
    return KernelProgram(operators, context, specs), plan
