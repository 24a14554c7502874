"""Golden IR and kernel source of shipped rubrics: a refactor that changes what one compiles to fails here.

For each case, `tests/golden/kernels/<case>.ir.txt` is the compiler's listing (`explain`: the IR after every
pass and the fact plan), `<case>.numba.py.txt` and `<case>.c.txt` the generated kernel sources (generated
only: nothing is compiled). `pytest tests/compiler/test_golden_kernels.py --update-golden` rewrites them;
review the diff.
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path
from types import SimpleNamespace

import pytest
from tracec.compiler import c_backend, numba_backend
from tracec.compiler.explain import explain, format_ir
from tracec.compiler.ir import Node
from tracec.compiler.pipeline import CompiledCapability, compile_capability, compile_rubric
from tracec.dsl.check import check_source

import tracec

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "kernels"

# case -> (file, rubric or capability), each exercising what the others do not.
CASES = {
    # entity bindings, set-literal `in`, `contains`, a set in the context
    "household": ("examples/household.rubric", "alfworld_pick"),
    # a float binding and float comparisons, `lower`, regexes with /i, an enum in the context
    "webshop": ("examples/webshop.rubric", "webshop_buy"),
    # an int binding, a computed context expression (its words and known flags)
    "search_qa": ("examples/search_qa.rubric", "search_answer"),
    # the main job's rubric: history sets (visited, seen, held) paid once, a fact needle in `contains`
    "textworld": ("examples/textworld.rubric", "textworld_quest"),
    # Environments are interpreted, not compiled: what scores them is this rubric over the built-in toolenv
    # facts, and a capability over the same facts.
    "toolenv": ("examples/toolenv.rubric", "toolenv_default"),
    "toolenv_precondition": ("examples/toolenv.rubric", "precondition_verification"),
}
ARTIFACTS = ("ir", "numba.py", "c")


@functools.cache
def rendered(case: str) -> dict[str, str]:
    path, name = CASES[case]
    module = check_source((REPO / path).read_text(), path)
    if name in module.rubrics:
        compiled = compile_rubric(module.rubrics[name])
        program, names, ir = compiled.program, [op.name for op in compiled.operators], explain(compiled)
    else:
        capability = compile_capability(module.capabilities[name])
        program, names, ir = capability.program, [], _capability_listing(capability)
    # The C manifest names the tracec version: masked, so that a release does not rewrite every golden file.
    version = f'\\"{tracec.__version__}\\"'
    c_source = c_backend.generate_source(program, names).replace(version, '\\"VERSION\\"')
    return {"ir": ir, "numba.py": numba_backend.generate_source(program), "c": c_source}


def _capability_listing(capability: CompiledCapability) -> str:
    """The episode formulas over the aggregates' bodies, then the bodies' IR as `explain` prints it."""
    program = capability.program
    # format_ir reads only the names of a rubric's operators; a capability's bodies are named by index.
    names = [SimpleNamespace(name=f"body{i}") for i in range(len(program.operators))]
    ir = format_ir(program.operators, program.context, SimpleNamespace(operators=names))  # type: ignore[arg-type]
    lines = [f"needed: {_formula(capability.needed)}", f"present: {_formula(capability.present)}", "", "ir:"]
    return "\n".join(lines + ["  " + line for line in ir]) + "\n"


def _formula(node: Node) -> str:
    if node.op in ("any", "all", "agg_count"):
        return f"{node.op}(body{node.value})"
    if not node.args:
        return f"{node.op} {node.value!r}"
    return f"{node.op}({', '.join(_formula(a) for a in node.args)})"


@pytest.mark.parametrize("artifact", ARTIFACTS)
@pytest.mark.parametrize("case", CASES)
def test_generated_code_matches_golden(case: str, artifact: str, update_golden: bool) -> None:
    actual, expected_path = rendered(case)[artifact], GOLDEN / f"{case}.{artifact}.txt"
    if update_golden or not expected_path.exists():
        expected_path.parent.mkdir(parents=True, exist_ok=True)
        expected_path.write_text(actual)
        if not update_golden:
            pytest.fail(f"{expected_path.name} did not exist; written, review it")
        return
    expected = expected_path.read_text()
    if actual != expected:
        diff = difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                    f"golden/kernels/{expected_path.name}", "generated")
        pytest.fail(f"{case}: the generated {artifact} changed; if that is intended, rerun with "
                    "`pytest tests/compiler/test_golden_kernels.py --update-golden` and review the diff\n"
                    + "".join(diff), pytrace=False)
