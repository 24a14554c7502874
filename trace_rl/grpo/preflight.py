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

import importlib
import inspect
import os
import traceback
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from tracec.dsl.source_file import read_source
from tracec.runtime.evaluate import load_rubric
from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.envs.protocol import Environment
from tracec.trace_rl.envs.tau2 import find_data_dir
from tracec.trace_rl.grpo.config import EnvSection, TrainConfig, config_to_dict
from tracec.trace_rl.policy.catalog import TINY, ModelError, adaptable_modules, check_checkpoint, resolve_model
from tracec.trace_rl.policy.lora import check_targets

from tracec.config_io import ConfigError, FieldError, assign_override, located, read_toml, shown

PROTOCOL = tuple(name for name in vars(Environment) if not name.startswith("_"))  # what every environment has
FACTORY = "env.python.factory"
TOOL_KINDS = ("capability", "tau2", "mixture")  # environments of tool calls: no admissible commands, no plan
_ABSENT = object()


def check_located(config: TrainConfig, path: str | os.PathLike[str] | None, overrides: Sequence[str] = ()) -> None:
    """`check_inputs` of the config `load_config(path, overrides)` gave; its problem a ConfigError located where the
    key was set, or said to be the key's default."""
    try:
        check_inputs(config)
    except FieldError as bad:
        given, text = read_toml(str(path)) if path is not None else ({}, "")
        where = str(path) if path is not None else "<defaults>"
        sources = {assign_override(TrainConfig, given, item): f"--set {item}" for item in overrides}
        if bad.name in sources:
            raise ConfigError(f"{sources[bad.name]}: error: {bad}") from None
        if _value_at(given, bad.name) is None:
            default = _value_at(config_to_dict(TrainConfig()), bad.name)
            read_as = f" (read as {shown(bad.value)})" if bad.value != default else ""
            raise ConfigError(f"{where}: error: {bad.name} is not set, and its default, {shown(default)}{read_as}, "
                              f"does not work: {bad.problem}") from None
        raise located(where, text, bad.name, str(bad)) from None


def _value_at(tables: Mapping[str, Any], dotted: str) -> Any:
    """The value nested `tables` give the key `dotted`; None when they leave it to its default."""
    value: Any = tables
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def check_inputs(config: TrainConfig) -> None:
    """A FieldError for the first input of `config` that cannot work (its paths absolute, as `load_config` gives)."""
    _check_model(config)
    made = _check_environment(config.env)
    _check_fits(config, made)
    if config.advantage.kind == "trca":
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


def _check_environment(env: EnvSection) -> Any:
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
    elif env.kind == "python":
        made = made_environment(env.python.factory, python_factory(env.python.factory))
        if callable(getattr(made, "close", None)):
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
        folder = Path(tw.cache).expanduser()
        blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        if blocking is not None:
            raise FieldError("env.textworld.cache", tw.cache, f"`{blocking}` is a file, not a folder; name the "
                             "folder made games are kept in")


def game_file_problem(game: Path) -> str | None:
    """Why `game` is no game TextWorld can play (None: it is one, as far as its header and files tell): a game is
    the Z-machine (`.z8`) or Glulx (`.ulx`) file `tw-make` writes, with the game's facts in a `.json` beside it."""
    try:
        with open(game, "rb") as handle:
            header = handle.read(64)
    except FileNotFoundError:
        return "no such game file (make one with `tw-make`, or leave it out to train on a family of games, one " \
            "per seed)"
    except IsADirectoryError:
        return "is a folder, not a game file"
    except OSError as error:
        return (error.strerror or str(error)).lower()
    z_machine = len(header) == 64 and 1 <= header[0] <= 8  # its first byte is the Z-machine version
    if not (z_machine or header.startswith(b"Glul")):
        return "not a TextWorld game: its first bytes are neither a Z-machine nor a Glulx header (a game is the " \
            "`.z8` or `.ulx` file `tw-make` writes)"
    facts = game.with_suffix(".json")
    if not facts.is_file():
        return f"a game without its {facts.name} beside it (`tw-make` writes the game's facts there, and TextWorld " \
            "reads them with the game)"
    return None


def python_factory(spec: str) -> Callable[[], Any]:
    """The callable `package.module:function` names, when it can be called with no arguments; else a FieldError
    (key `env.python.factory`) saying why, an error of the module's own code with where it was raised."""
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise FieldError(FACTORY, spec, f"cannot import {module_name!r} ({error}); is it on PYTHONPATH?") from None
    except Exception as error:  # noqa: BLE001 - the user's module failed as it ran: say what, and where
        raise FieldError(FACTORY, spec, f"importing {module_name} raised {_raised(error)}") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise FieldError(FACTORY, spec, f"{module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise FieldError(FACTORY, spec, f"{attribute!r} is not callable")
    try:
        inspect.signature(target).bind()
    except TypeError as error:
        raise FieldError(FACTORY, spec, f"{attribute} cannot be called with no arguments ({error}), and a factory "
                         "is: each call returns a fresh environment") from None
    except ValueError:  # no signature to read (some builtins): the call says
        pass
    return target  # type: ignore[no-any-return]


def made_environment(spec: str, factory: Callable[[], Any]) -> Any:
    """What `factory` makes, if it speaks the environment protocol; else a FieldError naming the factory."""
    attribute = spec.partition(":")[2]
    try:
        made = factory()
    except Exception as error:  # noqa: BLE001 - the user's code: its error, located in it
        raise FieldError(FACTORY, spec, f"{attribute}() raised {_raised(error)}") from None
    missing = [name for name in PROTOCOL if not _has(made, name)]
    if missing:
        raise FieldError(FACTORY, spec, f"{attribute}() made a {type(made).__name__}, not an environment (it has no "
                         f"{', '.join(missing)}; see tracec.trace_rl.envs.protocol)")
    return made


def _has(made: Any, name: str) -> bool:
    """Whether `made` has the attribute, without running a property that may need `reset` first."""
    if inspect.getattr_static(made, name, _ABSENT) is not _ABSENT:
        return True
    try:  # an attribute found through __getattr__ (a wrapper's)
        getattr(made, name)
    except AttributeError:
        return False
    except Exception:  # noqa: BLE001 - it is there, only not ready
        return True
    return True


def _raised(error: Exception) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}{where}: {error}"


def _check_fits(config: TrainConfig, made: Any) -> None:
    """The settings that need something of the environment, against the environment named."""
    env = config.env
    named = f"{FACTORY} = {shown(env.python.factory)}" if env.kind == "python" else f"env.kind = {shown(env.kind)}"
    lists_commands = env.kind not in TOOL_KINDS and (made is None or _has(made, "admissible_commands"))
    if config.rollout.action_mode == "admissible" and not lists_commands:
        raise FieldError("rollout.action_mode", "admissible", f"the policy then chooses one of the environment's "
                         f"admissible commands, and {named} lists none (`admissible_commands`); use "
                         "rollout.action_mode = \"generate\", or an environment of commands (env.kind = \"textworld\")")
    if config.advantage.kind == "oracle" and env.kind != "python":
        raise FieldError("advantage.kind", "oracle", "the oracle credit reads whether each step played the next "
                         "command of the shortest winning plan (`on_plan`), which only the TextWorld family's "
                         "environments record (tracec.trace_rl.envs.textworld.family.FamilyEnvironment, made by a "
                         f"factory of yours: env.kind = \"python\"); {named} records none; use advantage.kind = "
                         "\"grpo\" or \"trca\"")
