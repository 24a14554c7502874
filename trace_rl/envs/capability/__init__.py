"""Capability environments: seeded synthetic tasks written in `.rubric`, run by an interpreter.

`load_environment(path)` parses, checks and compiles one environment; `Environment(program)` runs episodes of it.
"""

from __future__ import annotations

from tracec.dsl import ast
from tracec.dsl.check_env import check_environment
from tracec.dsl.env_model import DEFAULT_LIMITS, Limits
from tracec.dsl.errors import NOWHERE, CheckError, Source
from tracec.dsl.parse import parse
from tracec.dsl.source_file import read_source
from tracec.trace_rl.envs.capability.episode import Environment, Scores
from tracec.trace_rl.envs.capability.program import Program, Scenario

__all__ = ["Environment", "Limits", "Program", "Scenario", "Scores", "compile_environment", "load_environment"]


def compile_environment(text: str, path: str = "<string>", *, name: str | None = None,
                        limits: Limits = DEFAULT_LIMITS) -> Program:
    """The environment `name` (or the only one) of a `.rubric` source, checked and compiled; raises `CheckError`."""
    module = parse(text, path)
    source = Source(path, text)
    envs = [d for d in module.decls if isinstance(d, ast.Environment)]
    chosen = [e for e in envs if name is None or e.name == name]
    if len(chosen) != 1:
        names = ", ".join(f"`{e.name}`" for e in envs) or "none"
        what = f"no environment `{name}`" if name is not None else "expected exactly one environment"
        raise CheckError([source.diagnostic(module.decls[0].loc if module.decls else NOWHERE,
                                            f"{what} (found {names})")])
    checked, errors = check_environment(chosen[0], source, limits=limits)
    if checked is None:
        raise CheckError(errors)
    return Program(checked, limits=limits)


def load_environment(path: str, *, name: str | None = None, limits: Limits = DEFAULT_LIMITS) -> Program:
    return compile_environment(read_source(path), path, name=name, limits=limits)

