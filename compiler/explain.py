"""Human-readable listings of a compiled rubric: the operator table, the lowered IR, and the fact plan.

The IR is printed one value per line in SSA form (`%4 = has %2, %3 : bool`), shared subexpressions once, so the
listing shows exactly what a kernel computes per transition.
"""

from __future__ import annotations

from tracec.compiler.ir import Node
from tracec.compiler.pipeline import CompiledRubric
from tracec.compiler.rewrite import walk_nodes


def explain(compiled: CompiledRubric) -> str:
    lines = [f"rubric {compiled.name} for {compiled.schema.name}", ""]
    lines += _operator_table(compiled)
    budgets = ", ".join(f"{c} {v:g}" for c, v in compiled.budgets.items())
    settings = f"lambda {compiled.lam:g}; gamma {compiled.gamma:g}; step_scale {compiled.step_scale}"
    lines += ["", f"budget {budgets}; {settings}", "", "ir:"]
    lines += ["  " + line for line in format_ir(compiled.program.operators, compiled.program.context, compiled)]
    lines += ["", "facts:"]
    lines += [f"  {f.column}: {f.type}" for f in compiled.plan.fields]
    lines += [f"  {b.column}: {b.type} = {_bind(b.expr)}" for b in compiled.plan.binds]
    for lift in compiled.plan.lifts:
        if lift.kind == "contains":
            assert lift.needle is not None
            needle = f'"{lift.needle.value}"' if lift.needle.kind == "const" else lift.needle.value
            lines.append(f"  {lift.column}: bool = contains({lift.text}, {needle})")
        else:
            flag = "i" if lift.ignore_case else ""
            lines.append(f"  {lift.column}: bool = matches({lift.text}, /{lift.pattern}/{flag})")
    return "\n".join(lines) + "\n"


def _operator_table(compiled: CompiledRubric) -> list[str]:
    rows = [("operator", "category", "weight", "description")]
    rows += [(op.name, op.category, f"{op.weight:.4g}", op.description) for op in compiled.operators]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths)) + "  " + row[3] for row in rows]


def format_ir(operators: tuple[Node, ...], context: tuple[Node, ...], compiled: CompiledRubric) -> list[str]:
    names: dict[int, str] = {}
    lines = []
    for node in walk_nodes(operators + context):
        name = names[id(node)] = f"%{len(names)}"
        args = ", ".join(names[id(arg)] for arg in node.args)
        shown = f"{node.op} {args}" if args else node.op
        if node.op == "const":
            shown = f"const {_constant(node)}"
        elif node.op in ("load", "load_set"):
            shown = f"{node.op} {node.value}"
        lines.append(f"{name} = {shown} : {node.type}")
    for index, root in enumerate(operators):
        lines.append(f"out {compiled.operators[index].name} = {names[id(root)]}")
    for root in context:
        lines.append(f"context {names[id(root)]}")
    return lines


def _constant(node: Node) -> str:
    if node.type.kind == "enum":
        return f"{node.value} ({node.type.members[node.value]})"
    if isinstance(node.value, bool):
        return "true" if node.value else "false"
    return repr(node.value)


def _bind(node: Node) -> str:
    if node.op == "instruction":
        return "instruction"
    if node.op == "const":
        return repr(node.value)
    if node.op == "lower":
        return f"lower({_bind(node.args[0])})"
    pattern, ignore_case, group = node.value
    return f"match({_bind(node.args[0])}, /{pattern}/{'i' if ignore_case else ''}, {group})"
