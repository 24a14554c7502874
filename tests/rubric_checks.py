"""What the test of every shipped rubric asserts: its Invalidity operators mean what they say.

On the gold (or walkthrough) episodes of the rubric's target no Invalidity operator fires: a correct agent is never
punished. On random or careless play every Invalidity operator fires somewhere: none is dead. Every such test calls
`assert_invalidity_profile`, which is how `tests/examples/test_every_rubric_is_tested.py` finds them.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from tracec.runtime.scored_batch import ScoredBatch
from tracec.runtime.scoring import RubricScorer


def firings(scorer: RubricScorer, result: ScoredBatch) -> dict[str, dict[str, int]]:
    """operator -> {episode: how many of its steps the operator fired on}."""
    offsets = result.batch.episode_offsets
    counts: dict[str, dict[str, int]] = {op.name: {} for op in scorer.compiled.operators}
    for e, episode in enumerate(result.batch.episodes):
        per_operator = np.asarray(result.fired[offsets[e] : offsets[e + 1]]).sum(axis=0)
        for op, count in zip(scorer.compiled.operators, per_operator):
            if count:
                counts[op.name][episode] = int(count)
    return counts


def assert_invalidity_profile(scorer: RubricScorer, result: ScoredBatch, gold: Iterable[str],
                              others: Iterable[str]) -> dict[str, dict[str, int]]:
    """No Invalidity operator fires on a `gold` episode; each fires on some episode of `others`."""
    gold, others = set(gold), set(others)
    assert gold and others and gold | others <= set(result.batch.episodes)
    fired = firings(scorer, result)
    invalidity = [op.name for op in scorer.compiled.operators if op.category == "invalidity"]
    on_gold = {name: sorted(set(fired[name]) & gold) for name in invalidity if set(fired[name]) & gold}
    assert not on_gold, f"Invalidity operators fire on gold episodes: {on_gold}"
    dead = [name for name in invalidity if not set(fired[name]) & others]
    assert not dead, f"Invalidity operators that never fire on random or careless play: {dead}"
    return fired
