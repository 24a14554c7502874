"""Your own environments (`[env] kind = "python"`, `factory = "package.module:function"`): the factory a config names,
imported and checked, and what it makes given the protocol's defaults.

    factory = python_factory("mypackage.envs:make_env")       # or a FieldError (key env.python.factory) saying why
    env = made_environment("mypackage.envs:make_env", factory)  # an Environment, or a FieldError

The factory is called with no arguments, and each call returns a fresh environment that has the protocol's own parts
(`REQUIRED`: `system_prompt`, `reset`, `step`, `trajectory`); checked when it is made, since the rollout would
otherwise fail on its first `reset`, far from the config's mistake. An object whose class subclasses `Environment`
is used as made. Any other (a class written before the protocol had defaults, or one that only matches it) is wrapped
in a `FactoryEnvironment`, which gives it the protocol's defaults for the parts it lacks (`hint`,
`admissible_commands`, `tools`, `close`) and passes every other attribute through (`call_format`, `scores()`, ...).
This module is the one place that looks for those parts on an object: everywhere else an environment is an
`Environment` and calls them.
Left out: checking the parts' signatures (a wrong one fails where it is called, with the user's traceback).
"""

from __future__ import annotations

import importlib
import inspect
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from tracec.trace_rl.envs.protocol import DEFAULTED_PARTS, Environment, Observation, StepResult

from tracec.config_io import FieldError

FACTORY = "env.python.factory"
REQUIRED = tuple(name for name in vars(Environment) if not name.startswith("_") and name not in DEFAULTED_PARTS)
_ABSENT = object()


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


def made_environment(spec: str, factory: Callable[[], Any]) -> Environment:
    """What `factory` makes, if it speaks the environment protocol (wrapped in a `FactoryEnvironment` unless its
    class subclasses `Environment`); else a FieldError naming the factory."""
    attribute = spec.partition(":")[2]
    try:
        made = factory()
    except Exception as error:  # noqa: BLE001 - the user's code: its error, located in it
        raise FieldError(FACTORY, spec, f"{attribute}() raised {_raised(error)}") from None
    missing = [name for name in REQUIRED if not _has(made, name)]
    if missing:
        raise FieldError(FACTORY, spec, f"{attribute}() made a {type(made).__name__}, not an environment (it has no "
                         f"{', '.join(missing)}; see tracec.trace_rl.envs.protocol)")
    # Not isinstance: the protocol is not runtime-checkable, and a structural match is what gets wrapped.
    return made if Environment in type(made).__mro__ else FactoryEnvironment(made)


class FactoryEnvironment(Environment):
    """An environment whose class does not subclass `Environment`: the protocol's parts are its own where it has
    them and the protocol's defaults where it does not; any other attribute is its own (`made`'s)."""

    def __init__(self, made: Any) -> None:
        self.made = made

    @property
    def system_prompt(self) -> str:
        return self.made.system_prompt  # type: ignore[no-any-return]

    def reset(self, seed: int) -> Observation:
        return self.made.reset(seed)  # type: ignore[no-any-return]

    def step(self, action: str) -> StepResult:
        return self.made.step(action)  # type: ignore[no-any-return]

    def trajectory(self, episode: str) -> dict[str, Any]:
        return self.made.trajectory(episode)  # type: ignore[no-any-return]

    def hint(self) -> str | None:
        hint = getattr(self.made, "hint", None)
        return hint() if callable(hint) else None

    @property
    def admissible_commands(self) -> Sequence[str] | None:
        return getattr(self.made, "admissible_commands", None)

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(getattr(self.made, "tools", None) or [])

    def close(self) -> None:
        close = getattr(self.made, "close", None)
        if callable(close):
            close()

    def __getattr__(self, name: str) -> Any:
        # Only names not found on the wrapper come here: the made environment's own (call_format, scores, ...).
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.__dict__["made"], name)


def lists_commands(env: Environment) -> bool:
    """Whether `env` lists admissible commands, told without reading them (that may need a `reset` first): its class
    overrides the protocol's default, or the object a `FactoryEnvironment` wraps has them."""
    if isinstance(env, FactoryEnvironment):
        return _has(env.made, "admissible_commands")
    return inspect.getattr_static(env, "admissible_commands") is not vars(Environment)["admissible_commands"]


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
