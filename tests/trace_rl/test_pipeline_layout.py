"""The pipeline package's shape: its modules import one another without a circle (those under `TYPE_CHECKING`
counted), no step module imports another step module, and the run folder's names come from `layout` alone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tracec.trace_rl.targeting.pipeline import layout

PIPELINE = Path(__file__).resolve().parents[2] / "trace_rl" / "targeting" / "pipeline"
PACKAGE = "tracec.trace_rl.targeting.pipeline"
STEP_MODULES = {"analysis_steps", "env_steps", "adapter_steps", "baseline_steps"}


def pipeline_imports() -> dict[str, set[str]]:
    """Each module of the package (by its short name) and the modules of the package it imports, anywhere."""
    names = {path.stem for path in PIPELINE.glob("*.py") if path.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in names:
        found = set()
        for node in ast.walk(ast.parse((PIPELINE / f"{name}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
                found.update(alias.name for alias in node.names)  # `from ...pipeline import adapter_steps`
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
                found.add(node.module.removeprefix(PACKAGE + ".").split(".")[0])  # type: ignore[union-attr]
            elif isinstance(node, ast.Import):
                found.update(a.name.removeprefix(PACKAGE + ".") for a in node.names if a.name.startswith(PACKAGE))
        graph[name] = found & names
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of `graph` (its modules in order, the first repeated at the end), or [] when there is none."""
    state: dict[str, str] = {}  # absent: unseen, "open": on the current path, "done": no circle through it

    def visit(name: str, path: list[str]) -> list[str]:
        state[name] = "open"
        for imported in sorted(graph[name]):
            if state.get(imported) == "open":
                return [*path[path.index(imported):], imported]
            if imported not in state and (found := visit(imported, [*path, imported])):
                return found
        state[name] = "done"
        return []

    return next((found for name in sorted(graph) if name not in state and (found := visit(name, [name]))), [])


def test_the_cycle_finder_finds_a_circle_and_only_a_circle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_pipeline_package_has_no_import_circle() -> None:
    graph = pipeline_imports()
    assert STEP_MODULES | {"layout", "run", "context", "config", "steps"} <= set(graph)
    assert cycle(graph) == []


def test_no_step_module_imports_another() -> None:
    graph = pipeline_imports()
    assert {name: graph[name] & STEP_MODULES for name in STEP_MODULES} == {name: set() for name in STEP_MODULES}


def test_the_run_folder_s_names_are_spelled_only_in_layout() -> None:
    """A file name of the run folder written out in another module of the package or in `tracec evaluate` /
    `tracec pipeline` would be a second definition of it."""
    names = [layout.CONFIG, layout.CANDIDATES, layout.SELECTED, layout.SELECTION_TABLE, layout.MANIFEST,
             layout.ADAPTERS, layout.OPTIONS, layout.INDEX, layout.DECISIONS, layout.REPORT,
             layout.EVALUATION_TABLE, layout.EVALUATION_JSON]
    readers = [p for p in PIPELINE.glob("*.py") if p.stem != "layout"]
    readers += [PIPELINE.parents[2] / "cli" / name for name in ("evaluate.py", "pipeline.py")]
    spelled = {f"{path.name}: {name}" for path in readers for name in names
               if re.search(rf"[\"'/]{re.escape(name)}[\"']", _code(path))}
    assert spelled == set()


def _code(path: Path) -> str:
    """The module's source without its docstrings and comments, which may name the files for people."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return ast.unparse(tree)
