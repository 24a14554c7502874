"""The house's rules (docs/architecture.md): no module imports from a layer above its own, and none is over 400 lines.

Every import counts, those inside functions and under `TYPE_CHECKING` included: a lazy import hides an edge of the
graph, it does not remove it. Layers are listed bottom first; a module belongs to the longest prefix that names it.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"tracec": "tracec", "dsl": "tracec.dsl", "compiler": "tracec.compiler", "runtime": "tracec.runtime",
           "trace_rl": "tracec.trace_rl", "cli": "tracec.cli"}
LAYERS = (
    ("tracec",),  # the folder tracec/: the version, atomic writes, the cache root, argparse types, quiet libraries
    ("tracec.dsl", "tracec.grammars", "tracec.examples"),
    ("tracec.config_io",),  # typed settings from TOML: it reads a file's text as the language reads a source
    ("tracec.compiler",),
    ("tracec.runtime",),
    ("tracec.trace_rl.policy",),
    ("tracec.trace_rl.llm",),
    ("tracec.trace_rl.envs",),
    ("tracec.trace_rl.rollouts",),
    ("tracec.trace_rl.grpo",),
    ("tracec.trace_rl.trace",),
    ("tracec.trace_rl.experiments",),
    ("tracec.cli",),
)


def layer_of(module: str) -> int:
    """The layer of a module or package: the longest listed prefix that names it."""
    matches = [(len(prefix), n) for n, layer in enumerate(LAYERS) for prefix in layer
               if module == prefix or module.startswith(prefix + ".")]
    if not matches:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to docs/architecture.md)")
    return max(matches)[1]


def modules() -> dict[str, Path]:
    """Every module of the package, by its dotted name."""
    found = {}
    for folder, package in FOLDERS.items():
        paths = (ROOT / folder).glob("*.py") if folder == "tracec" else (ROOT / folder).rglob("*.py")
        for path in paths:
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            found[".".join((package, *parts))] = path
    return found


def imported(module: str, path: Path) -> set[str]:
    """The tracec modules `module` imports, anywhere in its body, relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]) if node.level else ""
            target = ".".join(filter(None, (base, node.module)))
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return {name for name in names if name == "tracec" or name.startswith("tracec.")}


MAX_LINES = 400  # past this a module holds more than one concept (../shared/STYLE.md)


def test_every_module_has_a_layer() -> None:
    for module in modules():
        layer_of(module)


@pytest.mark.parametrize("module", sorted(modules()))
def test_no_import_from_a_layer_above(module: str) -> None:
    known = modules()
    own = layer_of(module)
    above = sorted(name for name in imported(module, known[module])
                   if (name in known or name.rpartition(".")[0] in known) and layer_of(name) > own)
    assert not above, f"{module} (layer {own}) imports from layers above it: {above}"


def test_no_module_is_over_the_line_limit() -> None:
    long = sorted(f"{path.relative_to(ROOT)}: {n}" for path in modules().values()
                  if (n := len(path.read_text().splitlines())) > MAX_LINES)
    assert not long, f"modules over {MAX_LINES} lines: {long}"
