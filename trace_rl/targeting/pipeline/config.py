"""The pipeline's configuration: one TOML file says the target, every step's settings, and the trainer's config.

    config = load_pipeline_config("examples/pipeline/cpu_smollm2.toml", overrides=["train.run.iterations=2"])

Sections: `[run]` (the run folder, the seed), `[model]` (the base model: the trainer's `ModelSection`), `[target]`
(what is analysed and evaluated), `[collect]` (the base model's rollouts on the target), `[llm]` (the analyst model
of discovery, LLM labels and environment writing), `[analysis]` (discover, label, select), `[environments]` (library
or synthesis, validation, calibration), `[train]` (a whole `TrainConfig` except what the pipeline sets: its model,
its environment and its run folder; dynamic sampling on as in TRACE: `TRACE_RESAMPLE_BATCHES` more batches at most,
unless `[train.advantage]` sets `max_resample_batches`), `[routing]`, `[baselines]` (the baselines built after
training: multi-capability GRPO, linear and TIES merges, SFT on gold episodes) and `[evaluate]`. Errors are the
trainer's kind (`config_io`): located at the file's line, naming the key, the value and the fix; unknown keys get a
did-you-mean. Relative paths are relative to the config file (to the working folder when a `--set` gives them),
except `run.out` (relative to the working folder, as the trainer's); `~user` is expanded, and one of no user is an
error.
Left out: several targets in one run (run the pipeline per target).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracec.dsl.check import check_source
from tracec.dsl.source_file import read_source
from tracec.trace_rl.envs.config import TextWorldEnvSection
from tracec.trace_rl.envs.toolcall import CALL_FORMATS, DEFAULT_CALL_FORMAT
from tracec.trace_rl.grpo.config import ModelSection, TrainConfig
from tracec.trace_rl.llm.http import HTTPConfig
from tracec.trace_rl.llm.repair import TRIES
from tracec.trace_rl.llm.vllm_backend import ENGINE_RANKS
from tracec.trace_rl.targeting.eval_table import BASELINE_NAMES, CONDITION_KEYWORDS
from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed
from tracec.trace_rl.targeting.pipeline.toolsandbox_target import ToolSandboxTargetSection, fingerprint_values
from tracec.trace_rl.targeting.synth.tool_schemas import ToolsFileError, load_tools

from tracec.config_io import (
    ConfigError,
    FieldError,
    assign_override,
    build,
    choice,
    located,
    read_toml,
    require,
    shown,
    to_dict,
    value_at,
    with_absolute_paths,
)

__all__ = ["ConfigError", "PipelineConfig", "load_pipeline_config", "pipeline_config_from_dict"]


@dataclass(frozen=True, kw_only=True)
class PipelineRunSection:
    """`[run]`: the run folder and the seed (the trainer's own `[train.run]` is a `grpo.config.RunSection`)."""

    out: str = "runs/pipeline"  # the run folder: one sub-folder per step, steps/*.json, report.md, report.png
    seed: int = 0

    def __post_init__(self) -> None:
        require(bool(self.out), "out", self.out, "name the run folder, e.g. run.out = \"runs/pipeline\"")
        require(self.seed >= 0, "seed", self.seed, "an integer >= 0")


@dataclass(frozen=True, kw_only=True)
class Tau2TargetSection:
    domains: tuple[str, ...] = ("airline", "retail")
    data: str = ""  # "" = $TRACEC_TAU2_DATA or shared/data/tau2 beside the repository
    user: str = "base"  # base: the benchmark's user simulator on the base model (TRACE) | scripted: opens, consents

    def __post_init__(self) -> None:
        require(len(self.domains) > 0, "domains", self.domains, "name at least one of \"airline\", \"retail\"")
        for domain in self.domains:
            choice("domains", domain, ("airline", "retail"))
        choice("user", self.user, ("base", "scripted"))


@dataclass(frozen=True, kw_only=True)
class TargetSection:
    kind: str = "capability"  # capability | textworld | tau2 | toolsandbox
    environments: tuple[str, ...] = ()  # capability: `.rubric` files, each a domain of the table
    # textworld: the family (one game per seed)
    textworld: TextWorldEnvSection = field(default_factory=TextWorldEnvSection)
    tau2: Tau2TargetSection = Tau2TargetSection()
    toolsandbox: ToolSandboxTargetSection = field(default_factory=ToolSandboxTargetSection)
    max_turns: int = 8  # agent turns per episode, in collection and evaluation
    user: str = "scripted"  # capability: the environments' user: scripted | base (the base model plays it, LLMUser)
    call_format: str = DEFAULT_CALL_FORMAT  # tool targets: native (tools as JSON schemas, <tool_call>) | text
    #   (<action>); the adapters are trained in it too

    def __post_init__(self) -> None:
        choice("kind", self.kind, ("capability", "textworld", "tau2", "toolsandbox"))
        choice("call_format", self.call_format, CALL_FORMATS)
        choice("user", self.user, ("scripted", "base"))
        require(1 <= self.max_turns <= 1000, "max_turns", self.max_turns, "an integer in 1..1000")


@dataclass(frozen=True, kw_only=True)
class CollectSection:
    first_seed: int = 0  # the tasks analysed: seeds first_seed .. first_seed + tasks - 1 of every domain
    tasks: int = 16
    max_new_tokens: int = 128  # per turn; the base model decodes greedily

    def __post_init__(self) -> None:
        require(self.first_seed >= 0, "first_seed", self.first_seed, "an integer >= 0")
        require(self.tasks >= 1, "tasks", self.tasks, "an integer >= 1")
        require(self.max_new_tokens >= 1, "max_new_tokens", self.max_new_tokens, "an integer >= 1")


@dataclass(frozen=True, kw_only=True)
class LLMSection:
    backend: str = "none"  # none | transformers | http | vllm (`--llm` of `tracec analyze`)
    model: str = ""  # a local model or checkpoint folder; for http the served model's name
    base_url: str = ""  # http: the API root, e.g. "http://127.0.0.1:8000/v1" (the key: $TRACEC_LLM_API_KEY)
    timeout: float = 120.0
    retries: int = 4
    tries: int = TRIES  # attempts per step of the repair loop
    device: str = "cpu"

    def __post_init__(self) -> None:
        choice("backend", self.backend, ("none", "transformers", "http", "vllm"))
        require(self.backend != "http" or bool(self.base_url), "base_url", self.base_url,
                "an http LLM needs its API root, e.g. llm.base_url = \"http://127.0.0.1:8000/v1\"")
        require(self.backend in ("none", "transformers") or bool(self.model), "model", self.model,
                "name the served model, e.g. llm.model = \"Qwen/Qwen3-30B-A3B-Instruct-2507\"")
        require(self.tries >= 1, "tries", self.tries, "an integer >= 1")
        if self.backend == "http" and self.base_url and self.model:  # the backend's own check, now, not at step 3
            try:
                HTTPConfig(base_url=self.base_url, model=self.model, timeout_s=self.timeout, retries=self.retries)
            except ValueError as error:
                raise FieldError("base_url", self.base_url, str(error)) from None


@dataclass(frozen=True, kw_only=True)
class AnalysisSection:
    labeler: str = "rubric"  # rubric: the capability blocks of `rubric`, deterministic | llm: [llm], label_runs runs
    rubric: str = ""  # labeler = rubric: the `.rubric` file whose capability blocks label
    capabilities: tuple[str, ...] = ()  # labeler = rubric: these blocks only; () = all of them
    discover_runs: int = 3
    max_candidates: int = 8
    cases_per_run: int = 16
    case_chars: int = 1500
    label_runs: int = 10
    rho: float = 0.10  # coverage threshold
    delta: float = 0.20  # contrastive-gap threshold
    k: int = 8  # LLM labels: runs a capability must pass (deterministic labels are one run: k = 1)
    max_selected: int = 4  # at most this many capabilities get an environment and an adapter

    def __post_init__(self) -> None:
        choice("labeler", self.labeler, ("rubric", "llm"))
        for name in ("discover_runs", "max_candidates", "cases_per_run", "label_runs", "k", "max_selected"):
            require(getattr(self, name) >= 1, name, getattr(self, name), "an integer >= 1")
        require(self.labeler != "llm" or self.k <= self.label_runs, "k", self.k,
                f"a capability must pass in k of label_runs = {self.label_runs} runs; use k <= label_runs")
        require(self.case_chars >= 200, "case_chars", self.case_chars, "an integer >= 200")


@dataclass(frozen=True, kw_only=True)
class EnvironmentsSection:
    library: str = ""  # the environment library folder; "" = the shipped examples/envs
    synthesize: bool = True  # [llm] judges library matches and writes what the library lacks; false: by name only
    validate_seeds: int = 20
    calibrate: bool = True
    calibration_seeds: int = 8
    group_size: int = 4
    temperature: float = 1.0
    max_new_tokens: int = 128
    mean_band: tuple[float, ...] = (0.2, 0.6)
    success_band: tuple[float, ...] = (0.2, 0.6)
    max_constant_groups: float = 0.5
    require_calibrated: bool = True  # false: keep an environment outside the bands (the report says so)
    # the target's tools an LLM-written environment keeps (names, parameters, types): a JSON file of function
    # schemas; "" = a tau2 target's own domains' tools, none for other targets. keep_tools = false: free tools
    tools: str = ""
    keep_tools: bool = True

    def __post_init__(self) -> None:
        for name in ("validate_seeds", "calibration_seeds"):
            require(getattr(self, name) >= 1, name, getattr(self, name), "an integer >= 1")
        require(self.group_size >= 2, "group_size", self.group_size, "a group needs at least 2 rollouts")
        for name in ("mean_band", "success_band"):
            band = getattr(self, name)
            require(len(band) == 2 and 0 <= band[0] <= band[1] <= 1, name, band, "write [LOW, HIGH] in [0, 1]")


@dataclass(frozen=True, kw_only=True)
class RoutingSection:
    labels: tuple[str, ...] = ()  # one token per adapter, then one for base; () = A, B, C, ...
    task_chars: int = 1500
    example_chars: int = 600
    top_p: float = 0.9  # the `mixture` condition's nucleus: the fewest adapters whose renormalised weights reach it
    retrieval_k: int = 0  # collected trajectories retrieved to pick the candidates (route/index.jsonl); 0 = none

    def __post_init__(self) -> None:
        require(self.task_chars >= 50, "task_chars", self.task_chars, "an integer >= 50")
        require(self.example_chars >= 0, "example_chars", self.example_chars, "an integer >= 0")
        require(0 < self.top_p <= 1, "top_p", self.top_p, "a number in (0, 1], e.g. 0.9")
        require(self.retrieval_k >= 0, "retrieval_k", self.retrieval_k, "an integer >= 0 (0: no retrieval)")


@dataclass(frozen=True, kw_only=True)
class EvaluateSection:
    conditions: tuple[str, ...] = ("base", "adapters", "routed")  # `adapters` = each trained adapter
    first_seed: int = 1000  # held out from collection and training by default
    tasks: int = 8  # per domain
    trials: int = 1  # per task: 1 is TRACE's preset; k > 1 adds tau2-bench's pass^1..pass^k to the table
    max_new_tokens: int = 128
    # what decodes in routing and evaluation: transformers (peft) | vllm (a LoRARequest a request; the `gpu` extra
    #   on a GPU, `make vllm-venv` on the CPU)
    engine: str = "transformers"
    vllm_gpu_memory: float = 0.3  # vllm: the share of the device's memory it may take (on the CPU: of RAM)

    def __post_init__(self) -> None:
        choice("engine", self.engine, ("transformers", "vllm"))
        require(0 < self.vllm_gpu_memory <= 1, "vllm_gpu_memory", self.vllm_gpu_memory, "a fraction in (0, 1]")
        require(len(self.conditions) > 0, "conditions", self.conditions, "e.g. [\"base\", \"adapters\", \"routed\"]")
        # An adapter's name is known only once analysis has run; a near miss of a keyword is a typo now.
        for name in self.conditions:
            near = difflib.get_close_matches(name, (*CONDITION_KEYWORDS, *BASELINE_NAMES), n=1)
            require(name in (*CONDITION_KEYWORDS, *BASELINE_NAMES) or not near, "conditions", self.conditions,
                    f"did you mean {shown(near[0]) if near else ''} for {shown(name)}? Use "
                    "base, adapters, routed, mixture or a capability's name")
        require(self.first_seed >= 0, "first_seed", self.first_seed, "an integer >= 0")
        require(self.tasks >= 1, "tasks", self.tasks, "an integer >= 1")
        require(self.trials >= 1, "trials", self.trials, "an integer >= 1")


@dataclass(frozen=True, kw_only=True)
class BaselinesSection:
    """The baselines TRACE is compared against, each one adapter built after `train` (`pipeline.baseline_steps`).
    The merge and SFT settings are checked when the pipeline starts (`baseline_steps.check_settings`)."""

    conditions: tuple[str, ...] = ()  # any of multi_grpo, merge_linear, merge_ties, sft_gold
    weights: str = "uniform"  # multi_grpo's mixture: uniform | coverage (each selected capability's mean coverage)
    iterations: int = 0  # multi_grpo: 0 = train.run.iterations x environments (the rollouts of all adapters)
    ties_density: float = 0.2  # merge_ties: the fraction of each adapter's delta kept
    ties_scale: float = 1.0  # merge_ties: lambda
    ties_rank: int = 0  # merge_ties: 0 = the sum of the adapters' ranks
    sft_epochs: int = 4  # sft_gold: passes over the gold episodes
    sft_lr: float = 1e-4
    sft_tasks: int = 16  # sft_gold: gold episodes per environment, seeds sft_first_seed ..
    sft_first_seed: int = 0
    sft_max_new_tokens: int = 256  # sft_gold: the longest gold turn (nothing is sampled); below max_context_tokens

    def __post_init__(self) -> None:
        for name in self.conditions:
            choice("conditions", name, BASELINE_NAMES)
        require(len(set(self.conditions)) == len(self.conditions), "conditions", self.conditions,
                "name each baseline once")
        choice("weights", self.weights, ("uniform", "coverage"))
        require(self.iterations >= 0, "iterations", self.iterations,
                "an integer >= 1, or 0 for train.run.iterations x the number of environments")


# TRACE's dynamic sampling in its adapters' training (`--dynamic-sampling-max-batches 3`: at most three batches an
# iteration, the first included): the pipeline's trainings refill filtered groups from up to 2 more batches unless
# the config sets `train.advantage.max_resample_batches`. The trainer's own default stays 0, so `tracec train` and
# the learning-curve experiments spend exactly the rollouts they are given.
TRACE_RESAMPLE_BATCHES = 2


def pipeline_train_config() -> TrainConfig:
    """The trainer's config the pipeline starts from: the trainer's defaults with TRACE's dynamic sampling."""
    return TrainConfig().replace(advantage=dataclasses.replace(TrainConfig().advantage,
                                                               max_resample_batches=TRACE_RESAMPLE_BATCHES))


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    run: PipelineRunSection = PipelineRunSection()
    model: ModelSection = field(default_factory=ModelSection)
    target: TargetSection = TargetSection()
    collect: CollectSection = CollectSection()
    llm: LLMSection = LLMSection()
    analysis: AnalysisSection = AnalysisSection()
    environments: EnvironmentsSection = EnvironmentsSection()
    train: TrainConfig = field(default_factory=pipeline_train_config)
    routing: RoutingSection = RoutingSection()
    baselines: BaselinesSection = BaselinesSection()
    evaluate: EvaluateSection = EvaluateSection()

    def __post_init__(self) -> None:
        # Checks that need a value with no sensible default (the target, the labels' source) live here, so that
        # every section keeps a valid default.
        require(self.target.kind != "capability" or len(self.target.environments) > 0, "target.environments",
                self.target.environments, "a capability target names its `.rubric` files, e.g. "
                "target.environments = [\"../envs/multi_step_completion.rubric\"]")
        require(self.analysis.labeler != "rubric" or bool(self.analysis.rubric), "analysis.rubric",
                self.analysis.rubric, "deterministic labels come from a `.rubric` file's capability blocks, e.g. "
                "analysis.rubric = \"capabilities.rubric\" (or set analysis.labeler = \"llm\")")
        unbuilt = [c for c in self.evaluate.conditions if c in BASELINE_NAMES and c not in self.baselines.conditions]
        require(not unbuilt, "evaluate.conditions", self.evaluate.conditions, f"{', '.join(unbuilt)} is a baseline "
                f"this run does not build: add it to baselines.conditions, or leave it out here")
        # vLLM's install and the model it loads are checked when the run starts (`run_pipeline`): a GPU config
        # loads on any machine.
        require(self.evaluate.engine != "vllm" or self.train.lora.rank <= ENGINE_RANKS[-1], "train.lora.rank",
                self.train.lora.rank, f"at most {ENGINE_RANKS[-1]}, the largest rank vLLM serves (evaluate.engine = "
                "\"vllm\")")
        if self.analysis.labeler == "llm" and self.llm.backend == "none":
            raise FieldError("analysis.labeler", "llm", "LLM labels need an analyst model: set [llm] backend "
                             "(and model), or use analysis.labeler = \"rubric\"")

    def section(self, name: str) -> dict[str, Any]:
        """One section as plain values: what a step's content hash covers (`fingerprint_values`)."""
        return fingerprint_values(to_dict(getattr(self, name)))


# The pipeline sets these in every training config; a file that sets them is told so.
_SET_BY_PIPELINE = ("train.model", "train.env.kind", "train.env.capability", "train.env.textworld", "train.env.tau2",
                    "train.env.toolsandbox", "train.env.python", "train.env.mixture", "train.run.out")
LIBRARY_FIX = ("set environments.library to a folder of environment `.rubric` files, or to \"\" for the "
               "shipped library")
# Files the config names, made absolute as the trainer's are (`config_io.with_absolute_paths`).
PATH_KEYS = ("target.textworld.game", "target.textworld.cache", "target.tau2.data", "analysis.rubric",
             "environments.library", "environments.tools", "train.advantage.rubric", "target.environments")


def load_pipeline_config(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> PipelineConfig:
    """The config of a TOML file with `--set key=value` overrides; paths made absolute (relative to the file)."""
    data, text = read_toml(str(path))
    sources = {assign_override(PipelineConfig, data, item): f"--set {item}" for item in overrides}
    for dotted in _SET_BY_PIPELINE:
        if value_at(data, dotted) is not None:
            raise ConfigError(f"{path}: error: `{dotted}` is set by the pipeline (the base model of [model], each "
                              f"selected capability's environment, a folder of the run); remove it")
    if isinstance(data.get("train", {}), dict):  # the trainer's checks see the model it will train
        data.setdefault("train", {})["model"] = data.get("model", {})
        advantage = data["train"].setdefault("advantage", {})
        if isinstance(advantage, dict):  # a file or --set that says otherwise wins
            advantage.setdefault("max_resample_batches", TRACE_RESAMPLE_BATCHES)
    config = pipeline_config_from_dict(data, where=str(path), text=text, sources=sources)
    config = with_absolute_paths(config, PATH_KEYS, Path(path).resolve().parent, where=str(path), text=text,
                                 sources=sources)
    missing = [p for p in config.target.environments if not Path(p).is_file()]
    if missing:  # said now, not after collecting, analysing and loading the model
        raise located(str(path), text, "target.environments", f"target.environments names {missing[0]}, which is "
                      "not a file; name the capability environments' `.rubric` files (paths relative to this file)")
    if config.environments.library and not Path(config.environments.library).is_dir():
        raise located(str(path), text, "environments.library", f"environments.library: "
                      f"{config.environments.library}: the environment library is not there; {LIBRARY_FIX}")
    if config.analysis.labeler == "rubric":  # the labels' file and the conditions it names, said before collecting
        _check_label_rubric(config, str(path), text)
    if config.environments.tools:  # a bad tools file is said now, with the file's own location in the message
        try:
            load_tools(Path(config.environments.tools))
        except ToolsFileError as error:
            raise located(str(path), text, "environments.tools", f"environments.tools: {error}") from None
    return config


def rubric_capabilities(rubric: str, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, description) of the capability blocks of `rubric` (all, or `names`, checked to exist): the candidates
    of deterministic labels."""
    blocks = check_source(read_source(rubric), rubric).capabilities
    unknown = [n for n in names if n not in blocks]
    if unknown or not blocks:
        raise PipelineFailed(f"analysis.capabilities: {rubric} has no capability {', '.join(unknown)} (it has: "
                             f"{', '.join(blocks) or 'none'})" if unknown else
                             f"analysis.rubric: {rubric} has no capability blocks to label with")
    return [(name, blocks[name].decl.description) for name in (names or tuple(blocks))]


def unknown_conditions(conditions: Sequence[str], capabilities: Sequence[str]) -> list[str]:
    """The entries of `evaluate.conditions` that are no keyword, no baseline and none of `capabilities` (the
    adapters a run can train)."""
    return [c for c in conditions if c not in (*CONDITION_KEYWORDS, *BASELINE_NAMES, *capabilities)]


def _check_label_rubric(config: PipelineConfig, where: str, text: str) -> None:
    """`analysis.rubric` read and checked, its capabilities those `analysis.capabilities` names, and every adapter
    `evaluate.conditions` names one of them: each a located error now, not after collection or training."""
    rubric = config.analysis.rubric
    if not Path(rubric).is_file():
        raise located(where, text, "analysis.rubric", f"analysis.rubric names {rubric}, which is not a file; name "
                      "the `.rubric` file whose capability blocks label (paths relative to this file)")
    try:
        names = [name for name, _ in rubric_capabilities(rubric, config.analysis.capabilities)]
    except PipelineFailed as failed:
        key = str(failed).partition(":")[0]
        raise located(where, text, key, str(failed)) from None
    unknown = unknown_conditions(config.evaluate.conditions, names)
    if unknown:
        raise located(where, text, "evaluate.conditions", f"evaluate.conditions names {', '.join(map(shown, unknown))}"
                      f", which is no condition and no capability of {rubric} ({', '.join(names)}); use base, "
                      "adapters, routed, mixture, a baseline or one of those capabilities")


def pipeline_config_from_dict(data: Mapping[str, Any], *, where: str = "<dict>", text: str = "",
                              sources: Mapping[str, str] | None = None) -> PipelineConfig:
    config = build(PipelineConfig, data, where=where, text=text, sources=sources)
    assert isinstance(config, PipelineConfig)
    return config
