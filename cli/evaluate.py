"""`tracec evaluate`: base, each adapter and routed on a target, greedy, resumable; the pass-rate table.

By default it is the preset TRACE reports: greedy decoding (temperature 0, transformers and vLLM), one trial per
task, fixed task seeds from `--first-seed`, the step limit `--max-turns` and the per-turn limit `--max-new-tokens`.
`--trials K` plays each task K times (episode seeds derived from the task seed, `evaluate.episode_seed`) and adds
tau2-bench's pass^1..pass^K beside the pass rate; since the model decodes greedily, K trials of a deterministic
environment repeat one episode (pass^k = pass^1): pass^k tells something only with sampling, which these agents
do not do.

    tracec evaluate --run runs/pipeline --target tau2 --domain airline --domain retail --user base -o runs/eval
    tracec evaluate --model smollm2-135m-instruct --conditions base --target toolsandbox \
        --scenario state_dependency --user scripted --first-seed 0 --tasks 13 -o runs/eval_toolsandbox
    tracec evaluate --model smollm2-135m-instruct --adapter pv=runs/p/train/pv/checkpoints/iter_000010/adapter \
        --options runs/p/route/options.json --target capability --env examples/envs/multi_step_completion.rubric \
        --conditions base,adapters,routed --tasks 20 --max-turns 8 -o runs/eval

The adapters and routing options come from a pipeline's run folder (`--run`: its `train/adapters.json`, its
`baselines/adapters.json` when it built baselines, `route/options.json` and `[model]`) or are named one by one
(`--adapter NAME=DIR`, `--options FILE`). TRACE's full routing: `--top-p P` is the `mixture` condition's nucleus,
`--retrieve-k K --index FILE.jsonl` the retrieval pre-filter (a run's `[routing]` top_p and retrieval_k, and its
`route/index.jsonl`, by default). Targets: capability environments (`--env FILE`, one domain each), a TextWorld
family (`--challenge`), tau2-bench domains (`--domain`, with the scripted user or the base model as the user,
`--user`), ToolSandbox's scenarios (`--scenario NAME|CATEGORY`, repeatable, default all 101; one domain, its tasks
the selection in file order from `--first-seed`; `--user` as tau2's). Per-task results go to `OUT/results.jsonl`
as they finish (a rerun plays only the missing tasks; `--fresh` starts over), the table to `OUT/table.md` and
`OUT/table.json` and to stdout, the routing confusion table with it; for ToolSandbox its own numbers after it (mean
similarity, perfect rate and turns, overall and per category: `OUT/toolsandbox.md`, `OUT/toolsandbox.json`).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.cli.errors import EXIT_OK, UsageError
from tracec.cli.paths import input_file, work_folder
from tracec.trace_rl.envs.config import TextWorldEnvSection
from tracec.trace_rl.envs.toolcall import CALL_FORMATS, DEFAULT_CALL_FORMAT
from tracec.trace_rl.policy.catalog import ModelError
from tracec.trace_rl.targeting.adapters import AdapterError
from tracec.trace_rl.targeting.evaluate import EvalError
from tracec.trace_rl.targeting.pipeline import layout
from tracec.trace_rl.targeting.pipeline.config import EvaluateSection, TargetSection, Tau2TargetSection
from tracec.trace_rl.targeting.pipeline.toolsandbox_target import ToolSandboxTargetSection, fingerprint_values
from tracec.trace_rl.targeting.routing import RouteError, RouteOption, RoutingSettings

from tracec.arguments import integer, number, torch_device
from tracec.config_io import ConfigError, FieldError, read_toml, to_dict

USER_ERRORS = (AdapterError, ConfigError, EvalError, ModelError, RouteError)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the model and its adapters")
    group.add_argument("--run", type=Path, help="a `tracec pipeline` run folder: its model, adapters and routing")
    group.add_argument("--model", help="the base model (default: the run's, else smollm2-135m-instruct)")
    group.add_argument("--adapter", action="append", default=[], metavar="NAME=DIR",
                       help="an adapter folder under a name (repeatable)")
    group.add_argument("--options", type=Path, help="routing options JSON (default: the run's route/options.json)")
    group.add_argument("--device", type=torch_device, default=None,
                       help="torch device: cpu, cuda or cuda:N (default: the run's, else cpu)")
    group.add_argument("--engine", choices=("transformers", "vllm"), default=None,
                       help="what decodes: transformers (peft adapters) or vllm (a LoRARequest per request; on the "
                            "CPU from the venv `make vllm-venv` builds; default: the run's, else transformers)")
    group.add_argument("--vllm-gpu-memory", type=number(0, 1, above=True), default=None, metavar="F",
                       help="vllm: the share of the device's memory it may take, on the CPU of RAM (default: the "
                            f"run's evaluate.vllm_gpu_memory, else {EvaluateSection().vllm_gpu_memory})")
    group.add_argument("--max-new-tokens", type=integer(1), default=128, help="per turn (default 128)")
    routing = parser.add_argument_group("TRACE's full routing")
    routing.add_argument("--top-p", type=number(0, 1, above=True), default=None, metavar="P",
                         help="the mixture's nucleus: the fewest adapters whose label weights, renormalised over "
                              "the adapters, reach P; base alone when base scores highest (default: the run's "
                              f"routing.top_p, else {RoutingSettings().top_p})")
    routing.add_argument("--retrieve-k", type=integer(0), default=None, metavar="K",
                         help="route among the capabilities of the K indexed trajectories nearest the task (default: "
                              "the run's routing.retrieval_k, else 0: every capability)")
    routing.add_argument("--index", type=Path, default=None, metavar="FILE.jsonl",
                         help="the retrieval index: {text, capabilities} lines (default: the run's route/index.jsonl)")


def add_target_arguments(group: Any, *, required: bool) -> None:
    """The flags that name a target, which `target_from_args` reads: evaluate's to play it, route's to take one task
    of it (the first message it routes on is the one evaluate's routed condition sees: one default user for both)."""
    user = Tau2TargetSection().user
    group.add_argument("--target", choices=("capability", "textworld", "tau2", "toolsandbox"), required=required,
                       help="what is played: capability environments, a TextWorld family, tau2-bench domains or "
                            "ToolSandbox's scenarios")
    group.add_argument("--env", action="append", default=[], type=Path, help="capability: a .rubric (repeatable)")
    group.add_argument("--challenge", default="tw-simple", help="textworld: custom | tw-simple | tw-cooking")
    group.add_argument("--domain", action="append", default=[], help="tau2: airline and/or retail (default both)")
    group.add_argument("--scenario", action="append", default=[], metavar="NAME|CATEGORY",
                       help="toolsandbox: a scenario or a category, e.g. state_dependency (repeatable; default all)")
    group.add_argument("--user", choices=("base", "scripted"), default=user,
                       help="tau2, toolsandbox: the simulated user: the base model (TRACE) or scripted (tau2: opens "
                            f"and consents; toolsandbox: the scenario's fixed replies) (default {user})")
    group.add_argument("--tau2-data", default="", help="tau2: the data folder (default $TRACEC_TAU2_DATA)")
    group.add_argument("--call-format", choices=CALL_FORMATS, default=DEFAULT_CALL_FORMAT,
                       help="tool targets: tools as JSON schemas and <tool_call> calls (native) or listed in the "
                            f"system prompt with <action> calls (text); default {DEFAULT_CALL_FORMAT}, training's")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    target = parser.add_argument_group("the target")
    add_target_arguments(target, required=True)
    target.add_argument("--max-turns", type=integer(1), default=30, help="agent turns per episode (default 30)")
    parser.add_argument("--conditions", default="base,adapters,routed",
                        help="comma-separated: base, adapters (each), routed, mixture, or adapter names")
    parser.add_argument("--tasks", type=integer(1), default=20, help="tasks per domain (default 20)")
    parser.add_argument("--trials", type=integer(1), default=EvaluateSection().trials,
                        help="episodes per task; K > 1 adds tau2-bench's pass^1..pass^K (default 1: TRACE's preset)")
    parser.add_argument("--first-seed", type=integer(0), default=EvaluateSection().first_seed,
                        help=f"the first task's seed (default {EvaluateSection().first_seed}: the pipeline's, held out "
                             "from the seeds it collects and trains on)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the output folder")
    parser.add_argument("--fresh", action="store_true", help="start over in an output folder of other settings")
    parser.add_argument("--quiet", action="store_true", help="no line per task on stderr")


def run(args: argparse.Namespace) -> int:
    from tracec.trace_rl.targeting.adapters import BaseModelUser
    from tracec.trace_rl.targeting.evaluate import checked_conditions, evaluate, policy_conditions
    from tracec.trace_rl.targeting.routing import Router

    target = target_from_args(args)
    out = work_folder(args.output)
    named = [c.strip() for c in args.conditions.split(",") if c.strip()]
    if not named:
        raise UsageError("--conditions: name at least one: base, adapters, routed, mixture or an adapter's name")
    routing, index, index_path = routing_from_args(args)
    choice = model_choice(args)
    try:  # every argument is checked before the model loads: a typo is answered at once
        chosen = checked_conditions(named, list(choice.adapters), routing=choice.options is not None)
    except ValueError as error:
        raise UsageError(f"--conditions: {error}") from None
    from tracec.trace_rl.targeting.pipeline.targets import (  # the environments: torch, textworld
        target_domains,
        target_metrics,
    )

    user = BaseModelUser()  # the environments are built (their files read) first; the model joins once loaded
    domains = target_domains(target, first_seed=args.first_seed, tasks=args.tasks, user=user)
    model = load_model(choice)
    user.bind(model)
    router = Router(model, choice.options, routing, index) if choice.options is not None else None
    conditions = policy_conditions(model, chosen, router)
    fingerprint = {"model": choice.name, "adapters": {n: str(p) for n, p in choice.adapters.items()},
                   "options": [o.__dict__ for o in choice.options or []], "target": fingerprint_values(to_dict(target)),
                   "max_turns": args.max_turns, "max_new_tokens": args.max_new_tokens}
    if choice.engine != "transformers":  # only then: older folders keep their fingerprint
        fingerprint["engine"] = choice.engine
    if routing.retrieval_k or "mixture" in named:  # only then: older folders keep their fingerprint
        fingerprint["routing"] = {"top_p": routing.top_p, "retrieval_k": routing.retrieval_k,
                                  "index": str(index_path) if index_path is not None else None}
    say = (lambda _: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    table = evaluate(domains, conditions, out, max_turns=args.max_turns, fingerprint=fingerprint, fresh=args.fresh,
                     trials=args.trials, report=say)
    sys.stdout.write(table.markdown())
    metrics = target_metrics(target, out, [c.name for c in conditions], domains)
    if metrics:
        sys.stdout.write("\n" + metrics)
    say(f"{out}: results.jsonl, table.md, table.json, " + ("toolsandbox.md, toolsandbox.json, " if metrics else "")
        + "trajectories/")
    return EXIT_OK


def target_from_args(args: argparse.Namespace) -> Any:
    if args.target == "capability" and not args.env:
        raise UsageError("--target capability: name its environments, --env FILE.rubric (one a domain)")
    try:
        return TargetSection(kind=args.target, environments=tuple(str(input_file(p)) for p in args.env),
                             textworld=TextWorldEnvSection(challenge=args.challenge),
                             tau2=Tau2TargetSection(domains=tuple(args.domain) or ("airline", "retail"),
                                                    data=args.tau2_data, user=args.user),
                             toolsandbox=ToolSandboxTargetSection(scenarios=tuple(args.scenario), user=args.user),
                             max_turns=args.max_turns, call_format=args.call_format)
    except FieldError as error:
        flag = {"environments": "--env", "challenge": "--challenge", "domains": "--domain", "scenarios": "--scenario",
                "max_turns": "--max-turns"}.get(error.name, error.name)
        raise UsageError(f"{flag}: {error.problem}") from None


def model_adapters(args: argparse.Namespace) -> dict[str, Path]:
    """The adapters named: the run's (`train/adapters.json`, and `baselines/adapters.json` when the run built
    baselines), then each `--adapter NAME=DIR`."""
    adapters: dict[str, Path] = {}
    if args.run is not None:
        input_file(args.run / layout.TRAIN / layout.ADAPTERS)  # a run that never trained: said as its missing file
        adapters.update(layout.adapter_folders(args.run / layout.TRAIN))
        if (args.run / layout.BASELINES / layout.ADAPTERS).is_file():
            adapters.update(layout.adapter_folders(args.run / layout.BASELINES))
    for item in args.adapter:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise UsageError(f"--adapter {item}: write --adapter NAME=DIR")
        adapters[name] = Path(folder)
    return adapters


@dataclass(frozen=True, kw_only=True)
class ModelChoice:
    """The model a command loads, every file read and every setting checked: what is left is only the loading."""

    name: str
    adapters: dict[str, Path]
    options: list[RouteOption] | None  # the routing options; None when there are none
    engine: str
    vllm_gpu_memory: float
    device: str
    dtype: str
    max_new_tokens: int


def model_choice(args: argparse.Namespace) -> ModelChoice:
    """The base model, its adapters (each folder checked to hold a whole adapter, never looked up online) and the
    routing options the arguments name, the run's settings filling what they leave out; nothing loads torch. For
    the vllm engine, what it would fail on (its install, the model, the adapters' ranks) is checked too."""
    from tracec.trace_rl.policy.catalog import TINY, require_device, resolve_model
    from tracec.trace_rl.targeting.adapters import adapter_config
    from tracec.trace_rl.targeting.routing import read_options
    from tracec.trace_rl.targeting.vllm_adapters import check_engine_inputs

    run = read_toml(str(input_file(args.run / layout.CONFIG)))[0] if args.run is not None else {}
    settings, evaluate = _table(run, "model"), _table(run, "evaluate")
    path = args.options or (args.run / layout.ROUTE / layout.OPTIONS if args.run is not None else None)
    options = read_options(input_file(path)) if path is not None else None
    adapters = model_adapters(args)
    for folder in adapters.values():
        adapter_config(folder)
    name = args.model or settings.get("name") or "smollm2-135m-instruct"
    if name != TINY:
        resolve_model(name)
    device = args.device or settings.get("device") or "cpu"
    require_device(device, "--device" if args.device else "model.device")
    engine = args.engine or evaluate.get("engine") or "transformers"
    if engine == "vllm":
        check_engine_inputs(name, adapters)
    memory = args.vllm_gpu_memory or evaluate.get("vllm_gpu_memory") or EvaluateSection().vllm_gpu_memory
    return ModelChoice(name=name, adapters=adapters, options=options, engine=engine, vllm_gpu_memory=float(memory),
                       device=device, dtype=settings.get("dtype", "float32"), max_new_tokens=args.max_new_tokens)


def load_model(choice: ModelChoice) -> Any:
    """The base model with the adapters loaded, on the chosen engine (torch, transformers: seconds)."""
    from tracec.trace_rl.targeting.peft_adapters import load_adapter_model

    return load_adapter_model(choice.name, choice.adapters, engine=choice.engine, device=choice.device,
                              dtype=choice.dtype, max_new_tokens=choice.max_new_tokens,
                              vllm_gpu_memory=choice.vllm_gpu_memory)


def routing_from_args(args: argparse.Namespace) -> tuple[Any, list[Any], Path | None]:
    """The routing settings of `--top-p` and `--retrieve-k` (else the run's `[routing]`), the index of `--index`
    (else the run's `route/index.jsonl`) when retrieval is on, and its path; read before the model loads."""
    from tracec.trace_rl.targeting.retrieval import read_index

    run = read_toml(str(input_file(args.run / layout.CONFIG)))[0] if args.run is not None else {}
    section = _table(run, "routing")
    k = args.retrieve_k if args.retrieve_k is not None else int(section.get("retrieval_k", 0))
    top_p = args.top_p if args.top_p is not None else float(section.get("top_p", RoutingSettings().top_p))
    if args.index is not None and k == 0:
        raise UsageError("--index: retrieval needs --retrieve-k K (K >= 1) too")
    path = args.index or (args.run / layout.ROUTE / layout.INDEX if args.run is not None and k else None)
    if k and path is None:
        raise UsageError("--retrieve-k: name the retrieval index, --index FILE.jsonl (or --run DIR of a pipeline "
                         "run with routing.retrieval_k > 0)")
    index = read_index(input_file(path)) if k and path is not None else []
    return RoutingSettings(top_p=top_p, retrieval_k=k), index, path


def _table(config: dict[str, Any], name: str) -> dict[str, Any]:
    section = config.get(name, {})
    return section if isinstance(section, dict) else {}
