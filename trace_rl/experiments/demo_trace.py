"""The demo's TRACE section: capability adapters against GRPO on the demo's own games, at a demo's budget.

    summary = trace_section(setup, grpo_adapter, DEMO_TRACE, workdir)

The base agent is the demo's sparse-GRPO run (its last adapter folded into the small policy); the rest is
`TraceExperiment` at a small budget (`DEMO_TRACE`: three labelling runs of the 32 training games, capability
environments of 1-2-step quests in 4 turns from a pool of 64 games, 128 rollouts an adapter, one seed), every
condition on the demo's held-out games. It prints the table with 95% intervals over the games and one headline
line: TRACE routed against GRPO on the target at equal rollouts, and what one seed at this budget can tell apart.
The measurement (five seeds, 256 training games) is `bench/trace_textworld.py`, in bench/RESULTS.md.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
from tracec.trace_rl.experiments.learning_curve import Setup
from tracec.trace_rl.experiments.learning_stats import paired_difference
from tracec.trace_rl.experiments.trace_experiment import (
    GRPO_TARGET,
    TraceBudget,
    TraceExperiment,
    summary_lines,
    table_rows,
)

DEMO_TRACE = TraceBudget(collection_games=32, label_runs=3, label_episodes=2, k=2, pool_games=64, env_games=16,
                         adapter_iterations=4, groups=4, group_size=8, eval_episodes=4, calibration_episodes=4,
                         seeds=1)


def trace_section(setup: Setup, base_adapter: Path, budget: TraceBudget, workdir: Path) -> dict[str, Any]:
    """Run the section in `workdir/trace` (made afresh: the demo's numbers are its own), print it, return its
    numbers."""
    folder = workdir / "trace"
    if folder.exists():
        shutil.rmtree(folder)
    experiment = TraceExperiment(setup, budget, folder, split="held-out", base_adapter=base_adapter)
    table = experiment.run()
    print(f"  base agent (sparse GRPO's last adapter, folded in): held-out success {np.mean(table['base']):.3f}")
    for line in summary_lines(table):
        print(f"  {line}")
    conditions = table["conditions"]
    if not conditions:
        return {"kept": table["kept"]}
    header, rows = table_rows(table)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths)))
    print(headline(conditions))
    return {"kept": table["kept"], "conditions": {name: wins.tolist() for name, wins in conditions.items()}}


def headline(conditions: dict[str, np.ndarray]) -> str:
    """TRACE routed minus GRPO on the target with its interval over the games, and what it lets one say."""
    if "TRACE routed" not in conditions:
        return "  selection kept no capability: nothing to route"
    difference = paired_difference(conditions[GRPO_TARGET], conditions["TRACE routed"])
    half = (difference.high - difference.low) / 2
    verdict = ("TRACE ahead" if difference.low > 0 else "GRPO ahead") if difference.excludes_zero() else \
        f"the interval holds 0: one seed at this budget cannot tell apart differences below ~{half:.2f}"
    return (f"  TRACE routed - GRPO on the target, equal rollouts: {difference} (paired over the same games, 95%); "
            f"{verdict}; bench/RESULTS.md \"trace textworld test\" has five seeds")
