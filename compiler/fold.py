"""Pass: constant folding, with the three-valued rules.

A node whose arguments are all constants is evaluated by the reference interpreter (so folding cannot disagree with
it), unless the result would be unknown (`x / 0`), which has no constant form and stays as written. `and` / `or` with
one constant side simplify by Kleene logic: `false and x = false`, `true and x = x`, and dually for `or`.
"""

from __future__ import annotations

from tracec.compiler import interp
from tracec.compiler.ir import KERNEL_OPS, Node
from tracec.compiler.rewrite import rewrite
from tracec.dsl import types as T


def fold_constants(roots: tuple[Node, ...]) -> tuple[Node, ...]:
    return rewrite(roots, _fold)


def _fold(node: Node) -> Node:
    if node.op == "const" or not node.args or not all(arg.op == "const" for arg in node.args):
        return _simplify(node)
    if node.op not in KERNEL_OPS:
        return node  # text and aggregate ops are not the interpreter's to evaluate
    value, known = interp.evaluate(node, {}, 0)
    if not known:
        return node
    if node.type.kind == "float":
        value = float(value)
    elif node.type.kind == "int":
        value = int(value)
    elif node.type.kind == "bool":
        value = bool(value)
    return Node("const", (), node.type, value, loc=node.loc)


def _simplify(node: Node) -> Node:
    if node.op not in ("and", "or") or len(node.args) != 2:
        return node
    dominant = node.op == "or"  # the value that decides the result by itself
    for const, other in ((node.args[0], node.args[1]), (node.args[1], node.args[0])):
        if const.op == "const":
            if bool(const.value) == dominant:
                return Node("const", (), T.BOOL, dominant, loc=node.loc)
            return other
    return node
