"""bench/preregistered.py: the pre-registered comparisons are TRCA minus each baseline, Holm-adjusted together."""

from __future__ import annotations

from typing import Any

import numpy as np
from tracec.trace_rl.experiments.learning_stats import holm, seed_paired_area, seed_paired_cost_area

from bench.preregistered import analysis, report

ROLLOUTS = [0, 64, 128]


def _runs(rates: list[list[float]], cpu_s: float, rng: np.random.Generator) -> list[dict[str, Any]]:
    """One run a seed, each point's (games, episodes) wins drawn at that point's rate."""
    return [{"cpu_s": cpu_s, "points": [{"rollouts": r, "wins": (rng.random((4, 2)) < rate).astype(float).tolist(),
                                         "greedy_wins": [1.0, 0.0, 0.0, 0.0]} for r, rate in zip(ROLLOUTS, curve)]}
            for curve in rates]


def test_each_baseline_is_subtracted_from_trca_and_the_p_values_are_adjusted_together() -> None:
    rng = np.random.default_rng(1)
    grouped = {"sparse GRPO": _runs([[0.0, 0.2, 0.4]] * 4, 100.0, rng),
               "GRPO + TRCA": _runs([[0.0, 0.6, 0.8]] * 4, 150.0, rng),
               "GiGPO": _runs([[0.0, 0.3, 0.5]] * 4, 120.0, rng)}
    result = analysis(grouped)
    assert list(result["comparisons"]) == ["TRCA - sparse GRPO", "TRCA - GiGPO"]  # shaped GRPO was not run

    def wins(label: str) -> np.ndarray:
        return np.array([[p["wins"] for p in run["points"]] for run in grouped[label]])
    trca = wins("GRPO + TRCA")
    for label in ("sparse GRPO", "GiGPO"):
        entry = result["comparisons"][f"TRCA - {label}"]
        assert entry["area"] == seed_paired_area(ROLLOUTS, wins(label), trca).mean > 0
        assert entry["cpu_area"] == seed_paired_cost_area(ROLLOUTS, wins(label), [r["cpu_s"] for r in grouped[label]],
                                                          trca, [150.0] * 4).mean
    p_values = [c["p"] for c in result["comparisons"].values()]
    assert [c["holm_p"] for c in result["comparisons"].values()] == holm(p_values)
    assert result["greedy_final"]["GiGPO"] == [0.25] * 4
    assert "| TRCA - GiGPO | 4 |" in report(result)
