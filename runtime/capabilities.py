"""Capability labels per episode (TRACE): NA (not needed), PRESENT (needed and present) or LACKING.

A capability's `needed` and `present` formulas combine episode aggregates: `any(e)` (some transition where `e` is
definitely true), `all(e)` (every transition definitely true; an unknown counts as not shown) and `count(e)` (how
many are). The per-transition bodies run as one kernel program; the aggregation and the episode-level formula are
evaluated here per episode. An episode without transitions: any = false, all = true, count = 0.
"""

from __future__ import annotations

import enum

import numpy as np
from tracec.compiler import interp
from tracec.compiler.backends import Kernel
from tracec.compiler.ir import Node
from tracec.compiler.pipeline import CompiledCapability
from tracec.runtime.facts.fact_batch import Column, FactBatch


class Label(enum.IntEnum):
    NA = 0
    PRESENT = 1
    LACKING = 2


def label_episodes(capability: CompiledCapability, kernel: Kernel, batch: FactBatch) -> list[Label]:
    """One label per episode of `batch` (built with the capability's fact plan)."""
    fired, _ = kernel.run(batch.columns, batch.n_transitions)  # (n_transitions, n_bodies)
    offsets = batch.episode_offsets
    labels = []
    for e in range(len(batch.episodes)):
        rows = fired[offsets[e] : offsets[e + 1]]
        needed = _episode_value(capability.needed, rows)
        present = _episode_value(capability.present, rows)
        labels.append(Label.NA if not needed else (Label.PRESENT if present else Label.LACKING))
    return labels


def _episode_value(formula: Node, rows: np.ndarray) -> bool:
    """Evaluate the episode-level formula: aggregates become constants, the rest is the interpreter's logic."""
    totals = rows.sum(axis=0) if rows.size else np.zeros(rows.shape[1], dtype=np.int64)
    n = rows.shape[0]

    def replace(node: Node) -> Node:
        if node.op == "any":
            return Node("const", (), node.type, bool(totals[node.value] > 0))
        if node.op == "all":
            return Node("const", (), node.type, bool(totals[node.value] == n))
        if node.op == "agg_count":
            return Node("const", (), node.type, int(totals[node.value]))
        return Node(node.op, tuple(replace(a) for a in node.args), node.type, node.value)

    value, known = interp.evaluate(replace(formula), _NO_COLUMNS, 0)
    return bool(known and value)


_NO_COLUMNS: dict[str, Column] = {}  # episode formulas read no columns once aggregates are constants
