"""The front end in one call: a rubric's source parsed, checked, its rubric chosen (the one named, or the file's only
one) and compiled. `compile`, `explain`, `score` and the trainer's preflight all start here.

`chosen_declaration` is the rule for any kind of declaration a command picks from a file (a rubric here, an
environment in `trace_rl.envs.capability`, a schema in `synth rubric`), with its one message.
Left out: reading the file (the caller's, so that a path that cannot be read is said in its own words) and kernels
(`tracec.compiler.backends`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from tracec.compiler.pipeline import CompiledRubric, compile_rubric
from tracec.dsl.check import CheckedModule, builtin_schemas, check_source
from tracec.dsl.errors import NOWHERE, CheckError, Diagnostic

D = TypeVar("D")

HOW_TO_NAME_A_RUBRIC = " (--rubric NAME on the command line, `rubric=` in Python)"


def load_rubric(text: str, path: str, rubric: str | None = None) -> CompiledRubric:
    """Parse, check and compile the rubric named `rubric` (or the file's only rubric)."""
    checked = check_source(text, path)
    if not checked.rubrics:
        raise CheckError([Diagnostic(path, NOWHERE, _no_rubric(checked))])
    return compile_rubric(chosen_declaration(checked.rubrics, rubric, "rubric", path, HOW_TO_NAME_A_RUBRIC))


def chosen_declaration(declared: Mapping[str, D], name: str | None, kind: str, path: str, how_to_name: str = "") -> D:
    """The `kind` declaration called `name` among a file's `declared`, or, where no name is given, the file's only
    one; else a CheckError that lists the names the file has (`how_to_name` says where a name is given)."""
    names = ", ".join(sorted(declared)) or "none"
    if not declared and name is None:
        raise CheckError([Diagnostic(path, NOWHERE, f"this file declares no {kind}")])
    if name is None:
        if len(declared) != 1:
            message = f"name the {kind} to use; this file has: {names}{how_to_name}"
            raise CheckError([Diagnostic(path, NOWHERE, message)])
        return next(iter(declared.values()))
    if name not in declared:
        raise CheckError([Diagnostic(path, NOWHERE, f"no {kind} `{name}` in this file; it has: {names}")])
    return declared[name]


def _no_rubric(checked: CheckedModule) -> str:
    """What a file without a `rubric` block holds instead, and the command that reads that."""
    schemas = [name for name in checked.schemas if name not in {s.name for s in builtin_schemas()}]
    held = [f"{kind} {', '.join(names)}" for kind, names in (("environment", list(checked.environments)),
                                                            ("capability", list(checked.capabilities)),
                                                            ("schema", schemas)) if names]
    uses = []
    if checked.environments:
        uses.append("`tracec env` plays an environment")
    if checked.capabilities:
        uses.append("`tracec analyze label --rubric FILE` labels with capability blocks")
    return (f"this file has no rubric block to score with (it holds {'; '.join(held) or 'nothing'})"
            + (f"; {' and '.join(uses)}" if uses else ""))
