"""Pass: lift text predicates out of the kernel.

Kernels read only numbers, so every `contains(text, needle)` and `matches(text, /re/)` becomes a load of a derived
bool column ("lift.K") that the fact builder computes once per transition. Equal predicates share one column.
"""

from __future__ import annotations

from tracec.compiler.ir import LiftSource, Node
from tracec.compiler.rewrite import rewrite


def lift_text(roots: tuple[Node, ...]) -> tuple[tuple[Node, ...], tuple[LiftSource, ...]]:
    lifts: dict[LiftSource, str] = {}

    def lift(node: Node) -> Node:
        if node.op not in ("contains", "matches"):
            return node
        text = node.args[0].value
        if node.op == "contains":
            key = LiftSource(column="", kind="contains", text=text, needle=node.value)
        else:
            pattern, ignore_case = node.value
            key = LiftSource(column="", kind="matches", text=text, pattern=pattern, ignore_case=ignore_case)
        column = lifts.setdefault(key, f"lift.{len(lifts)}")
        return Node("load", (), node.type, column, loc=node.loc)

    lifted = rewrite(roots, lift)
    sources = tuple(
        LiftSource(column, key.kind, key.text, key.needle, key.pattern, key.ignore_case)
        for key, column in lifts.items()
    )
    return lifted, sources
