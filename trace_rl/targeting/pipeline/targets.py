"""The target of a pipeline or an evaluation as the table's domains: fresh environments and the task seeds of each.

    domains = target_domains(section, first_seed=1000, tasks=8, max_turns=8, user=BaseModelUser(model))

A capability target is one domain per `.rubric` file (named by its environment); a TextWorld target is one domain,
its family (seed N plays game N); tau2-bench is one domain per name (`airline`, `retail`), its tasks the first
`tasks` from `first_seed` in the benchmark's order (cut to the domain's size: 50 airline, 114 retail); ToolSandbox
is one domain, `toolsandbox`, its tasks the selected scenarios (`target.toolsandbox.scenarios`, all 101 by default)
in file order, cut alike. The environments are the registry's (`envs.registry.environment_factory`, the trainer's
too), so a target trains, collects and evaluates alike. tau2's and ToolSandbox's simulated users are scripted
(tau2's opens with the scenario, consents, never ends; ToolSandbox's says the scenario's fixed replies, then ends)
or the given chat backend, which the pipeline and `tracec evaluate` make the base model with every adapter off
(TRACE's protocol); a capability target's user is scripted, or with `target.user = "base"` that backend playing
the task's customer. `target_metrics` writes a target's own numbers beside the pass-rate table (ToolSandbox's mean
similarity and perfect rate per category; none for the other targets).
Left out: TextWorld's fixed game files as a target (a family is what a pipeline analyses).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.config import EnvSection
from tracec.trace_rl.envs.registry import (
    environment_factory,
    tau2_data,
    tau2_factory,
    toolsandbox_factory,
    toolsandbox_names,
)
from tracec.trace_rl.envs.tau2 import load_domain
from tracec.trace_rl.envs.toolsandbox.metrics import category_table
from tracec.trace_rl.envs.users import LLMUser
from tracec.trace_rl.llm.chat import ChatBackend
from tracec.trace_rl.targeting.evaluate import EvalDomain, episode_id, read_condition_trajectories, seeds_for
from tracec.trace_rl.targeting.pipeline.config import TargetSection

from tracec.atomic import write_atomic
from tracec.config_io import ConfigError

TOOLSANDBOX = "toolsandbox"  # the ToolSandbox target's one domain
TOOLSANDBOX_TABLE, TOOLSANDBOX_JSON = "toolsandbox.md", "toolsandbox.json"  # its numbers, beside table.md


def target_domains(target: TargetSection, *, first_seed: int, tasks: int, max_turns: int | None = None,
                   user: ChatBackend | None = None) -> list[EvalDomain]:
    """The domains of `target` with `tasks` seeds each from `first_seed`; `user` is tau2's (ToolSandbox's) simulated
    user when `target.tau2.user` (`target.toolsandbox.user`) is `base`, and the capability environments' when
    `target.user` is (required then)."""
    turns = max_turns or target.max_turns
    if target.kind == "capability":
        if target.user == "base" and user is None:
            raise ConfigError("target.user = \"base\" needs the base model as the capability environments' user")
        chosen = user if target.user == "base" else None
        return [_capability_domain(path, first_seed, tasks, turns, target.call_format, chosen)
                for path in target.environments]
    if target.kind == "textworld":
        section = EnvSection(kind="textworld", textworld=target.textworld, max_turns=turns)
        name = f"textworld-{target.textworld.challenge}"
        return [EvalDomain(name=name, make_env=environment_factory(section), seeds=seeds_for(first_seed, tasks))]
    if target.kind == TOOLSANDBOX:
        return [_toolsandbox_domain(target, first_seed, tasks, turns, user)]
    return [_tau2_domain(name, target, first_seed, tasks, turns, user) for name in target.tau2.domains]


def _capability_domain(path: str, first_seed: int, tasks: int, turns: int, call_format: str,
                       user: ChatBackend | None) -> EvalDomain:
    try:
        program = load_environment(path)
    except FileNotFoundError:
        raise ConfigError(f"target.environments: {path}: no such file; name capability environments' `.rubric` "
                          "files, e.g. \"examples/envs/multi_step_completion.rubric\"") from None

    def make() -> Any:
        return CapabilityEnvironment(program, max_steps=turns, call_format=call_format,
                           user=LLMUser(user) if user is not None else None)

    return EvalDomain(name=program.name, make_env=make, seeds=seeds_for(first_seed, tasks))


def _tau2_domain(name: str, target: TargetSection, first_seed: int, tasks: int, turns: int,
                 user: ChatBackend | None) -> EvalDomain:
    data = tau2_data(target.tau2.data, "target.tau2.data")
    domain = load_domain(name, data)
    available = len(domain.tasks)
    if first_seed >= available:
        raise ConfigError(f"tau2 {name} has {available} tasks; a first seed of {first_seed} leaves none "
                          f"(use first_seed < {available})")
    seeds = seeds_for(first_seed, tasks, available)
    scripted = target.tau2.user == "scripted"
    if not scripted and user is None:
        raise ConfigError("target.tau2.user = \"base\" needs the base model as the simulated user")
    make = tau2_factory(domain, data, user=None if scripted else user, max_turns=turns,
                        call_format=target.call_format)
    return EvalDomain(name=name, make_env=make, seeds=seeds)


def _toolsandbox_domain(target: TargetSection, first_seed: int, tasks: int, turns: int,
                        user: ChatBackend | None) -> EvalDomain:
    names = toolsandbox_names(target.toolsandbox.scenarios, "target.toolsandbox.scenarios")
    if first_seed >= len(names):
        raise ConfigError(f"toolsandbox has {len(names)} scenarios selected; a first seed of {first_seed} leaves none "
                          f"(use first_seed < {len(names)})")
    scripted = target.toolsandbox.user == "scripted"
    if not scripted and user is None:
        raise ConfigError("target.toolsandbox.user = \"base\" needs the base model as the simulated user")
    make = toolsandbox_factory(names, user=None if scripted else user, max_turns=turns,
                               call_format=target.call_format)
    return EvalDomain(name=TOOLSANDBOX, make_env=make, seeds=seeds_for(first_seed, tasks, len(names)))


def target_metrics(target: TargetSection, out: Path, conditions: Sequence[str],
                   domains: Sequence[EvalDomain]) -> str:
    """The target's own numbers over the first trials of `domains`' tasks in the evaluation folder `out`, written
    there (`toolsandbox.md`, `toolsandbox.json`) and returned as markdown; "" for a target without any."""
    if target.kind != TOOLSANDBOX:
        return ""
    wanted = {episode_id(d.name, seed, 0) for d in domains for seed in d.seeds}
    table = category_table({c: [r for r in read_condition_trajectories(out, c) if r["episode"] in wanted]
                            for c in conditions})
    text = table.markdown()
    write_atomic(out / TOOLSANDBOX_TABLE, [text])
    write_atomic(out / TOOLSANDBOX_JSON, [json.dumps(table.to_json(), indent=2) + "\n"])
    return text
