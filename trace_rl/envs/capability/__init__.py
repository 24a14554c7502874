"""Capability environments: seeded synthetic tasks written in `.rubric`, run by an interpreter.

`load_environment(path)` parses, checks and compiles one environment; `CapabilityEnvironment(program)` runs episodes
of it.
"""

from __future__ import annotations

from tracec.compiler.load import chosen_declaration
from tracec.dsl import ast
from tracec.dsl.check_env import check_environment
from tracec.dsl.env_model import DEFAULT_LIMITS, Limits
from tracec.dsl.errors import CheckError, Source
from tracec.dsl.parse import parse
from tracec.dsl.source_file import read_source
from tracec.trace_rl.envs.capability.episode import CapabilityEnvironment, Scores
from tracec.trace_rl.envs.capability.program import Program, Scenario

HOW_TO_NAME_AN_ENVIRONMENT = " (--name NAME on the command line, env.capability.name in a config)"

__all__ = ["CapabilityEnvironment", "Limits", "Program", "Scenario", "Scores", "compile_environment",
           "load_environment"]


def compile_environment(text: str, path: str = "<string>", *, name: str | None = None,
                        limits: Limits = DEFAULT_LIMITS) -> Program:
    """The environment `name` (or the only one) of a `.rubric` source, checked and compiled; raises `CheckError`."""
    module = parse(text, path)
    environments = {d.name: d for d in module.decls if isinstance(d, ast.Environment)}
    chosen = chosen_declaration(environments, name, "environment", path, HOW_TO_NAME_AN_ENVIRONMENT)
    checked, errors = check_environment(chosen, Source(path, text), limits=limits)
    if checked is None:
        raise CheckError(errors)
    return Program(checked, limits=limits)


def load_environment(path: str, *, name: str | None = None, limits: Limits = DEFAULT_LIMITS) -> Program:
    return compile_environment(read_source(path), path, name=name, limits=limits)

