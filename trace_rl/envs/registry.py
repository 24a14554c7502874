"""The registry of environment kinds: fresh environments of the kind a config's `[env]` section names.

`environment_factory(section)` makes fresh environments of one target, all speaking the one protocol
(`trace_rl.envs.protocol`): a capability environment compiled from its `.rubric` file (its user scripted, or with
`env.capability.user = "llm"` the `user_model` playing the task's customer: `envs.users.LLMUser`), a TextWorld task
family (one game per seed, made as `tw-make` makes it and cached), a tau2-bench domain, ToolSandbox's scenarios
(`kind = "toolsandbox"`: seed N plays scenario N mod n of the selection, its user scripted or, with
`env.toolsandbox.user = "llm"`, the `user_model` as the benchmark's user simulator), any class of your own
(`kind = "python"`, `factory = "package.module:function"`), or a weighted mixture of capability environments
(`kind = "mixture"`, `[env.mixture] paths = [...]`, `weights = [...]`: multi-capability GRPO, one adapter trained on
them all; `trace_rl.envs.mixture` draws each seed's component from the weights, so a group shares one and a resumed
run draws the same). The kinds' settings are `envs.config`'s sections; a setting that names a file that cannot serve
is a ConfigError with its key (the trainer's preflight says the same earlier, for a run's config). The trainer, the
TRACE pipeline's targets and `evaluate` all make their environments here.
Left out: mixtures of other kinds than capability environments (TextWorld, tau2-bench, python), and the order of a
run's task seeds (the trainer's data flow: `grpo.task_stream`).
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs import capability
from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.envs.config import CapabilityEnvSection, EnvSection
from tracec.trace_rl.envs.mixture import MixtureEnvironment
from tracec.trace_rl.envs.protocol import Environment, EnvironmentFactory
from tracec.trace_rl.envs.tau2 import Tau2Environment, find_data_dir, load_domain, load_guidelines, tau2_user
from tracec.trace_rl.envs.tau2.gold import gold_user
from tracec.trace_rl.envs.textworld.env import CookingGame, CustomGame, SimpleGame, TextWorldEnvironment
from tracec.trace_rl.envs.textworld.game_file import game_file_problem
from tracec.trace_rl.envs.toolcall import DEFAULT_CALL_FORMAT
from tracec.trace_rl.envs.toolsandbox import (
    ToolSandboxEnvironment,
    scripted_user,
    select_scenarios,
    shipped_scenarios,
    simulated_user,
)
from tracec.trace_rl.envs.user_factory import made_environment, python_factory
from tracec.trace_rl.envs.users import LLMUser
from tracec.trace_rl.llm.local import SamplingConfig, TransformersBackend
from tracec.trace_rl.policy.catalog import TINY, resolve_model
from tracec.trace_rl.policy.tiny import build_tiny_model

from tracec.cache_dir import cache_root
from tracec.config_io import ConfigError, FieldError, shown
from tracec.user_path import expand_user


def environment_factory(section: EnvSection) -> EnvironmentFactory:
    """Fresh environments of the target `section` names (each call of the factory makes one)."""
    makers = {"capability": _capability, "textworld": _textworld, "tau2": _tau2, "toolsandbox": _toolsandbox,
              "mixture": _mixture}
    if section.kind == "python":
        return _python(section.python.factory)
    return makers[section.kind](section)


def _capability(section: EnvSection) -> EnvironmentFactory:
    program = _program(section.capability.path, section.capability.name, "env.capability.path")
    return _capability_factory(program, section.call_format, _capability_user(section.capability))


def _mixture(section: EnvSection) -> EnvironmentFactory:
    """Each component compiled once, as `kind = "capability"` would, all with `[env.capability]`'s user (its model
    loaded once); each environment made draws its own component."""
    mixture, user = section.mixture, _capability_user(section.capability)
    components = [(Path(path).stem, _capability_factory(_program(path, "", f"env.mixture.paths[{i}]"),
                                                        section.call_format, user))
                  for i, path in enumerate(mixture.paths)]
    return lambda: MixtureEnvironment(components, weights=mixture.resolved_weights)


def _program(path: str, name: str, key: str) -> Any:
    try:
        return load_environment(path, name=name or None)
    except FileNotFoundError:
        raise ConfigError(f"{key} = {path!r}: no such file; name a capability environment's "
                          "`.rubric` file, e.g. examples/envs/tool_calling_precision.rubric") from None
    except OSError as error:  # a folder, a file it may not read: the key with the path
        raise ConfigError(f"{key} = {path!r}: {(error.strerror or str(error)).lower()}") from None


def _capability_user(section: CapabilityEnvSection) -> Any:
    """The chat backend of the llm user (None: the scripted user)."""
    return _user_backend(section.user_model) if section.user == "llm" else None


def _capability_factory(program: Any, call_format: str, user: Any) -> EnvironmentFactory:
    return lambda: capability.CapabilityEnvironment(program, call_format=call_format,
                                          user=LLMUser(user) if user is not None else None)


def _textworld(section: EnvSection) -> EnvironmentFactory:
    tw = section.textworld
    cache = expand_user(tw.cache, given_as=f"env.textworld.cache = {tw.cache}") if tw.cache \
        else cache_root(os.environ) / "textworld"
    if tw.game:
        problem = game_file_problem(Path(tw.game))
        if problem is not None:  # else TextWorld's own answer: its game engine's exit, or a traceback
            raise ConfigError(f"env.textworld.game = {tw.game!r}: {problem}")
        game: Any = Path(tw.game)
    elif tw.challenge == "custom":
        game = CustomGame(world_size=tw.world_size, nb_objects=tw.nb_objects, quest_length=tw.quest_length)
    elif tw.challenge == "tw-simple":
        game = SimpleGame(rewards=tw.rewards, goal=tw.goal)  # type: ignore[arg-type]
    else:
        game = CookingGame(world_size=tw.world_size, recipe=tw.recipe, take=tw.take,  # type: ignore[arg-type]
                           skills=tw.skills)  # type: ignore[arg-type]
    return lambda: TextWorldEnvironment(game, cache_dir=cache, show_admissible=tw.show_admissible)


def _tau2(section: EnvSection) -> EnvironmentFactory:
    data = tau2_data(section.tau2.data, "env.tau2.data")
    user = None if section.tau2.user == "scripted" else _user_backend(section.tau2.user_model)
    return tau2_factory(load_domain(section.tau2.domain, data), data, user=user, max_turns=section.max_turns,
                        call_format=section.call_format)


def tau2_data(setting: str, key: str) -> Path:
    """The tau2-bench data folder a config's `key` names (empty: the default one); a ConfigError saying why not."""
    try:
        return find_data_dir(setting or None)
    except FileNotFoundError as error:
        raise ConfigError(f"{key} = {setting!r}: {error}") from None


def tau2_factory(domain: Any, data: Path, *, user: Any, max_turns: int,
                 call_format: str = DEFAULT_CALL_FORMAT) -> EnvironmentFactory:
    """Environments of one tau2-bench domain: the scripted gold user when `user` is None, else that chat backend
    simulating the user under the benchmark's guidelines."""
    gold: dict[str, Any] = {}  # each task's gold database, replayed once for all environments
    if user is None:
        return lambda: Tau2Environment(domain, user=gold_user(), max_steps=max_turns, gold=gold,
                                       call_format=call_format)
    guidelines = load_guidelines(data)
    return lambda: Tau2Environment(domain, user=tau2_user(user, guidelines=guidelines), max_steps=max_turns, gold=gold,
                                   call_format=call_format)


def _toolsandbox(section: EnvSection) -> EnvironmentFactory:
    settings = section.toolsandbox
    user = None if settings.user == "scripted" else _user_backend(settings.user_model)
    return toolsandbox_factory(toolsandbox_names(settings.scenarios, "env.toolsandbox.scenarios"), user=user,
                               max_turns=section.max_turns, call_format=section.call_format)


def toolsandbox_names(chosen: tuple[str, ...], key: str) -> tuple[str, ...]:
    """The scenario names a config's `key` selects (names or categories; empty: all); a ConfigError naming the key
    for an entry that is neither."""
    try:
        return select_scenarios(shipped_scenarios(), chosen)
    except ValueError as error:
        raise ConfigError(f"{key} = {shown(chosen)}: {error}") from None


def toolsandbox_factory(names: tuple[str, ...], *, user: Any, max_turns: int,
                        call_format: str = DEFAULT_CALL_FORMAT) -> EnvironmentFactory:
    """Environments playing ToolSandbox's scenarios `names` (seed N: scenario N mod n): the scenario's scripted
    replies when `user` is None, else that chat backend as the benchmark's user simulator."""
    scenarios = shipped_scenarios()
    user_for = scripted_user if user is None else partial(simulated_user, user)
    return lambda: ToolSandboxEnvironment(scenarios, names=names, max_steps=max_turns, user_for=user_for,
                                          call_format=call_format)


def _user_backend(name: str) -> Any:
    """The simulated user's chat backend: the named model without any adapter."""
    config = SamplingConfig(max_new_tokens=96, temperature=0.7)
    if name == TINY:
        model, tokenizer = build_tiny_model(0)
        return TransformersBackend(model, tokenizer, config=config)
    return TransformersBackend.from_pretrained(resolve_model(name), config=config)


def _python(spec: str) -> EnvironmentFactory:
    """Environments of the factory `spec` names, each checked to speak the protocol (`envs.user_factory`): else the
    rollout would fail on its first `reset`, far from the config's mistake."""
    try:
        factory = python_factory(spec)
    except FieldError as error:
        raise ConfigError(str(error)) from None

    def make() -> Environment:
        try:
            return made_environment(spec, factory)
        except FieldError as error:
            raise ConfigError(str(error)) from None

    return make
