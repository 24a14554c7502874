"""The pipeline's first four steps: collect the base model's rollouts on the target, discover, label, select.

Each is a function `(context, folder) -> summary` writing into the step's staging folder (`steps.StepStore`):
- collect: the base model, greedy, on `collect.tasks` seeds of every domain of the target, through `evaluate`
  (so a killed collection resumes by its result lines); `trajectories/base.jsonl` is what analysis reads.
- discover: the candidate dictionary (`candidate_capabilities.json`): the capability blocks of `analysis.rubric`
  for deterministic labels, else `analysis.discover_runs` runs of the LLM (`analysis.discover`).
- label: `run_NN.json` files in TRACE's format: one run from the capability blocks (they always agree), or
  `analysis.label_runs` LLM runs (resumable through `labels.progress.jsonl`).
- select: TRACE's contrastive selection (`analysis.select`) with the table (`table.txt`), the chart
  (`selected_capabilities.png`), and `selected_capabilities.json` cut to `analysis.max_selected`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.targeting.adapters import BaseModelUser
from tracec.trace_rl.targeting.analysis.cases import read_cases
from tracec.trace_rl.targeting.analysis.chart import write_chart
from tracec.trace_rl.targeting.analysis.dictionary import read_dictionary
from tracec.trace_rl.targeting.analysis.discover import DiscoverSettings
from tracec.trace_rl.targeting.analysis.discover import discover as run_discovery
from tracec.trace_rl.targeting.analysis.label import (
    LabelSettings,
    label_with_llm,
    label_with_rubric,
    write_labels,
)
from tracec.trace_rl.targeting.analysis.progress import Progress, fingerprint
from tracec.trace_rl.targeting.analysis.runs import read_run, run_files
from tracec.trace_rl.targeting.analysis.select import Thresholds, render_table, selected, summarize
from tracec.trace_rl.targeting.evaluate import Condition, evaluate
from tracec.trace_rl.targeting.pipeline.config import rubric_capabilities
from tracec.trace_rl.targeting.pipeline.context import Context
from tracec.trace_rl.targeting.pipeline.layout import (
    BASE_TRAJECTORIES,
    CANDIDATES,
    SELECTED,
    SELECTION_CHART,
    SELECTION_TABLE,
)
from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed
from tracec.trace_rl.targeting.pipeline.targets import target_domains, target_metrics
from tracec.trace_rl.targeting.routing import AdapterAgent

from tracec.atomic import write_atomic


def collect(context: Context, folder: Path) -> str:
    config = context.config
    model = context.load_model({}, max_new_tokens=config.collect.max_new_tokens)
    domains = target_domains(config.target, first_seed=config.collect.first_seed, tasks=config.collect.tasks,
                             user=BaseModelUser(model))
    table = evaluate(domains, [Condition(name="base", make_agent=lambda env: AdapterAgent(model, None))], folder,
                     max_turns=config.target.max_turns, report=context.detail,
                     fingerprint={"model": config.section("model"), "target": config.section("target"),
                                  "collect": config.section("collect")})
    cell = table.cell("base")
    if target_metrics(config.target, folder, ["base"], domains):  # ToolSandbox: its similarity too
        return f"{cell.tasks} base episodes, {cell.passed} passed, mean similarity {cell.mean_reward:.3f}"
    return f"{cell.tasks} base episodes, {cell.passed} passed"


def discover(context: Context, folder: Path, collected: Path) -> str:
    config = context.config
    analysis = config.analysis
    if analysis.labeler == "rubric":
        candidates = [{"name": name, "description": description, "example_trajectories": [], "proposed_in": 1}
                      for name, description in rubric_capabilities(analysis.rubric, analysis.capabilities)]
        dictionary: dict[str, Any] = {"candidates": candidates, "runs": 1, "model": f"rubric:{analysis.rubric}"}
    else:
        cases = read_cases([collected / BASE_TRAJECTORIES])
        settings = DiscoverSettings(runs=analysis.discover_runs, max_candidates=analysis.max_candidates,
                                    cases_per_run=analysis.cases_per_run, case_chars=analysis.case_chars,
                                    tries=config.llm.tries, seed=config.run.seed)
        backend = context.analyst()
        progress = Progress(folder / "discover.progress.jsonl",
                            fingerprint([c.transcript for c in cases], settings, backend.name))
        dictionary = run_discovery(backend, cases, settings, progress=progress, report=context.detail,
                                   log=CallLog(folder / "llm_calls.jsonl", command="pipeline discover"))
        progress.finish()
    _write_json(folder / CANDIDATES, dictionary)
    return f"{len(dictionary['candidates'])} candidates: " + ", ".join(c["name"] for c in dictionary["candidates"])


def label(context: Context, folder: Path, collected: Path, discovered: Path) -> str:
    config = context.config
    analysis = config.analysis
    cases = read_cases([collected / BASE_TRAJECTORIES])
    if analysis.labeler == "rubric":
        capabilities, labels = label_with_rubric(analysis.rubric, cases, analysis.capabilities)
        write_labels(folder / "run_01.json", 1, cases, labels, capabilities)
        return f"{len(cases)} trajectories x {len(capabilities)} capabilities, 1 deterministic run"
    capabilities = read_dictionary(discovered / CANDIDATES)
    settings = LabelSettings(runs=analysis.label_runs, case_chars=analysis.case_chars, tries=config.llm.tries,
                             seed=config.run.seed)
    backend = context.analyst()
    progress = Progress(folder / "labels.progress.jsonl",
                        fingerprint([c.transcript for c in cases], capabilities, backend.name, settings))
    label_with_llm(backend, cases, capabilities, settings, out_dir=folder, progress=progress, report=context.detail,
                   log=CallLog(folder / "llm_calls.jsonl", command="pipeline label"))
    progress.finish()
    return f"{len(cases)} trajectories x {len(capabilities)} capabilities, {analysis.label_runs} LLM runs"


def select(context: Context, folder: Path, discovered: Path, labeled: Path) -> str:
    analysis = context.config.analysis
    runs = [read_run(p) for p in run_files([labeled])]
    k = 1 if analysis.labeler == "rubric" else analysis.k  # deterministic labels are one run
    thresholds = Thresholds(rho=analysis.rho, delta=analysis.delta, k=k)
    descriptions = {c.name: c.description for c in read_dictionary(discovered / CANDIDATES)}
    summaries = summarize(runs, thresholds, descriptions)
    kept = selected(summaries)[: analysis.max_selected]
    table = render_table(summaries, thresholds, runs)
    write_atomic(folder / SELECTION_TABLE, [table])
    write_chart(folder / SELECTION_CHART, summaries, thresholds, len(runs))
    _write_json(folder / SELECTED, [s.record() for s in kept])
    context.detail(table.rstrip("\n"))
    if not kept:
        raise PipelineFailed(f"select: no capability passed rho = {analysis.rho}, delta = {analysis.delta} in "
                             f"{k} of {len(runs)} runs (the table is in {folder / SELECTION_TABLE}); lower "
                             "analysis.rho / analysis.delta, or collect more tasks (collect.tasks)")
    return f"{len(kept)} of {len(summaries)} kept: " + ", ".join(s.skill for s in kept)


def _write_json(path: Path, value: Any) -> None:
    write_atomic(path, [json.dumps(value, indent=2, ensure_ascii=False) + "\n"])
