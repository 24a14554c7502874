"""The pipeline's `baselines` step: the adapters TRACE is compared against, built after `train`, before `route`.

Each name of `baselines.conditions` becomes one adapter in `baselines/NAME/`, and `baselines/adapters.json` names
them in the train step's format (adapter folder relative to the step's folder, iterations, first and last mean
reward) plus how each was made (`kind`, and the merge's `rank` and SVD `residual`, the SFT's epochs and episodes):
- multi_grpo: one adapter trained by GRPO with `[train]` on the weighted mixture of every built environment
  (`env.kind = "mixture"`, weights `baselines.weights`: uniform, or each selected capability's mean coverage), for
  `baselines.iterations`, by default `train.run.iterations` x the number of environments: each iteration has the
  rollouts of one capability adapter's, so the baseline spends the rollouts of all the adapters together;
- merge_linear: the trained adapters' mean (task arithmetic, `merging.merge_linear`), exact;
- merge_ties: TIES-merging of them (`merging.merge_ties`, `ties_density`, `ties_scale`, `ties_rank`);
- sft_gold: one adapter fine-tuned on every environment's gold episodes (`gold_sft.train_gold_sft`, `sft_*`;
  `[train]`'s model, LoRA, rollout format and optimizer betas, with `sft_max_new_tokens` as the longest gold turn).
The evaluate step loads them beside the trained adapters (`evaluate.conditions` names each, or `baselines` for
all); they are never routing options and stay out of the oracle row. Training resumes as the train step's does
(multi_grpo from its checkpoints, sft_gold from its own). `check_settings` builds the merge and SFT settings when the
pipeline starts, so a bad value is said before any step runs.
Left out: merges of other methods (DARE, weighted TIES).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.config import MixtureEnvSection
from tracec.trace_rl.grpo.report import console_line
from tracec.trace_rl.grpo.run_folder import run_started
from tracec.trace_rl.grpo.train import train
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.targeting.gold_sft import GoldSFTSettings, train_gold_sft
from tracec.trace_rl.targeting.merging import MergeError, check_ties, merge_linear, merge_ties
from tracec.trace_rl.targeting.pipeline.config import BaselinesSection, PipelineConfig
from tracec.trace_rl.targeting.pipeline.context import Context
from tracec.trace_rl.targeting.pipeline.layout import ADAPTERS, MANIFEST, SELECTED, adapter_folders, read_json
from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed

from tracec.atomic import write_atomic
from tracec.config_io import FieldError, shown


def check_settings(config: PipelineConfig) -> tuple[GoldSFTSettings, RolloutSection]:
    """The SFT settings of `[baselines]` and its rollout section (`[train.rollout]` with the gold turns' cap), and
    its TIES settings checked: a PipelineFailed names a bad key."""
    section = config.baselines
    try:
        check_ties(density=section.ties_density, scale=section.ties_scale, rank=section.ties_rank or None)
    except MergeError as error:
        raise PipelineFailed(f"baselines: {error}") from None
    try:
        settings = GoldSFTSettings(epochs=section.sft_epochs, lr=section.sft_lr, tasks=section.sft_tasks,
                                   first_seed=section.sft_first_seed)
        # SFT samples nothing: the cap on a turn is only on how long a gold turn may be.
        rollout = dataclasses.replace(config.train.rollout, max_new_tokens=section.sft_max_new_tokens)
    except FieldError as error:
        if error.name in ("max_new_tokens", "max_context_tokens"):
            raise PipelineFailed(f"baselines.sft_max_new_tokens = {section.sft_max_new_tokens}: the longest gold "
                                 "turn, an integer >= 1 below train.rollout.max_context_tokens = "
                                 f"{config.train.rollout.max_context_tokens}") from None
        raise PipelineFailed(f"baselines.sft_{error.name} = {shown(error.value)}: {error.problem}") from None
    return settings, rollout


def build_baselines(context: Context, folder: Path, built: Path, trained: Path, selected: Path) -> str:
    section = context.config.baselines
    environments = read_json(built / MANIFEST)["environments"]
    paths = [built / e["path"] for e in environments]
    entries: dict[str, Any] = {}
    for name in section.conditions:
        out = folder / name
        context.detail(f"baselines {name}: building")
        if name == "multi_grpo":
            entries[name] = _multi_grpo(context, out, paths, _weights(section, environments, selected))
        elif name in ("merge_linear", "merge_ties"):
            sources = list(adapter_folders(trained).values())
            try:
                result = merge_linear(sources, out / "adapter") if name == "merge_linear" else merge_ties(
                    sources, out / "adapter", density=section.ties_density, scale=section.ties_scale,
                    rank=section.ties_rank or None)
            except MergeError as error:
                raise PipelineFailed(f"baselines {name}: {error}") from None
            entries[name] = {"adapter": (out / "adapter").relative_to(folder).as_posix(), "iterations": 0,
                             "first_reward": None, "last_reward": None, "kind": result.method, "rank": result.rank,
                             "residual": result.residual}
        else:
            settings, rollout = check_settings(context.config)
            adapter = train_gold_sft(_train_config(context, out).replace(rollout=rollout), paths, out,
                                     settings=settings)
            marker = read_json(out / "gold_sft.json")
            entries[name] = {"adapter": adapter.relative_to(folder).as_posix(), "iterations": section.sft_epochs,
                             "first_reward": None, "last_reward": None, "kind": "sft_gold",
                             "episodes": marker.get("episodes")}
    write_atomic(folder / ADAPTERS, [json.dumps(entries, indent=2) + "\n"])
    return ", ".join(f"{name}: {_summary(entry)}" for name, entry in entries.items()) or "none asked for"


def _train_config(context: Context, out: Path, **env: Any) -> Any:
    config = context.config
    section = dataclasses.replace(config.train.env, **env) if env else config.train.env
    return config.train.replace(model=config.model, env=section, run=dataclasses.replace(config.train.run,
                                                                                           out=str(out)))


def _multi_grpo(context: Context, out: Path, paths: list[Path], weights: tuple[float, ...]) -> dict[str, Any]:
    section = context.config.baselines
    total = section.iterations or context.config.train.run.iterations * len(paths)
    config = _train_config(context, out, kind="mixture",
                           mixture=MixtureEnvSection(paths=tuple(map(str, paths)), weights=weights))
    config = config.replace(run=dataclasses.replace(config.run, iterations=total))

    def progress(record: dict[str, Any]) -> None:
        context.detail(f"baselines multi_grpo: {console_line(record, total)}")

    result = train(config, out=out, resume=run_started(out), on_iteration=progress)
    rewards = [m.get("reward_mean") for m in result.metrics]
    return {"adapter": result.adapter.relative_to(out.parent).as_posix(), "iterations": len(result.metrics),
            "first_reward": rewards[0] if rewards else None, "last_reward": rewards[-1] if rewards else None,
            "kind": "multi_grpo", "environments": [p.stem for p in paths], "weights": list(weights)}


def _weights(section: BaselinesSection, environments: list[dict[str, Any]], selected: Path) -> tuple[float, ...]:
    if section.weights == "uniform":
        return (1.0,) * len(environments)
    coverage = {s["skill"]: float(s["mean_cov"]) for s in read_json(selected / SELECTED)}
    weights = tuple(coverage.get(e["name"], 0.0) for e in environments)
    if not sum(weights) > 0:
        raise PipelineFailed("baselines.weights = \"coverage\": no built environment has a selected capability with "
                             "a coverage above 0; use baselines.weights = \"uniform\"")
    return weights


def _summary(entry: dict[str, Any]) -> str:
    if entry["kind"] in ("linear", "ties"):
        return f"rank {entry['rank']}, SVD residual {entry['residual']:.3f}"
    if entry["kind"] == "sft_gold":
        return f"{entry['iterations']} epochs on {entry['episodes']} gold episodes"
    first, last = entry["first_reward"], entry["last_reward"]
    return f"reward {'-' if first is None else f'{first:.3f}'} -> {'-' if last is None else f'{last:.3f}'} in " \
        f"{entry['iterations']} iterations"
