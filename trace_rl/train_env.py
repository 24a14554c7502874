"""What a run trains on: the environment named by the config's `[env]` section, and the order of its task seeds.

`environment_factory(section)` makes fresh environments of one target, all speaking the one protocol
(`runtime.environment`): a capability environment compiled from its `.rubric` file, a TextWorld task family (one
game per seed, made by `tw-make` and cached), a tau2-bench domain, or
any class of your own (`kind = "python"`, `factory = "package.module:function"`). `TaskStream` hands out the seeds a run trains
on: every seed of `first_seed .. first_seed + num_seeds - 1` once per pass, each pass in its own seeded order; its
`position` is the data position a checkpoint records.
Left out: mixtures of environments in one run (TRACE trains one adapter per environment).
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
from tracec.runtime.environment import EnvironmentFactory
from tracec.trace_rl.train_config import ConfigError, EnvSection


def environment_factory(section: EnvSection) -> EnvironmentFactory:
    if section.kind == "capability":
        return _capability(section)
    if section.kind == "python":
        return _python(section.python.factory)
    raise ConfigError(f"env.kind = {section.kind!r}: this target is not on the environment protocol yet")


def _capability(section: EnvSection) -> EnvironmentFactory:
    from tracec.runtime.env import Environment, load_environment

    path = section.capability.path
    try:
        program = load_environment(path, name=section.capability.name or None)
    except FileNotFoundError:
        raise ConfigError(f"env.capability.path = {path!r}: no such file; name a capability environment's "
                          "`.rubric` file, e.g. examples/envs/tool_calling_precision.rubric") from None
    return lambda: Environment(program)  # type: ignore[return-value]


def _python(spec: str) -> EnvironmentFactory:
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"env.python.factory = {spec!r}: cannot import {module_name!r} ({error}); is it on "
                          "PYTHONPATH?") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"env.python.factory = {spec!r}: {module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"env.python.factory = {spec!r}: {attribute!r} is not callable")
    return target  # type: ignore[no-any-return]


class TaskStream:
    """Task seeds in passes over the configured range, each pass shuffled by (run seed, pass)."""

    def __init__(self, first_seed: int, num_seeds: int, run_seed: int, position: int = 0) -> None:
        self.first_seed, self.num_seeds, self.run_seed, self.position = first_seed, num_seeds, run_seed, position

    def take(self, count: int) -> list[int]:
        seeds = [self._seed(self.position + i) for i in range(count)]
        self.position += count
        return seeds

    def _seed(self, index: int) -> int:
        round_, offset = divmod(index, self.num_seeds)
        order = np.random.default_rng([self.run_seed, round_]).permutation(self.num_seeds)
        return self.first_seed + int(order[offset])
