"""Bottom-up rewriting of IR trees, the one traversal every pass shares."""

from __future__ import annotations

from collections.abc import Callable

from tracec.compiler.ir import Node


def rewrite(roots: tuple[Node, ...], visit: Callable[[Node], Node]) -> tuple[Node, ...]:
    """Rebuild every root with `visit` applied to each node after its arguments were rewritten."""
    memo: dict[int, Node] = {}

    def walk(node: Node) -> Node:
        done = memo.get(id(node))
        if done is not None:
            return done
        args = tuple(walk(arg) for arg in node.args)
        unchanged = all(new is old for new, old in zip(args, node.args))  # identity: CSE swaps in equal objects
        rebuilt = node if unchanged else Node(node.op, args, node.type, node.value, loc=node.loc)
        memo[id(node)] = result = visit(rebuilt)
        return result

    return tuple(walk(root) for root in roots)


def walk_nodes(roots: tuple[Node, ...]) -> list[Node]:
    """Every distinct node (by identity) reachable from the roots, arguments before users."""
    seen: set[int] = set()
    order: list[Node] = []

    def visit(node: Node) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        for arg in node.args:
            visit(arg)
        order.append(node)

    for root in roots:
        visit(root)
    return order
