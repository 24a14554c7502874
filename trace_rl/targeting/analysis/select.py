"""Contrastive capability selection across labeling runs: TRACE's released aggregation, reproduced exactly.

Per run r and capability c, with LF, PF, LP, PP the sizes of `lacking_failed`, `present_failed`,
`lacking_passed`, `present_passed`:
    Cov = LF / total_failed          (0 when the run has no failures)
    ER- = LF / (LF + PF)             ER+ = LP / (LP + PP)        (each 0 for an empty denominator)
    Delta = ER- - ER+
c passes run r when Cov >= rho and Delta >= delta (a run without c does not pass); c is kept when it passes in at
least k runs. Means and population standard deviations are over the runs in which c appears (numpy's, as the
released script computes them, so the floats agree to the last bit); `example_failed_cases` is the first 8 of the
text-sorted union of c's `lacking_failed` ids over all runs; kept capabilities are sorted by mean Delta, largest
first, ties by name. The output is TRACE's `selected_capabilities.json`: the kept capabilities, `status: PENDING`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tracec.trace_rl.targeting.analysis.runs import Run

EXAMPLES = 8


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    rho: float = 0.10
    delta: float = 0.20
    k: int = 8

    def __post_init__(self) -> None:
        if not 0 <= self.rho <= 1:
            raise ValueError(f"--rho {self.rho} must lie in [0, 1] (a share of the failed trajectories)")
        if not -1 <= self.delta <= 1:
            raise ValueError(f"--delta {self.delta} must lie in [-1, 1] (a difference of two rates)")
        if self.k < 1:
            raise ValueError(f"--k {self.k} must be at least 1 (runs a capability must pass)")


@dataclass(frozen=True, kw_only=True)
class RunMetrics:
    cov: float
    er_minus: float
    er_plus: float
    delta: float
    passed: bool


@dataclass(frozen=True, kw_only=True)
class Summary:
    skill: str
    description: str
    per_run: tuple[RunMetrics | None, ...]  # one per run, None where the run lacks the capability
    mean_cov: float
    std_cov: float
    mean_delta: float
    std_delta: float
    n_runs_passed: int
    passes_consistency: bool
    example_failed_cases: tuple[str, ...]

    def record(self) -> dict[str, Any]:
        """The entry of `selected_capabilities.json`, fields in TRACE's order."""
        return {
            "skill": self.skill, "description": self.description, "mean_cov": self.mean_cov,
            "std_cov": self.std_cov, "mean_delta": self.mean_delta, "std_delta": self.std_delta,
            "n_runs_passed": self.n_runs_passed, "n_runs_total": len(self.per_run),
            "passes_consistency": self.passes_consistency,
            "example_failed_cases": list(self.example_failed_cases), "status": "PENDING",
        }


def run_metrics(run: Run, skill: str, thresholds: Thresholds) -> RunMetrics:
    buckets = run.labels[skill]
    lf, pf = len(buckets["lacking_failed"]), len(buckets["present_failed"])
    lp, pp = len(buckets["lacking_passed"]), len(buckets["present_passed"])
    cov = lf / run.total_failed if run.total_failed > 0 else 0.0
    er_minus = lf / (lf + pf) if lf + pf > 0 else 0.0
    er_plus = lp / (lp + pp) if lp + pp > 0 else 0.0
    delta = er_minus - er_plus
    return RunMetrics(cov=cov, er_minus=er_minus, er_plus=er_plus, delta=delta,
                      passed=cov >= thresholds.rho and delta >= thresholds.delta)


def summarize(runs: Sequence[Run], thresholds: Thresholds = Thresholds(),
              descriptions: Mapping[str, str] | None = None) -> list[Summary]:
    """Every capability of any run, in name order, with its per-run metrics and whether it is kept."""
    if not runs:
        raise ValueError("selection needs at least one run file")
    skills = sorted({skill for run in runs for skill in run.labels})
    summaries = []
    for skill in skills:
        per_run = tuple(run_metrics(run, skill, thresholds) if skill in run.labels else None for run in runs)
        present = [m for m in per_run if m is not None]
        covs, deltas = [m.cov for m in present], [m.delta for m in present]
        passes = sum(m.passed for m in present)
        failed = sorted({i for run in runs if skill in run.labels for i in run.labels[skill]["lacking_failed"]})
        summaries.append(Summary(
            skill=skill, description=(descriptions or {}).get(skill, ""), per_run=per_run,
            mean_cov=float(np.mean(covs)), std_cov=float(np.std(covs)),
            mean_delta=float(np.mean(deltas)), std_delta=float(np.std(deltas)),
            n_runs_passed=passes, passes_consistency=passes >= thresholds.k,
            example_failed_cases=tuple(failed[:EXAMPLES]),
        ))
    return summaries


def selected(summaries: Sequence[Summary]) -> list[Summary]:
    """The kept capabilities, largest mean Delta first (a stable sort over names breaks ties)."""
    return sorted((s for s in summaries if s.passes_consistency), key=lambda s: -s.mean_delta)


def render_table(summaries: Sequence[Summary], thresholds: Thresholds, runs: Sequence[Run]) -> str:
    """The console table: every capability with its mean Cov, ER-, ER+, Delta (± std) and passes; kept ones marked."""
    header = ("capability", "mean Cov", "mean ER-", "mean ER+", "mean Delta", "passes", "kept")
    rows = []
    for s in sorted(summaries, key=lambda s: (not s.passes_consistency, -s.mean_delta, s.skill)):
        present = [m for m in s.per_run if m is not None]
        rows.append((s.skill, f"{s.mean_cov:.3f} ± {s.std_cov:.3f}",
                     f"{float(np.mean([m.er_minus for m in present])):.3f}",
                     f"{float(np.mean([m.er_plus for m in present])):.3f}",
                     f"{s.mean_delta:+.3f} ± {s.std_delta:.3f}", f"{s.n_runs_passed}/{len(runs)}",
                     "yes" if s.passes_consistency else ""))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    kept = sum(s.passes_consistency for s in summaries)
    lines.append(f"kept {kept} of {len(summaries)}: Cov >= {thresholds.rho:g} and Delta >= {thresholds.delta:g} "
                 f"in at least {thresholds.k} of {len(runs)} runs")
    return "\n".join(lines) + "\n"

