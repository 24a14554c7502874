"""`run_pipeline(config)`: TRACE's steps in order over one run folder, each skipped when it is up to date.

    result = run_pipeline(load_pipeline_config("examples/pipeline/cpu_smollm2.toml"))

collect -> discover -> label -> select -> environments -> train -> baselines -> route -> evaluate, then the report
(`baselines` builds the comparison adapters `[baselines]` asks for, none by default). A step's
inputs are its config sections, the digests of the steps it reads and the content of the files it reads from
outside the run (the target's and the labels' `.rubric` files), so editing `[evaluate]` reruns only the evaluation,
and a killed run resumes at the step it was in (inside it too, where that step resumes on its own). The LLM of
`[llm]` is opened only when a step that needs it runs; a test passes its own (`llm=`). `after_step` is called
with each step's outcome, run or skipped. Left out: running independent steps (the adapters' trainings) at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.trace_rl.llm.chat import SamplingBackend
from tracec.trace_rl.targeting.pipeline import adapter_steps, analysis_steps, baseline_steps, env_steps
from tracec.trace_rl.targeting.pipeline.config import PipelineConfig, unknown_conditions
from tracec.trace_rl.targeting.pipeline.context import Context
from tracec.trace_rl.targeting.pipeline.layout import (
    BASELINES,
    COLLECT,
    CONFIG,
    DISCOVER,
    ENVIRONMENTS,
    EVALUATE,
    LABEL,
    MANIFEST,
    ROUTE,
    SELECT,
    SELECTED,
    STEP_NAMES,
    TRAIN,
    read_json,
)
from tracec.trace_rl.targeting.pipeline.report import write_report
from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed, StepOutcome, StepStore, file_digest
from tracec.trace_rl.targeting.vllm_adapters import check_engine_inputs

from tracec.atomic import write_atomic
from tracec.config_io import to_toml

_SOURCE = ("labeler", "rubric", "capabilities")  # where labels come from: what discovery and labeling share


@dataclass(frozen=True, kw_only=True)
class PipelineResult:
    out: Path
    outcomes: dict[str, StepOutcome]
    report: Path  # report.md


def run_pipeline(config: PipelineConfig, *, out: Path | None = None, llm: SamplingBackend | None = None,
                 report: Callable[[str], None] = lambda _: None, detail: Callable[[str], None] = lambda _: None,
                 after_step: Callable[[StepOutcome], None] | None = None) -> PipelineResult:
    root = Path(out or config.run.out)
    baseline_steps.check_settings(config)  # said now, not after the training
    if config.evaluate.engine == "vllm":
        check_engine_inputs(config.model.name, {})  # vLLM installed, and able to load the model: said now too
    context = Context(config=config, report=report, detail=detail, llm=llm)
    store = StepStore(root, report=report)
    write_atomic(root / CONFIG, [to_toml(config)])  # what `tracec route / evaluate --run` read
    done: dict[str, StepOutcome] = {}
    for number, (name, inputs, produce, read_later) in enumerate(_steps(context, root, done), 1):
        outcome = store.run(name, inputs(), produce, number=number, total=len(STEP_NAMES), digest_of=read_later)
        done[name] = outcome
        if name in _ADAPTER_NAMES:
            _check_conditions(config, name, _ADAPTER_NAMES[name](outcome.folder))
        if after_step is not None:
            after_step(outcome)
    path = write_report(config, root, done)
    report(f"report: {path} and {path.with_suffix('.png')}")
    return PipelineResult(out=root, outcomes=done, report=path)


# The steps after which the adapters a run can train are known, and where they are read: before any training.
_ADAPTER_NAMES: dict[str, Callable[[Path], list[str]]] = {
    SELECT: lambda folder: [entry["skill"] for entry in read_json(folder / SELECTED)],
    ENVIRONMENTS: lambda folder: [entry["name"] for entry in read_json(folder / MANIFEST)["environments"]],
}


def _check_conditions(config: PipelineConfig, step: str, adapters: list[str]) -> None:
    """A PipelineFailed when `evaluate.conditions` names an adapter this run will not train (`adapters`, as the
    step `step` leaves them): said now rather than after the training."""
    unknown = unknown_conditions(config.evaluate.conditions, adapters)
    if unknown:
        raise PipelineFailed(f"evaluate.conditions names {', '.join(map(repr, unknown))}, which is no condition and "
                             f"no capability this run trains ({step} left: {', '.join(adapters) or 'none'}); use "
                             "base, adapters, routed, mixture, a baseline or one of those")


def _steps(context: Context, root: Path,
           done: dict[str, StepOutcome]) -> list[tuple[str, Any, Any, tuple[str, ...]]]:
    """(name, inputs, produce, the outputs later steps read) of each step, in order (the outputs only where a step
    writes more: tables and charts for people); inputs and folders are read when the step comes."""
    config = context.config

    def digest(*names: str) -> dict[str, str]:
        return {name: done[name].digest for name in names}

    def sections(*names: str) -> dict[str, Any]:
        return {name: config.section(name) for name in names}

    def analysis(*keys: str) -> dict[str, Any]:  # only what the step reads: a new delta relabels nothing
        values = config.section("analysis")
        return {key: values.get(key) for key in keys}

    def folder(name: str) -> Path:
        return done[name].folder

    target_files = {p: file_digest(p) for p in config.target.environments if Path(p).is_file()}
    rubric = config.analysis.rubric
    label_files = {rubric: file_digest(rubric)} if config.analysis.labeler == "rubric" and Path(rubric).is_file() \
        else {}
    analyst = {"backend": config.llm.backend, "model": config.llm.model, "tries": config.llm.tries,
               "seed": config.run.seed}
    return [
        (COLLECT, lambda: {**sections("model", "target", "collect"), "files": target_files},
         lambda f: analysis_steps.collect(context, f), ()),
        (DISCOVER, lambda: {"analysis": analysis(*_SOURCE, "discover_runs", "max_candidates", "cases_per_run",
                                                 "case_chars"),
                            "llm": analyst, "files": label_files, **digest(COLLECT)},
         lambda f: analysis_steps.discover(context, f, folder(COLLECT)), ()),
        (LABEL, lambda: {"analysis": analysis(*_SOURCE, "label_runs", "case_chars"), "llm": analyst,
                         "files": label_files, **digest(COLLECT, DISCOVER)},
         lambda f: analysis_steps.label(context, f, folder(COLLECT), folder(DISCOVER)), ()),
        (SELECT, lambda: {"analysis": analysis("labeler", "rho", "delta", "k", "max_selected"),
                          **digest(DISCOVER, LABEL)},
         lambda f: analysis_steps.select(context, f, folder(DISCOVER), folder(LABEL)),
         (SELECTED,)),
        (ENVIRONMENTS, lambda: {**sections("environments", "model"), "llm": analyst,
                                "max_turns": config.train.env.max_turns,
                                "call_format": config.target.call_format, **digest(COLLECT, SELECT)},
         lambda f: env_steps.environments(context, f, folder(COLLECT), folder(SELECT)), ()),
        (TRAIN, lambda: {**sections("train", "model"), **digest(ENVIRONMENTS)},
         lambda f: adapter_steps.train_adapters(context, f, folder(ENVIRONMENTS)), ()),
        (BASELINES, lambda: {**sections("baselines", "train", "model"),
                             **digest(SELECT, ENVIRONMENTS, TRAIN)},
         lambda f: baseline_steps.build_baselines(context, f, folder(ENVIRONMENTS), folder(TRAIN),
                                                  folder(SELECT)), ()),
        (ROUTE, lambda: {**sections("routing", "model", "target", "evaluate"),
                         **digest(ENVIRONMENTS, TRAIN),  # and the retrieval index's sources, when it is on
                         **(digest(COLLECT, LABEL, SELECT) if config.routing.retrieval_k else {})},
         lambda f: adapter_steps.route(context, f, folder(ENVIRONMENTS), folder(TRAIN),
                                       (folder(COLLECT), folder(LABEL), folder(SELECT))), ()),
        (EVALUATE, lambda: {**sections("routing", "model", "target", "evaluate"),
                            **digest(TRAIN, BASELINES, ROUTE)},
         lambda f: adapter_steps.evaluate_step(context, f, folder(TRAIN), folder(ROUTE), folder(BASELINES)),
         ()),
    ]
