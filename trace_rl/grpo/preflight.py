"""A run's inputs, checked before any model loads: every file, model and environment its config names.

    config = load_config(path, overrides)
    check_located(config, path, overrides)   # what `tracec train` does; check_inputs(config) for one built in code

The trainer would find each of these mistakes too, but only once torch, transformers and the policy are loaded
(seconds, a progress bar already drawn), and some only once rollouts run. These checks read what they need without
any of that, in well under a second: the model folder's `config.json` and safetensors headers (so `lora.targets` is
matched against the model's layer names), a TextWorld game's header, the `.rubric` sources (parsed and checked as
the trainer will), the tau2-bench data folder; a python factory is imported and called once, and what it makes must
speak the environment protocol. Each problem is a `FieldError` naming its key, which `check_located` places as
`load_config` places a bad value: at the config's line or the `--set` that gave it, else as the key's default that
does not work here (a relative default path is read beside the config). The settings the environment named cannot
serve are said here as well (`rollout.action_mode = "admissible"` needs admissible commands, `advantage.kind =
"oracle"` a plan to follow): they are no checks of the config alone, since a config built in code may train on
another environment (`train(make_env=...)`).
Left out: what needs torch or the model itself (a CUDA device, vLLM, the context length) and the run folder's state
(a run already there, none to resume), which the trainer checks before the model loads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from tracec.compiler.load import load_rubric
from tracec.dsl.source_file import read_source
from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.envs.config import EnvSection
from tracec.trace_rl.envs.protocol import Environment
from tracec.trace_rl.envs.tau2 import find_data_dir
from tracec.trace_rl.envs.textworld.game_file import game_file_problem
from tracec.trace_rl.envs.user_factory import FACTORY, lists_commands, made_environment, python_factory
from tracec.trace_rl.grpo.config import RUBRIC_CREDITS, TrainConfig, config_to_dict
from tracec.trace_rl.policy.catalog import TINY, ModelError, adaptable_modules, check_checkpoint, resolve_model
from tracec.trace_rl.policy.lora import check_targets

from tracec.config_io import (
    ConfigError,
    FieldError,
    assign_override,
    expanded_path,
    located,
    read_toml,
    shown,
    value_at,
)

TOOL_KINDS = ("capability", "tau2", "toolsandbox", "mixture")  # of tool calls: no admissible commands, no plan


def check_located(config: TrainConfig, path: str | os.PathLike[str] | None, overrides: Sequence[str] = ()) -> None:
    """`check_inputs` of the config `load_config(path, overrides)` gave; its problem a ConfigError located where the
    key was set, or said to be the key's default."""
    try:
        check_inputs(config)
    except FieldError as bad:
        given, text = read_toml(str(path)) if path is not None else ({}, "")
        where = str(path) if path is not None else "<defaults>"
        sources = {assign_override(TrainConfig, given, item): f"--set {item}" for item in overrides}
        if bad.name not in sources and value_at(given, bad.name) is None:
            default = value_at(config_to_dict(TrainConfig()), bad.name)
            read_as = f" (read as {shown(bad.value)})" if bad.value != default else ""
            raise ConfigError(f"{where}: error: {bad.name} is not set, and its default, {shown(default)}{read_as}, "
                              f"does not work: {bad.problem}") from None
        raise located(where, text, bad.name, str(bad), sources=sources) from None


def check_inputs(config: TrainConfig) -> None:
    """A FieldError for the first input of `config` that cannot work (its paths absolute, as `load_config` gives)."""
    _check_model(config)
    made = _check_environment(config.env)
    _check_fits(config, made)
    if config.advantage.kind in RUBRIC_CREDITS:
        _check_rubric(config.advantage.rubric, config.advantage.rubric_name)


def _check_model(config: TrainConfig) -> None:
    name = config.model.name
    try:
        modules = adaptable_modules(name)
    except ModelError as error:
        raise FieldError("model.name", name, str(error)) from None
    if modules is not None:  # None: weights in another format than safetensors, matched once loaded
        check_targets(config.lora.targets, modules, name)


def _check_user_model(name: str, key: str) -> None:
    """The model a simulated user plays on (no adapter): installed, or a checkpoint folder that can load."""
    if name == TINY:
        return
    try:
        check_checkpoint(resolve_model(name))
    except ModelError as error:
        raise FieldError(key, name, str(error)) from None


def _check_environment(env: EnvSection) -> Environment | None:
    """The files of the environment `env` names, checked; for `kind = "python"`, the environment its factory made
    (closed again), else None."""
    if env.kind in ("capability", "mixture") and env.capability.user == "llm":
        _check_user_model(env.capability.user_model, "env.capability.user_model")
    if env.kind == "capability":
        _check_program(env.capability.path, env.capability.name, "env.capability.path")
    elif env.kind == "mixture":
        for path in env.mixture.paths:
            _check_program(path, "", "env.mixture.paths")
    elif env.kind == "textworld":
        _check_textworld(env)
    elif env.kind == "tau2":
        try:
            find_data_dir(env.tau2.data or None)
        except FileNotFoundError as error:
            raise FieldError("env.tau2.data", env.tau2.data, str(error)) from None
        if env.tau2.user == "llm":
            _check_user_model(env.tau2.user_model, "env.tau2.user_model")
    elif env.kind == "toolsandbox":  # the scenario names were checked with the config (package data)
        if env.toolsandbox.user == "llm":
            _check_user_model(env.toolsandbox.user_model, "env.toolsandbox.user_model")
    elif env.kind == "python":
        made = made_environment(env.python.factory, python_factory(env.python.factory))
        made.close()
        return made
    return None


def _check_program(path: str, name: str, key: str) -> None:
    _check_readable(path, key, f"a capability environment's `.rubric` file, e.g. {shown(_example('envs'))}")
    load_environment(path, name=name or None)  # a RubricError is located in the file itself


def _check_rubric(path: str, name: str) -> None:
    _check_readable(path, "advantage.rubric", f"the `.rubric` file of a rubric, e.g. {shown(_example())}")
    load_rubric(read_source(path), path, name or None)


def _check_readable(path: str, key: str, what: str) -> None:
    try:
        with open(path, "rb"):
            return
    except FileNotFoundError:
        problem = "no such file"
    except IsADirectoryError:
        problem = "is a folder, not a file"
    except OSError as error:
        problem = (error.strerror or str(error)).lower()
    raise FieldError(key, path, f"{problem}; name {what}")


def _example(folder: str = "") -> str:
    """A `.rubric` file shipped with tracec: an example that exists wherever tracec is installed."""
    name = "tool_calling_precision.rubric" if folder else "textworld.rubric"
    return str(resources.files("tracec.examples").joinpath(*filter(None, (folder, name))))


def _check_textworld(env: EnvSection) -> None:
    tw = env.textworld
    if tw.game:
        problem = game_file_problem(Path(tw.game))
        if problem is not None:
            raise FieldError("env.textworld.game", tw.game, problem)
    if tw.cache:
        folder = expanded_path("env.textworld.cache", tw.cache)  # a config built in code may still hold `~`
        blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        if blocking is not None:
            raise FieldError("env.textworld.cache", tw.cache, f"`{blocking}` is a file, not a folder; name the "
                             "folder made games are kept in")


def _check_fits(config: TrainConfig, made: Environment | None) -> None:
    """The settings that need something of the environment, against the environment named."""
    env = config.env
    named = f"{FACTORY} = {shown(env.python.factory)}" if env.kind == "python" else f"env.kind = {shown(env.kind)}"
    listed = env.kind not in TOOL_KINDS and (made is None or lists_commands(made))
    if config.rollout.action_mode == "admissible" and not listed:
        raise FieldError("rollout.action_mode", "admissible", f"the policy then chooses one of the environment's "
                         f"admissible commands, and {named} lists none (`admissible_commands`); use "
                         "rollout.action_mode = \"generate\", or an environment of commands (env.kind = \"textworld\")")
    if config.advantage.kind == "oracle" and env.kind != "python":
        raise FieldError("advantage.kind", "oracle", "the oracle credit reads whether each step played the next "
                         "command of the shortest winning plan (`on_plan`), which only the TextWorld family's "
                         "environments record (tracec.trace_rl.envs.textworld.family.FamilyEnvironment, made by a "
                         f"factory of yours: env.kind = \"python\"); {named} records none; use advantage.kind = "
                         "\"grpo\" or \"trca\"")
