"""The pipeline's final report: `report.md` and `report.png` in the run folder, rewritten after every run.

The Markdown holds the steps (ran or skipped, seconds, summary), the selected capabilities (coverage, gap, runs
passed), each environment's origin and calibration, each adapter's training (first and last mean reward, its
curve), the baselines beside them (how each was built: GRPO on the mixture with its rewards, a merge with its rank
and SVD residual, SFT with its epochs), the evaluation table with the routing confusion table, and where every file
is. The PNG puts three panels side by side: the selected capabilities' contrastive gaps, the training curves (mean
reward per iteration) of the adapters and of multi_grpo, and the pass rate of each condition on the target.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from tracec.trace_rl.targeting.pipeline.config import PipelineConfig
from tracec.trace_rl.targeting.pipeline.layout import (
    ADAPTERS,
    BASELINES,
    DECISIONS,
    ENVIRONMENTS,
    EVALUATE,
    EVALUATION_JSON,
    EVALUATION_RESULTS,
    EVALUATION_TABLE,
    EVALUATION_TRAJECTORIES,
    MANIFEST,
    RECORDS,
    REPORT,
    REPORT_FIGURE,
    ROUTE,
    SELECT,
    SELECTED,
    SELECTION_CHART,
    SELECTION_TABLE,
    TRAIN,
)
from tracec.trace_rl.targeting.pipeline.steps import StepOutcome

from tracec.atomic import write_atomic


def write_report(config: PipelineConfig, root: Path, outcomes: Mapping[str, StepOutcome]) -> Path:
    selected = _json(root / SELECT / SELECTED) or []
    envs = (_json(root / ENVIRONMENTS / MANIFEST) or {}).get("environments", [])
    adapters = _json(root / TRAIN / ADAPTERS) or {}
    curves = {name: _metrics(root / TRAIN / name / "metrics.jsonl") for name in adapters}
    baselines = _json(root / BASELINES / ADAPTERS) or {}
    if "multi_grpo" in baselines:
        curves["multi_grpo (baseline)"] = _metrics(root / BASELINES / "multi_grpo" / "metrics.jsonl")
    table = _json(root / EVALUATE / EVALUATION_JSON)
    lines = [f"# TRACE pipeline: {config.model.name} on {_target(config)}", "",
             f"Run folder `{root}`.", "", "## Steps", "", "| step | this run | seconds | outcome |",
             "|---|---|---:|---|"]
    for name, outcome in outcomes.items():
        record = _json(root / RECORDS / f"{name}.json") or {}
        status = "skipped (up to date)" if outcome.skipped else "ran"
        lines.append(f"| {name} | {status} | {record.get('seconds', 0):.1f} | {record.get('summary', '')} |")
    lines += ["", "## Selected capabilities", "", "| capability | mean coverage | mean gap (Delta) | runs passed |",
              "|---|---:|---:|---:|"]
    lines += [f"| {s['skill']} | {s['mean_cov']:.3f} | {s['mean_delta']:.3f} | {s['n_runs_passed']}/"
              f"{s['n_runs_total']} |" for s in selected]
    lines += ["", f"The whole table: `{SELECT}/{SELECTION_TABLE}`; the chart: `{SELECT}/{SELECTION_CHART}`.", "",
              "## Environments and their calibration", ""]
    for env in envs:
        lines += [f"### {env['name']} ({env['origin']})", "", env["description"], ""]
        calibration = root / ENVIRONMENTS / env["name"] / "calibration.txt"
        lines += ["```", calibration.read_text(encoding="utf-8").rstrip(), "```", ""] if calibration.is_file() \
            else ["Not calibrated.", ""]
    lines += ["## Adapters", "", "| adapter | iterations | first reward | last reward | curve |",
              "|---|---:|---:|---:|---|"]
    for name, entry in adapters.items():
        lines.append(f"| {name} | {entry['iterations']} | {_num(entry['first_reward'])} | "
                     f"{_num(entry['last_reward'])} | `{TRAIN}/{name}/curve.png` |")
    if baselines:
        lines += ["", "## Baselines", "", ("Built after training for comparison, never routing options, outside the "
                  "oracle row."), "", "| baseline | built by | iterations | first reward | last reward | notes |",
                  "|---|---|---:|---:|---:|---|"]
        lines += [f"| {name} | {_BUILT_BY.get(entry['kind'], entry['kind'])} | {entry['iterations']} "
                  f"| {_num(entry['first_reward'])} | {_num(entry['last_reward'])} | {_notes(name, entry)} |"
                  for name, entry in baselines.items()]
    lines += ["", "## Evaluation", ""]
    evaluation = root / EVALUATE / EVALUATION_TABLE
    lines += [evaluation.read_text(encoding="utf-8").rstrip() if evaluation.is_file() else "Not evaluated yet.", "",
              (f"Per task: `{EVALUATE}/{EVALUATION_RESULTS}`; trajectories: `{EVALUATE}/{EVALUATION_TRAJECTORIES}/`; "
               f"routes: `{ROUTE}/{DECISIONS}`."), "", f"![summary]({REPORT_FIGURE})", ""]
    path = root / REPORT
    write_atomic(path, ["\n".join(lines)])
    _figure(root / REPORT_FIGURE, selected, curves, table)
    return path


def _figure(path: Path, selected: list[dict[str, Any]], curves: dict[str, list[dict[str, Any]]],
            table: dict[str, Any] | None) -> None:
    figure = Figure(figsize=(15, 4))
    FigureCanvasAgg(figure)
    gaps, training, passes = figure.subplots(1, 3)
    names = [s["skill"] for s in selected]
    gaps.barh(names, [s["mean_delta"] for s in selected], color="tab:blue")
    gaps.set_title("selected: contrastive gap (Delta)")
    gaps.set_xlim(min(0.0, *(s["mean_delta"] for s in selected)) if selected else 0.0, 1.0)
    gaps.invert_yaxis()
    for name, records in curves.items():
        training.plot([r["iteration"] for r in records], [r.get("reward_mean", math.nan) for r in records],
                      marker="o", markersize=3, label=name)
    training.set(title="training: mean reward", xlabel="iteration")
    training.xaxis.get_major_locator().set_params(integer=True)
    if curves:
        training.legend()
    training.grid(alpha=0.3)
    if table is not None:
        conditions = table["conditions"]
        rates = [table["table"][c]["overall"]["pass_rate"] for c in conditions]
        bars = passes.bar(conditions, rates, color="tab:green")
        passes.bar_label(bars, labels=[f"{100 * r:.0f}%" for r in rates])  # a 0% bar is otherwise invisible
        passes.tick_params(axis="x", rotation=20)
    passes.set_ylim(0, 1.05)
    passes.set_title("evaluation: pass rate (all tasks)")
    figure.tight_layout()
    staging = path.with_name(f".{path.name}.tmp.png")
    figure.savefig(staging, dpi=100)
    staging.replace(path)


_BUILT_BY = {"multi_grpo": "GRPO on the mixture of the environments", "linear": "linear merge (mean) of the adapters",
             "ties": "TIES merge of the adapters", "sft_gold": "SFT on the environments' gold episodes"}


def _notes(name: str, entry: dict[str, Any]) -> str:
    if "residual" in entry:
        return f"rank {entry['rank']}, SVD residual {entry['residual']:.3f}"
    if "weights" in entry:
        return "weights " + ", ".join(f"{e} {w:g}" for e, w in zip(entry["environments"], entry["weights"])) + \
            f"; curve `baselines/{name}/curve.png`"
    return f"{entry.get('episodes')} gold episodes" if "episodes" in entry else ""


def _target(config: PipelineConfig) -> str:
    target = config.target
    if target.kind == "capability":
        return ", ".join(Path(p).stem for p in target.environments)
    if target.kind == "textworld":
        return f"TextWorld {target.textworld.challenge}"
    if target.kind == "toolsandbox":
        return "ToolSandbox " + (", ".join(target.toolsandbox.scenarios) or "(every transcribed scenario)")
    return "tau2-bench " + ", ".join(target.tau2.domains)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _metrics(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
