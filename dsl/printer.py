"""Syntax tree back to `.rubric` source, with the fewest parentheses that keep the tree: `parse(print(m)) == m`.

The output is canonical (one item a line, two-space indent), so it doubles as a formatter.
"""

from __future__ import annotations

from tracec.dsl import ast

# Binding strength; higher binds tighter. Comparisons do not chain, so both their operands need to be tighter.
_PRECEDENCE = {
    "or": 1,
    "and": 2,
    "not": 3,
    "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4, "in": 4,
    "+": 5, "-": 5,
    "*": 6, "/": 6,
    "neg": 7,
}
_ATOM = 8
_COMPARISONS = {"==", "!=", "<", "<=", ">", ">=", "in"}


def print_module(module: ast.Module) -> str:
    return "\n".join(print_decl(d) for d in module.decls)


def print_decl(decl: ast.Decl) -> str:
    if isinstance(decl, ast.Schema):
        state = "".join(f"    {f.name}: {print_type(f.type)}\n" for f in decl.state)
        action = "".join(f"    {f.name}: {print_type(f.type)}\n" for f in decl.action)
        return f"schema {decl.name} {{\n  state {{\n{state}  }}\n  action {{\n{action}  }}\n}}\n"
    if isinstance(decl, ast.Rubric):
        body = "".join(f"  {_rubric_item(item)}\n" for item in decl.items)
        return f"rubric {decl.name} for {decl.schema} {{\n{body}}}\n"
    if isinstance(decl, ast.Capability):
        return (
            f"capability {decl.name} {_quote(decl.description)} for {decl.schema} {{\n"
            f"  needed: {print_expr(decl.needed)}\n  present: {print_expr(decl.present)}\n}}\n"
        )
    body = "".join(f"  {line}\n" for item in decl.items for line in _env_item(item))
    return f"environment {decl.name} {_quote(decl.description)} {{\n{body}}}\n"


def print_type(type_: ast.TypeRef) -> str:
    return f"{type_.name}({', '.join(type_.args)})" if type_.args else type_.name


def _rubric_item(item: ast.RubricItem) -> str:
    if isinstance(item, ast.Bind):
        return f"bind {item.name}: {print_type(item.type)} = {print_expr(item.value)}"
    if isinstance(item, ast.Operator):
        return f"{item.category} {item.name} {_quote(item.description)}: {print_expr(item.expr)}"
    if isinstance(item, ast.Budget):
        return "budget " + ", ".join(f"{e.category} {_number(e.value)}" for e in item.entries)
    if isinstance(item, ast.Setting):
        return f"{item.key} {_number(item.value)}"
    if isinstance(item, ast.StepScale):
        return f"step_scale {item.mode}"
    return "context " + ", ".join(print_expr(e) for e in item.exprs)


def _env_item(item: ast.EnvItem) -> list[str]:
    if isinstance(item, ast.EnvCapability):
        return [f"capability {item.name}"]
    if isinstance(item, ast.Table):
        columns = ", ".join(f"{c.name}: {_generator(c.generator)}" for c in item.columns)
        where = f" where {print_expr(item.where)}" if item.where is not None else ""
        return [f"table {item.name}({columns}) rows {item.rows_min}..{item.rows_max}{where}"]
    if isinstance(item, ast.Let):
        return [(f"let {item.name} = "
                 f"{_pick(item.value) if isinstance(item.value, ast.Pick) else print_expr(item.value)}")]
    if isinstance(item, ast.Task):
        return [f"task {_template(item.text)}"]
    if isinstance(item, ast.Hint):
        return [f"hint {_quote(item.text)}"]
    if isinstance(item, ast.Tool):
        params = ", ".join(f"{p.name}: {print_type(p.type)}" for p in item.params)
        head = f"tool {item.name}({params})"
        if isinstance(item.body, ast.Query):
            where = f" where {print_expr(item.body.where)}" if item.body.where is not None else ""
            return [f"{head} -> {item.body.table}{where}"]
        lines = [head]
        lines += [f"  require {print_expr(r.cond)} else {_template(r.message)}" for r in item.body.requires]
        lines += [
            f"  set {a.table}[{print_expr(a.key)}].{a.column} = {print_expr(a.value)}" for a in item.body.assigns
        ]
        return lines
    if isinstance(item, ast.Solution):
        calls = "; ".join(f"{c.tool}({', '.join(print_expr(a) for a in c.args)})" for c in item.calls)
        return [f"solution {calls}"]
    if isinstance(item, ast.Report):
        return ["report " + ", ".join(print_expr(e) for e in item.exprs)]
    return [f"reward {print_expr(item.expr)}"]


def _generator(gen: ast.Generator) -> str:
    if gen.kind in ("int", "float") and gen.args:
        return f"{gen.kind} {_number(gen.args[0])}..{_number(gen.args[1])}"  # type: ignore[arg-type]
    if gen.kind == "ref":
        return f"ref {gen.args[0]}"
    if gen.args:
        return f"{gen.kind}({', '.join(str(a) for a in gen.args)})"
    return gen.kind


def _pick(pick: ast.Pick) -> str:
    where = f" where {print_expr(pick.where)}" if pick.where is not None else ""
    return f"pick({pick.table}{where})"


def _number(value: float) -> str:
    return repr(value)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _template(template: ast.Template) -> str:
    out = []
    for part in template.parts:
        if isinstance(part, str):
            out.append(_quote(part)[1:-1].replace("{", "{{").replace("}", "}}"))
        else:
            out.append("{" + print_expr(part) + "}")
    return '"' + "".join(out) + '"'


def print_expr(expr: ast.Expr) -> str:
    return _expr(expr)[0]


def _expr(expr: ast.Expr) -> tuple[str, int]:
    """Source text and the binding strength of its outermost construct."""
    if isinstance(expr, ast.Literal):
        value = expr.value
        if isinstance(value, bool):
            return ("true" if value else "false"), _ATOM
        if isinstance(value, str):
            return _quote(value), _ATOM
        text = repr(value)
        return text, (_PRECEDENCE["neg"] if text.startswith("-") else _ATOM)
    if isinstance(expr, ast.Regex):
        return f"/{expr.pattern}/{'i' if expr.ignore_case else ''}", _ATOM
    if isinstance(expr, ast.Name):
        return expr.id, _ATOM
    if isinstance(expr, ast.Param):
        return f"${expr.id}", _ATOM
    if isinstance(expr, ast.Score):
        return expr.kind, _ATOM
    if isinstance(expr, ast.Fact):
        return f"{expr.side}.{expr.field}", _ATOM
    if isinstance(expr, ast.Attr):
        return f"{_wrap(expr.base, _ATOM)}.{expr.field}", _ATOM
    if isinstance(expr, ast.Index):
        return f"{_wrap(expr.base, _ATOM)}[{print_expr(expr.key)}]", _ATOM
    if isinstance(expr, ast.Call):
        return f"{expr.func}({', '.join(print_expr(a) for a in expr.args)})", _ATOM
    if isinstance(expr, ast.SetLiteral):
        return "{" + ", ".join(print_expr(i) for i in expr.items) + "}", _ATOM
    if isinstance(expr, ast.Unary):
        if expr.op == "not":
            return f"not {_wrap(expr.operand, _PRECEDENCE['not'])}", _PRECEDENCE["not"]
        return f"-{_wrap(expr.operand, _PRECEDENCE['neg'])}", _PRECEDENCE["neg"]
    strength = _PRECEDENCE[expr.op]
    if expr.op in _COMPARISONS:
        left, right = _wrap(expr.left, strength + 1), _wrap(expr.right, strength + 1)
    else:  # left-associative: a right operand of equal strength needs parentheses
        left, right = _wrap(expr.left, strength), _wrap(expr.right, strength + 1)
    return f"{left} {expr.op} {right}", strength


def _wrap(expr: ast.Expr, needed: int) -> str:
    text, strength = _expr(expr)
    return text if strength >= needed else f"({text})"
