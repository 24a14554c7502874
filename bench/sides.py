"""Timing implementations side by side, interleaved round by round.

These machines are shared and their speed drifts over minutes; timing one implementation after another lets the
drift land in the ratios. Here every round runs each side in turn (a fast side a few times), so drift slows every
side alike, and each side's figure is its best time over all rounds. pytest-benchmark drives the rounds (its own
figure is the whole round).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping


def best_times(benchmark, sides: Mapping[str, tuple[Callable[[], object], int]], rounds: int) -> dict[str, float]:
    """{side: best seconds} for sides given as {name: (run, repeats per round)}; run each once before, to warm."""
    best = dict.fromkeys(sides, math.inf)

    def one_round() -> None:
        for name, (run, repeats) in sides.items():
            for _ in range(repeats):
                start = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - start)

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    return best
