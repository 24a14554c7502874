"""Pass: common-subexpression elimination.

IR nodes compare by structure, so interning them makes every repeated subexpression one shared object; the code
generators then compute each shared node once per transition.
"""

from __future__ import annotations

from tracec.compiler.ir import Node
from tracec.compiler.rewrite import rewrite


def eliminate_common_subexpressions(roots: tuple[Node, ...]) -> tuple[Node, ...]:
    canonical: dict[Node, Node] = {}
    return rewrite(roots, lambda node: canonical.setdefault(node, node))
