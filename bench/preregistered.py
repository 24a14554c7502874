"""The pre-registered comparison's analysis (docs/learning.md, "The next comparison, pre-registered"), read from a
`bench/learning.py` experiment's runs grouped by method label:
- primary: GRPO + TRCA minus each of sparse GRPO, shaped GRPO and GiGPO in the seed-paired area under the held-out
  success curve, the exact sign-flip p-value and Holm's adjustment over the comparisons present;
- secondary: the same difference on the CPU-seconds axis (compute-matched: over the first CPU seconds every run of
  both spent), each method's per-seed rollouts to reach success 0.2, 0.3 and 0.4, and the greedy final.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tracec.trace_rl.experiments.learning_stats import holm, level_reaches, seed_paired_area, seed_paired_cost_area

from bench.results import markdown_table

TRCA = "GRPO + TRCA"
AGAINST = ("sparse GRPO", "shaped GRPO", "GiGPO")
LEVELS = (0.2, 0.3, 0.4)


def wins_array(runs: list[dict[str, Any]], key: str = "wins") -> np.ndarray:
    """(seeds, points, games, episodes) sampled wins, or (seeds, points, games, 1) greedy ones."""
    if key == "greedy_wins":
        return np.array([[[[w] for w in p["greedy_wins"]] for p in run["points"]] for run in runs], dtype=float)
    return np.array([[p["wins"] for p in run["points"]] for run in runs], dtype=float)


def analysis(grouped: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The primary and secondary metrics of the runs in `grouped` (label -> runs in seed order, each with its
    `points` and `cpu_s`); comparisons whose methods were evaluated at other points are left out."""
    rollouts = {label: [p["rollouts"] for p in runs[0]["points"]] for label, runs in grouped.items()}
    wins = {label: wins_array(runs) for label, runs in grouped.items()}
    reaches = {label: {f"{level:.1f}": level_reaches(rollouts[label], wins[label], level) for level in LEVELS}
               for label in grouped}
    greedy = {label: wins_array(runs, "greedy_wins")[:, -1].mean(axis=(1, 2)).round(4).tolist()
              for label, runs in grouped.items()}
    comparisons: dict[str, dict[str, Any]] = {}
    if TRCA in grouped:
        trca, axis = wins[TRCA], rollouts[TRCA]
        for label in [k for k in AGAINST if k in grouped and rollouts[k] == axis]:
            other = wins[label]
            area = seed_paired_area(axis, other, trca)
            cost = seed_paired_cost_area(axis, other, [r["cpu_s"] for r in grouped[label]], trca,
                                         [r["cpu_s"] for r in grouped[TRCA]])
            comparisons[f"TRCA - {label}"] = {"area": area.mean, "p": area.p_value, "seeds": len(area.differences),
                                              "cpu_area": cost.mean, "cpu_p": cost.p_value}
        for entry, adjusted in zip(comparisons.values(), holm([c["p"] for c in comparisons.values()]), strict=True):
            entry["holm_p"] = adjusted
    return {"comparisons": comparisons, "reaches": reaches, "greedy_final": greedy}


def report(result: dict[str, Any]) -> str:
    """The analysis as Markdown: the primary table, then the reaches and greedy finals by method."""
    lines = []
    if result["comparisons"]:
        lines += [("**Pre-registered** (docs/learning.md): the seed-paired difference in area under the held-out "
                   "success curve, exact sign-flip p, Holm-adjusted over the comparisons shown (alpha 0.05); the "
                   "same over the first CPU seconds every run of both spent:"), "",
                  markdown_table(["comparison", "seeds", "area diff", "p", "Holm p", "CPU-seconds area diff", "p"],
                                 [[name, c["seeds"], f"{c['area']:+.3f}", f"{c['p']:.4f}", f"{c['holm_p']:.4f}",
                                   f"{c['cpu_area']:+.3f}", f"{c['cpu_p']:.4f}"]
                                  for name, c in result["comparisons"].items()]), ""]
    rows = []
    for label, by_level in result["reaches"].items():
        cells = []
        for found in by_level.values():
            reached = [r for r in found if r is not None]
            median = f", median {np.median(reached):.0f}" if 2 * len(reached) > len(found) else ""
            cells.append(f"{len(reached)}/{len(found)} seeds{median}")
        rows.append([label, *cells, " ".join(f"{x:.2f}" for x in result["greedy_final"][label])])
    lines += [("Rollouts to reach a held-out success level, each seed on its own curve (seeds that reached it; the "
               "median over seeds where most did), and the greedy final per seed:"), "",
              markdown_table(["method", *[f"reach {level:.1f}" for level in LEVELS], "greedy final per seed"], rows)]
    return "\n".join(lines)
