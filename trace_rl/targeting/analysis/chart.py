"""The selection chart: mean coverage and mean Delta per capability (bars with ± one std), the two thresholds as
lines, kept capabilities in colour and the rest in grey, the passes `k/n` over each pair of bars.

Drawn on a bare `matplotlib.figure.Figure` with the Agg canvas, never through `pyplot`, so no global figure state
or display backend is involved; written atomically as PNG.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from tracec.trace_rl.targeting.analysis.select import Summary, Thresholds

from tracec.atomic import atomic_path

_KEPT_COV, _KEPT_DELTA, _DROPPED = "#4C72B0", "#DD8452", "#BBBBBB"


def write_chart(path: str | os.PathLike[str], summaries: Sequence[Summary], thresholds: Thresholds,
                n_runs: int) -> None:
    order = sorted(summaries, key=lambda s: (not s.passes_consistency, -s.mean_delta, s.skill))
    figure = Figure(figsize=(max(6.0, 1.1 * len(order) + 2), 5.0), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    xs = range(len(order))
    width = 0.38
    axes.bar([x - width / 2 for x in xs], [s.mean_cov for s in order], width, yerr=[s.std_cov for s in order],
             color=[_KEPT_COV if s.passes_consistency else _DROPPED for s in order], capsize=3, label="coverage")
    axes.bar([x + width / 2 for x in xs], [s.mean_delta for s in order], width, yerr=[s.std_delta for s in order],
             color=[_KEPT_DELTA if s.passes_consistency else _DROPPED for s in order], capsize=3, hatch="//",
             label="Delta")
    axes.axhline(thresholds.rho, color=_KEPT_COV, linestyle="--", linewidth=1, label=f"rho = {thresholds.rho:g}")
    axes.axhline(thresholds.delta, color=_KEPT_DELTA, linestyle=":", linewidth=1,
                 label=f"delta = {thresholds.delta:g}")
    top = max([1.0, *(s.mean_delta + s.std_delta for s in order), *(s.mean_cov + s.std_cov for s in order)])
    for x, s in zip(xs, order):
        axes.text(x, top * 1.02, f"{s.n_runs_passed}/{n_runs}", ha="center", va="bottom", fontsize=8)
    axes.set_ylim(min(0.0, *(s.mean_delta - s.std_delta for s in order)) if order else 0.0, top * 1.3)
    axes.set_xticks(list(xs), [s.skill for s in order], rotation=35, ha="right", fontsize=8)
    axes.set_ylabel("mean over runs (± std)")
    axes.set_title(f"capability selection: kept when passing in >= {thresholds.k} of {n_runs} runs")
    axes.legend(fontsize=8, loc="upper center", ncol=4, frameon=False)  # above the bars and counts
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
