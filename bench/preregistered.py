"""The pre-registered comparison's analysis (docs/learning.md, "The next comparison, pre-registered"), read from a
`bench/learning.py` experiment's runs grouped by method label:
- primary: GRPO + TRCA minus each of sparse GRPO, shaped GRPO (the same rubric's) and GiGPO in the seed-paired area
  under the held-out success curve (with its 95% bootstrap interval over seeds and games), the exact sign-flip
  p-value and Holm's adjustment over the comparisons of a rubric (the objective-reading one and the blind one, each
  its own family of three);
- the claims that follow from it, decided by rule (`claims`);
- secondary: the same difference on the CPU-seconds axis (compute-matched: over the first CPU seconds every run of
  both spent), each method's per-seed rollouts to reach success 0.2, 0.3 and 0.4, and the greedy final;
- before any of that, each method's learning rate chosen on the validation runs (`chosen_rate`):

    python bench/preregistered.py rates out/val-1e-3-q24 out/val-2e-3-q24 out/val-5e-3-q24
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracec.trace_rl.experiments.learning_stats import (
    Interval,
    area_under_curve,
    holm,
    level_reaches,
    paired_auc,
    seed_paired_area,
    seed_paired_cost_area,
    seeds_both_ran,
)

from bench.results import markdown_table

TRCA, TRCA_BLIND = "GRPO + TRCA", "GRPO + TRCA, blind rubric"
SHAPED, SHAPED_BLIND = "shaped GRPO", "shaped GRPO, blind rubric"
# each rubric's TRCA, its short name in the table, and the three it is compared with (Holm's family)
FAMILIES = ((TRCA, "TRCA", ("sparse GRPO", SHAPED, "GiGPO")),
            (TRCA_BLIND, "TRCA blind", ("sparse GRPO", SHAPED_BLIND, "GiGPO")))
LEVELS = (0.2, 0.3, 0.4)
ALPHA = 0.05
TIE = 0.005  # validation areas closer than this are a tie, which the smaller rate wins
TUNED = ("grpo", "trca", "gigpo", "shaped")  # the runs whose rates are chosen: each trainer credit, plainly run


def training_cpu_s(run: dict[str, Any]) -> float:
    """The CPU seconds `run` spent training, the compute-matched axis: its ledger's total at its last iteration where
    it kept one (runs saved from 2026-12-06's seventh session on, a longer run's first half included), else its saved
    total (older runs, their evaluation included: compare them only with each other)."""
    ledger = run.get("cpu_s_by_iteration")
    return float(ledger[max(ledger, key=int)]) if ledger else float(run["cpu_s"])


def wins_array(runs: list[dict[str, Any]], key: str = "wins") -> np.ndarray:
    """(seeds, points, games, episodes) sampled wins, or (seeds, points, games, 1) greedy ones."""
    if key == "greedy_wins":
        return np.array([[[[w] for w in p["greedy_wins"]] for p in run["points"]] for run in runs], dtype=float)
    return np.array([[p["wins"] for p in run["points"]] for run in runs], dtype=float)


def analysis(grouped: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The primary and secondary metrics of the runs in `grouped` (label -> runs in seed order, each with its
    `points` and CPU seconds, `training_cpu_s`); comparisons whose methods were evaluated at other points are left
    out."""
    rollouts = {label: [p["rollouts"] for p in runs[0]["points"]] for label, runs in grouped.items()}
    wins = {label: wins_array(runs) for label, runs in grouped.items()}
    reaches = {label: {f"{level:.1f}": level_reaches(rollouts[label], wins[label], level) for level in LEVELS}
               for label in grouped}
    greedy = {label: wins_array(runs, "greedy_wins")[:, -1].mean(axis=(1, 2)).round(4).tolist()
              for label, runs in grouped.items()}
    comparisons: dict[str, dict[str, Any]] = {}
    for trca_label, short, against in FAMILIES:
        if trca_label not in grouped:
            continue
        trca, axis = wins[trca_label], rollouts[trca_label]
        family: dict[str, dict[str, Any]] = {}
        for label in [k for k in against if k in grouped and rollouts[k] == axis]:
            other = wins[label]
            area = seed_paired_area(axis, other, trca)
            interval = paired_auc(axis, *seeds_both_ran(other, trca))  # over seeds and games, beside the test
            cost = seed_paired_cost_area(axis, other, [training_cpu_s(r) for r in grouped[label]], trca,
                                         [training_cpu_s(r) for r in grouped[trca_label]])
            family[f"{short} - {label}"] = {"area": area.mean, "area_interval": [interval.low, interval.high],
                                            "p": area.p_value, "seeds": len(area.differences),
                                            "cpu_area": cost.mean, "cpu_p": cost.p_value}
        for entry, adjusted in zip(family.values(), holm([c["p"] for c in family.values()]), strict=True):
            entry["holm_p"] = adjusted
        comparisons |= family
    return {"comparisons": comparisons, "claims": claims(comparisons), "reaches": reaches, "greedy_final": greedy}


def claims(comparisons: dict[str, dict[str, Any]]) -> dict[str, bool | None]:
    """The pre-registered claims, each made iff its comparison's TRCA is ahead in area with a Holm-adjusted p below
    ALPHA (None: its comparison was not run): per-step credit beyond shaping iff TRCA beats shaped GRPO with the same
    rubric; a gain that does not come from reading the plan iff TRCA with the blind rubric beats sparse GRPO."""
    def shown(name: str) -> bool | None:
        entry = comparisons.get(name)
        return None if entry is None else bool(entry["area"] > 0 and entry["holm_p"] < ALPHA)

    return {"per-step credit beyond shaping (objective-reading rubric)": shown(f"TRCA - {SHAPED}"),
            "per-step credit beyond shaping (blind rubric)": shown(f"TRCA blind - {SHAPED_BLIND}"),
            "a gain that does not come from reading the plan": shown("TRCA blind - sparse GRPO")}


def chosen_rate(areas: dict[float, list[float]]) -> float:
    """The rate with the largest mean validation area, the smallest rate within TIE of it winning a tie."""
    means = {rate: float(np.mean(values)) for rate, values in areas.items()}
    best = max(means.values())
    return min(rate for rate, mean in means.items() if mean >= best - TIE)


def saved_runs(source: Path) -> list[tuple[dict[str, Any], str]]:
    """The runs of a `bench/learning.py` workdir (its saved curves) or of a curve archive (bench/learning_curves/
    *.json.gz, a recorded section's), each with where it was read."""
    if source.is_dir():
        return [(json.loads(path.read_text(encoding="utf-8")), str(path))
                for path in sorted((source / "curves").glob("*.json"))]
    return [(run, f"{source}: {run['name']}") for run in read_archive(source)]


def read_archive(path: Path) -> list[dict[str, Any]]:
    """The runs a curve archive holds (bench/learning.py writes them: gzip of a JSON list of curves)."""
    return json.loads(gzip.decompress(path.read_bytes()))


def validation_areas(runs: list[tuple[dict[str, Any], str]]) -> dict[str, dict[float, dict[int, float]]]:
    """Each tuned method's area under the validation success curve by rate and seed, from `saved_runs` (one rate's
    each, or several)."""
    areas: dict[str, dict[float, dict[int, float]]] = {}
    first: tuple[dict[str, Any], str] | None = None  # the settings every run shares but its method, rate and seed
    for run, path in runs:
        method = run["name"].rsplit("-s", 1)[0]
        if method in TUNED:
            shared = {k: v for k, v in run["spec"].items() if k not in ("method", "lr", "seed")}
            first = first or (shared, path)
            if shared != first[0]:
                differing = sorted(k for k in shared.keys() | first[0].keys() if shared.get(k) != first[0].get(k))
                raise ValueError(f"{path} was run with other settings than {first[1]} "
                                 f"(they differ in {', '.join(differing)}): one family and budget at a time")
            curve = [(p["rollouts"], p["success"]) for p in run["points"]]
            area = area_under_curve(*zip(*curve, strict=True))
            areas.setdefault(method, {}).setdefault(float(run["spec"]["lr"]), {})[int(run["spec"]["seed"])] = area
    return areas


def rates_report(areas: dict[str, dict[float, dict[int, float]]]) -> tuple[str, dict[str, float]]:
    """The validation table (each method's mean area by rate, over its seeds) and the chosen rates, for the methods
    whose rates were all run on the same seeds (the rule compares like with like)."""
    rates = sorted({rate for by_rate in areas.values() for rate in by_rate})
    rows, chosen = [], {}
    for method, by_rate in sorted(areas.items(), key=lambda item: TUNED.index(item[0])):
        seeds = {tuple(sorted(by_seed)) for by_seed in by_rate.values()}
        complete = len(seeds) == 1 and len(by_rate) == len(rates)
        if complete:
            chosen[method] = chosen_rate({rate: list(by_seed.values()) for rate, by_seed in by_rate.items()})
        cells = [f"{np.mean(list(by_rate[r].values())):.4f} ({len(by_rate[r])} seeds)" if r in by_rate else "-"
                 for r in rates]
        rows.append([method, *cells, f"{chosen[method]:g}" if complete else "not yet: unequal seeds or rates"])
    table = markdown_table(["method", *[f"lr {rate:g}: mean area" for rate in rates], "chosen"], rows)
    return table, chosen


def report(result: dict[str, Any]) -> str:
    """The analysis as Markdown: the primary table, then the reaches and greedy finals by method."""
    lines = []
    if result["comparisons"]:
        lines += [("**Pre-registered** (docs/learning.md): the seed-paired difference in area under the held-out "
                   "success curve (its 95% bootstrap interval over seeds and games), exact sign-flip p, "
                   "Holm-adjusted over the comparisons shown (alpha 0.05); the same over the first CPU seconds every "
                   "run of both spent:"), "",
                  markdown_table(["comparison", "seeds", "area diff [95% CI]", "p", "Holm p", "CPU-seconds area diff",
                                  "p"],
                                 [[name, c["seeds"], str(Interval(c["area"], *c["area_interval"])),
                                   f"{c['p']:.4f}", f"{c['holm_p']:.4f}",
                                   f"{c['cpu_area']:+.3f}", f"{c['cpu_p']:.4f}"]
                                  for name, c in result["comparisons"].items()]), ""]
        lines += ["Pre-registered claims: " + "; ".join(
            f"{claim}: {'not run' if made is None else 'shown' if made else 'not shown'}"
            for claim, made in result["claims"].items()), ""]
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


def main() -> None:
    parser = argparse.ArgumentParser(description="The learning rate of each method, chosen on the validation runs "
                                                 "by the pre-registered rule")
    parser.add_argument("command", choices=("rates",))
    parser.add_argument("sources", nargs="+", type=Path,
                        help="the validation runs: bench/learning.py workdirs, or their recorded sections' archives "
                             "(bench/learning_curves/*.json.gz)")
    args = parser.parse_args()
    missing = [str(s) for s in args.sources if not ((s / "curves").is_dir() or s.is_file())]
    if missing:
        parser.error(f"no saved curves in {', '.join(missing)}")
    try:
        areas = validation_areas([run for source in args.sources for run in saved_runs(source)])
    except (ValueError, OSError, KeyError) as error:
        parser.error(str(error))
    table, chosen = rates_report(areas)
    print(table)
    if chosen:
        print("\n--lr-by-method " + ",".join(f"{method}={rate:g}" for method, rate in chosen.items()))


if __name__ == "__main__":
    main()
