"""The pipeline's last three steps: train one adapter per environment, route the evaluation tasks, evaluate.

- train: `[train]` (a whole trainer config) with the pipeline's base model, the capability's environment and the
  run folder `NAME/` set, through the trainer's public `train(...)`; with `resume` once the run has started, so a
  killed step continues from each adapter's last checkpoint in the staging folder. `adapters.json` names each
  adapter folder (relative to the step's folder), its iterations and its first and last mean reward;
  `NAME/curve.png` is the trainer's curve.
- route: the routing options (`options.json`: each capability's label, description and gold example, then
  `base`), with `routing.retrieval_k` > 0 the retrieval index (`index.jsonl`, `route_index`), and the route of
  every evaluation task (`decisions.jsonl`) with its label logits, its retrieval and its nucleus mixture.
- evaluate: every condition of `evaluate.conditions` on the evaluation seeds of the target (`evaluate`), with the
  routed and mixture conditions' router rebuilt from `options.json` (and `index.jsonl`) and the baselines'
  adapters (`baseline_steps`) loaded beside the trained ones; `table.md`, `table.json`, per-task `results.jsonl`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.config import CapabilityEnvSection
from tracec.trace_rl.grpo.report import console_line
from tracec.trace_rl.grpo.run_folder import run_started
from tracec.trace_rl.grpo.train import train
from tracec.trace_rl.targeting.adapters import BaseModelUser
from tracec.trace_rl.targeting.evaluate import EvalDomain, evaluate, policy_conditions
from tracec.trace_rl.targeting.pipeline.context import Context
from tracec.trace_rl.targeting.pipeline.layout import (
    ADAPTERS,
    DECISIONS,
    INDEX,
    MANIFEST,
    OPTIONS,
    adapter_folders,
    read_json,
)
from tracec.trace_rl.targeting.pipeline.route_index import collected_index
from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed
from tracec.trace_rl.targeting.pipeline.targets import target_domains, target_metrics
from tracec.trace_rl.targeting.retrieval import read_index, write_index
from tracec.trace_rl.targeting.routing import RouteOption, Router, RoutingSettings, route_options

from tracec.atomic import write_atomic


def train_adapters(context: Context, folder: Path, built: Path) -> str:
    config = context.config
    trained: dict[str, Any] = {}
    for environment in read_json(built / MANIFEST)["environments"]:
        name, run_dir = environment["name"], folder / environment["name"]
        section = dataclasses.replace(config.train.env, kind="capability", call_format=config.target.call_format,
                                      capability=CapabilityEnvSection(path=str(built / environment["path"])))
        train_config = config.train.replace(model=config.model, env=section,
                                            run=dataclasses.replace(config.train.run, out=str(run_dir)))
        total = train_config.run.iterations
        context.detail(f"train {name}: {total} iterations on {environment['path']}")
        def progress(record: dict[str, Any], name: str = name, total: int = total) -> None:
            context.detail(f"train {name}: {console_line(record, total)}")

        result = train(train_config, out=run_dir, resume=run_started(run_dir), on_iteration=progress)
        rewards = [m.get("reward_mean") for m in result.metrics]
        trained[name] = {"adapter": result.adapter.relative_to(folder).as_posix(), "iterations": len(result.metrics),
                         "first_reward": rewards[0] if rewards else None,
                         "last_reward": rewards[-1] if rewards else None}
    write_atomic(folder / ADAPTERS, [json.dumps(trained, indent=2) + "\n"])
    return ", ".join(f"{n}: reward {_num(t['first_reward'])} -> {_num(t['last_reward'])} in {t['iterations']} "
                     "iterations" for n, t in trained.items())


def route(context: Context, folder: Path, built: Path, trained: Path,
          analysed: tuple[Path, Path, Path] | None = None) -> str:
    """`analysed`: the collect, label and select steps' folders, which the retrieval index is made of."""
    config = context.config
    capabilities = [(e["name"], e["description"], e["example"]) for e in read_json(built / MANIFEST)["environments"]]
    options = route_options(capabilities, config.routing.labels)
    write_atomic(folder / OPTIONS, [json.dumps([dataclasses.asdict(o) for o in options], indent=2) + "\n"])
    if config.routing.retrieval_k:
        assert analysed is not None, "the pipeline passes the analysis folders when retrieval is on"
        items = collected_index(*analysed, [name for name, _, _ in capabilities])
        if not items:
            raise PipelineFailed("routing.retrieval_k: no collected trajectory is labelled LACKING for a routed "
                                 "capability, so the retrieval index would be empty; set routing.retrieval_k = 0")
        write_index(folder / INDEX, items)
    model = context.load_model(adapter_folders(trained), max_new_tokens=config.evaluate.max_new_tokens,
                               engine=config.evaluate.engine)
    router = _router(context, model, folder)
    counts: dict[str, int] = {}
    lines = []
    for domain in _eval_domains(context, model):
        for seed in domain.seeds:
            decision = router.route(domain.first_message(seed), top_p=config.routing.top_p)
            counts[decision.choice] = counts.get(decision.choice, 0) + 1
            lines.append(json.dumps({"domain": domain.name, "seed": seed, **decision.record()}) + "\n")
            context.detail(f"route {domain.name} seed {seed}: {decision.choice} ("
                           + ", ".join(f"{n} {s:.2f}" for n, s in decision.logits.items()) + ")")
    write_atomic(folder / DECISIONS, lines)
    return f"{len(lines)} tasks: " + ", ".join(f"{n} {c}" for n, c in sorted(counts.items()))


def evaluate_step(context: Context, folder: Path, trained: Path, routed: Path, baselines: Path) -> str:
    config = context.config
    own, built = adapter_folders(trained), adapter_folders(baselines)  # the baselines: never routing options
    if set(own) & set(built):
        raise PipelineFailed(f"a capability is named like a baseline ({', '.join(sorted(set(own) & set(built)))}); "
                             "leave that baseline out of baselines.conditions")
    adapters = {**own, **built}
    model = context.load_model(adapters, max_new_tokens=config.evaluate.max_new_tokens, engine=config.evaluate.engine)
    try:
        conditions = policy_conditions(model, config.evaluate.conditions, _router(context, model, routed))
    except ValueError as error:
        raise PipelineFailed(f"evaluate.conditions: {error}") from None
    # More trials extend the folder's results rather than change them: left out of what they depend on.
    settings = {k: v for k, v in config.section("evaluate").items() if k != "trials"}
    domains = _eval_domains(context, model)
    table = evaluate(domains, conditions, folder, max_turns=config.target.max_turns,
                     trials=config.evaluate.trials, report=context.detail,
                     fingerprint={"model": config.section("model"), "target": config.section("target"),
                                  "evaluate": settings, "adapters": sorted(adapters)})
    if target_metrics(config.target, folder, [c.name for c in conditions], domains):  # ToolSandbox: similarity too
        return ", ".join(f"{c} {100 * table.cell(c).pass_rate:.0f}% (similarity {table.cell(c).mean_reward:.3f})"
                         for c in table.conditions)
    return ", ".join(f"{c} {100 * table.cell(c).pass_rate:.0f}%" for c in table.conditions)


def _router(context: Context, model: Any, routed: Path) -> Router:
    options = [RouteOption(**o) for o in read_json(routed / OPTIONS)]
    section = context.config.routing
    index = read_index(routed / INDEX) if section.retrieval_k else []
    return Router(model, options, RoutingSettings(labels=section.labels, task_chars=section.task_chars,
                                                  example_chars=section.example_chars, top_p=section.top_p,
                                                  retrieval_k=section.retrieval_k), index=index)


def _eval_domains(context: Context, model: Any) -> list[EvalDomain]:
    section = context.config.evaluate
    return target_domains(context.config.target, first_seed=section.first_seed, tasks=section.tasks,
                          user=BaseModelUser(model))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
