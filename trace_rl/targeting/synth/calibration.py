"""Calibration: do a base policy's rewards on an environment make a usable GRPO signal?

GRPO learns from the spread of rewards inside a group of rollouts that share a seed; a group whose rewards are all
equal teaches nothing. From groups of K rollouts on S seeds this reports what TRACE's `calibrate_environment.py`
reports (mean and population std of the reward, success rate (reward >= 1), zero rate (reward <= 0), the rates
of constant, all-success, all-zero and informative groups, pass@k) and checks the same bands by default: mean
reward and success rate in [0.2, 0.6], std >= 0.05, at most 20% all-success and 20% all-zero groups, at most
50% constant groups, at least 50% informative ones. A per-seed table shows where the signal comes from.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tracec.trace_rl.targeting.synth.rollouts import Rollout

_EPS = 1e-9


@dataclass(frozen=True, kw_only=True)
class Bands:
    mean_reward: tuple[float, float] = (0.2, 0.6)
    success_rate: tuple[float, float] = (0.2, 0.6)
    min_std: float = 0.05
    max_all_success_groups: float = 0.2
    max_all_zero_groups: float = 0.2
    max_constant_groups: float = 0.5
    min_informative_groups: float = 0.5

    def __post_init__(self) -> None:
        for name in ("mean_reward", "success_rate"):
            low, high = getattr(self, name)
            if not 0 <= low <= high <= 1:
                raise ValueError(f"the {name.replace('_', ' ')} band {low:g}..{high:g} "
                                 "must satisfy 0 <= low <= high <= 1")


@dataclass(frozen=True, kw_only=True)
class SeedRow:
    seed: int
    rewards: tuple[float, ...]
    mean: float
    successes: int
    constant: bool


@dataclass(frozen=True, kw_only=True)
class Calibration:
    metrics: dict[str, Any]
    seeds: tuple[SeedRow, ...]
    failures: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "seeds": [asdict(s) for s in self.seeds], "failures": list(self.failures),
                "ok": self.ok}

    def render(self) -> str:
        m = self.metrics
        lines = [f"calibration: {m['num_rollouts']} rollouts, {m['num_groups']} seeds x {m['group_size']}",
                 (f"  mean reward {m['mean_reward']:.3f}  std {m['std_reward']:.3f}  success {m['success_rate']:.3f}  "
                 f"zero {m['zero_rate']:.3f}"),
                 (f"  groups: constant {m['constant_group_rate']:.2f}  all-success {m['all_success_group_rate']:.2f}  "
                 f"all-zero {m['all_zero_group_rate']:.2f}  informative {m['informative_group_rate']:.2f}"),
                 "  " + "  ".join(f"pass@{k} {v:.3f}" for k, v in m["pass_at_k"].items()),
                 "", "  seed  mean   successes  rewards"]
        for row in self.seeds:
            rewards = " ".join(f"{r:.2f}" for r in row.rewards)
            flag = "  (constant)" if row.constant else ""
            lines.append(f"  {row.seed:<4}  {row.mean:.3f}  {row.successes}/{len(row.rewards):<8} {rewards}{flag}")
        lines.append("ok" if self.ok else "FAILED: " + "; ".join(self.failures))
        return "\n".join(lines) + "\n"


def calibrate(rollouts: Sequence[Rollout], bands: Bands = Bands()) -> Calibration:
    if not rollouts:
        raise ValueError("calibration needs at least one rollout")
    groups: dict[int, list[float]] = {}
    for r in sorted(rollouts, key=lambda r: (r.seed, r.sample)):
        groups.setdefault(r.seed, []).append(r.reward)
    rewards = [r for group in groups.values() for r in group]
    size = max(len(g) for g in groups.values())
    n = len(groups)
    constant = sum(max(g) - min(g) <= _EPS for g in groups.values())
    all_success = sum(all(r >= 1 - _EPS for r in g) for g in groups.values())
    all_zero = sum(all(r <= _EPS for r in g) for g in groups.values())
    ks = sorted({1, size} | ({4} if size >= 4 else set()))
    metrics: dict[str, Any] = {
        "num_rollouts": len(rewards), "num_groups": n, "group_size": size,
        "mean_reward": statistics.fmean(rewards), "std_reward": statistics.pstdev(rewards),
        "success_rate": sum(r >= 1 - _EPS for r in rewards) / len(rewards),
        "zero_rate": sum(r <= _EPS for r in rewards) / len(rewards),
        "constant_group_rate": constant / n, "all_success_group_rate": all_success / n,
        "all_zero_group_rate": all_zero / n, "informative_group_rate": (n - constant) / n,
        "pass_at_k": {k: sum(any(r >= 1 - _EPS for r in g[:k]) for g in groups.values()) / n for k in ks},
    }
    rows = tuple(SeedRow(seed=s, rewards=tuple(g), mean=statistics.fmean(g), successes=sum(r >= 1 - _EPS for r in g),
                         constant=max(g) - min(g) <= _EPS) for s, g in groups.items())
    return Calibration(metrics=metrics, seeds=rows, failures=tuple(_failures(metrics, bands)))


def _failures(m: dict[str, Any], bands: Bands) -> list[str]:
    found = []
    for name, (low, high), easy, hard in (("mean reward", bands.mean_reward, "too easy", "too hard"),
                                          ("success rate", bands.success_rate, "too easy", "too hard")):
        value = m[name.replace(" ", "_")]
        if value < low:
            found.append(f"{name} {value:.3f} below {low:g} ({hard} for the base policy)")
        elif value > high:
            found.append(f"{name} {value:.3f} above {high:g} ({easy} for the base policy)")
    checks = ((m["std_reward"] < bands.min_std, f"reward std {m['std_reward']:.3f} below {bands.min_std:g}"),
              (m["all_success_group_rate"] > bands.max_all_success_groups,
               f"{m['all_success_group_rate']:.0%} of groups all succeed (at most {bands.max_all_success_groups:.0%})"),
              (m["all_zero_group_rate"] > bands.max_all_zero_groups,
               f"{m['all_zero_group_rate']:.0%} of groups all score 0 (at most {bands.max_all_zero_groups:.0%})"),
              (m["constant_group_rate"] > bands.max_constant_groups,
               f"{m['constant_group_rate']:.0%} of groups have one reward (at most {bands.max_constant_groups:.0%})"),
              (m["informative_group_rate"] < bands.min_informative_groups,
               (f"{m['informative_group_rate']:.0%} of groups are informative (at least "
               f"{bands.min_informative_groups:.0%})")))
    return found + [message for failed, message in checks if failed]
