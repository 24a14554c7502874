"""The house's rules (docs/architecture.md): no module imports from a layer above its own, and none is over 400 lines;
a library module imports tracec's own modules at its top, and the optional heavy packages each in one place.

Every import counts, those inside functions and under `TYPE_CHECKING` included: a lazy import hides an edge of the
graph, it does not remove it. Layers are listed bottom first; a module belongs to the longest prefix that names it.
"""

import ast
from pathlib import Path

import pytest
from tracec.trace_rl.envs.protocol import DEFAULTED_PARTS

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"tracec": "tracec", "dsl": "tracec.dsl", "compiler": "tracec.compiler", "runtime": "tracec.runtime",
           "trace_rl": "tracec.trace_rl", "cli": "tracec.cli"}
LAYERS = (
    # the folder tracec/: the version, atomic writes, the cache root, argparse types, quiet libraries, progress throttle
    ("tracec",),
    ("tracec.dsl", "tracec.grammars", "tracec.examples"),
    ("tracec.config_io",),  # typed settings from TOML: it reads a file's text as the language reads a source
    ("tracec.compiler",),
    ("tracec.runtime",),
    ("tracec.trace_rl.policy",),
    ("tracec.trace_rl.llm",),
    ("tracec.trace_rl.envs",),
    ("tracec.trace_rl.rollouts",),
    ("tracec.trace_rl.grpo",),
    ("tracec.trace_rl.targeting",),
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


# The library: its modules import tracec's own at their top. The command line (cli/) imports a verb's library inside
# its `run`, on purpose, so that `--help` and a usage error never pay for it.
LIBRARY = ("tracec.dsl", "tracec.compiler", "tracec.runtime", "tracec.trace_rl")
_NUMBA = "the Numba kernels import Numba, which a process with the C extension never loads"
# The imports of tracec modules that stay inside a function: by module, the module imported and why.
LAZY = {
    "tracec.compiler.backends": {"tracec.compiler.numba_backend": "Numba takes a quarter second to import: only "
                                                                  "where a kernel is compiled with it"},
    "tracec.runtime.rewards.fixed_kernels": dict.fromkeys(("tracec.runtime.rewards.advantage_kernels",
                                                           "tracec.runtime.rewards.context_group_kernels",
                                                           "tracec.runtime.rewards.reward_kernels"), _NUMBA),
    "tracec.trace_rl.targeting.synth.commands": {"tracec.trace_rl.llm.backends": "the local LLM imports torch: only "
                                             "where a model opens, after every input was checked"},
    "tracec.trace_rl.policy.logprobs": {"tracec.trace_rl.policy.logprobs_triton": "Triton's kernels (Triton is an "
                                        "optional extra, see ONE_PLACE); a cycle too: they use this module's TileOps"},
}
# The optional heavy packages, each imported in one place (module, function; None: the module's top level), which
# says why. Triton's is the kernel module itself (its kernels are decorated when it loads), imported only by
# `logprobs` when the Triton backend is asked for (LAZY).
ONE_PLACE = {"vllm": ("tracec.trace_rl.llm.vllm_backend", "import_vllm"),
             "peft": ("tracec.trace_rl.policy.model", "import_peft"),
             "triton": ("tracec.trace_rl.policy.logprobs_triton", None)}
# Where a module is imported by a name known only at run time, and what name.
DYNAMIC = {"tracec.cli": "the module of the verb that runs",
           "tracec.runtime.rewards.fixed_kernels": "the optional C extension",
           "tracec.trace_rl.llm.vllm_backend": "vLLM's modules, in import_vllm",
           "tracec.trace_rl.envs.user_factory": "a config's env.python.factory"}
# The environment protocol's parts with defaults (`envs.protocol.Environment`): every environment has them, so no code
# looks for them on an object; only the wrapper of a user's factory object that does not subclass the protocol may.
PROBES = {"tracec.trace_rl.envs.user_factory": "FactoryEnvironment: the defaults for what a user's object lacks"}


def imports_with_function(path: Path) -> list[tuple[ast.Import | ast.ImportFrom, str | None]]:
    """Every import statement of a module with the function it is in (None: the module's top level, `if` and `try`
    blocks included)."""
    found: list[tuple[ast.Import | ast.ImportFrom, str | None]] = []

    def walk(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, function))
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            walk(child, ".".join(filter(None, (function, inner))) or None)

    walk(ast.parse(path.read_text(), str(path)), None)
    return found


def lazy_imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The tracec modules `module` imports inside a function, relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node, function in imports_with_function(path):
        if function is None:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        else:
            base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]) if node.level else ""
            target = ".".join(filter(None, (base, node.module)))
            submodules = {f"{target}.{alias.name}" for alias in node.names} & set(known)  # `from pkg import module`
            names.update(submodules or {target})
    return {name for name in names if name == "tracec" or name.startswith("tracec.")}


def in_library(module: str) -> bool:
    return any(module == folder or module.startswith(folder + ".") for folder in LIBRARY)


@pytest.mark.parametrize("module", sorted(m for m in modules() if in_library(m)))
def test_a_library_module_imports_tracec_at_its_top(module: str) -> None:
    known = modules()
    allowed = LAZY.get(module, {})
    lazy = lazy_imported(module, known[module], known)
    assert lazy <= set(allowed), (f"{module} imports {sorted(lazy - set(allowed))} inside a function: move it to the "
                                  "top, or add it to LAZY with the reason it cannot be there")


def test_every_kept_lazy_import_is_still_there() -> None:
    known = modules()
    stale = sorted(f"{module}: {name}" for module, allowed in LAZY.items()
                   for name in set(allowed) - lazy_imported(module, known[module], known))
    assert not stale, f"LAZY names imports that are no longer inside a function: {stale}"


def test_the_optional_heavy_packages_are_imported_in_one_place_each() -> None:
    found: dict[str, set[tuple[str, str | None]]] = {name: set() for name in ONE_PLACE}
    for module, path in modules().items():
        for node, function in imports_with_function(path):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if not node.level else []
            for name in names:
                if name.split(".")[0] in found:
                    found[name.split(".")[0]].add((module, function))
    wrong = {name: sorted(places ^ {ONE_PLACE[name]}, key=str) for name, places in found.items()
             if places != {ONE_PLACE[name]}}
    assert not wrong, f"imported elsewhere than in its one place, or not there (module, function): {wrong}"


def test_modules_are_imported_by_a_computed_name_only_where_that_is_the_point() -> None:
    calling = set()
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            called = node.func if isinstance(node, ast.Call) else None
            name = called.attr if isinstance(called, ast.Attribute) else called.id if isinstance(called, ast.Name) \
                else None
            if name in ("import_module", "__import__"):
                calling.add(module)
    assert calling == set(DYNAMIC), f"import_module or __import__ in {sorted(calling ^ set(DYNAMIC))}"


def test_no_code_looks_for_the_environment_protocols_defaulted_parts() -> None:
    files = {module: path for module, path in modules().items() if module not in PROBES}
    files.update({str(path.relative_to(ROOT)): path for folder in ("tests", "bench")
                  for path in (ROOT / folder).rglob("*.py")})
    probes = sorted(f"{name}:{node.lineno}" for name, path in files.items()
                    for node in ast.walk(ast.parse(path.read_text(), str(path)))
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in DEFAULTED_PARTS)
    assert not probes, f"getattr or hasattr of {DEFAULTED_PARTS} (call them: every Environment has them) in {probes}"


def test_no_import_circle_inside_runtime() -> None:
    """runtime/ is rooms (facts, rewards, the scoring API on top) that import downwards only: no module of it reaches
    itself again through its imports, lazy and `TYPE_CHECKING` ones included."""
    known = modules()
    inside = {module for module in known if module == "tracec.runtime" or module.startswith("tracec.runtime.")}
    graph = {module: sorted(name for name in imported(module, known[module]) if name in inside and name != module)
             for module in inside}
    done: set[str] = set()

    def circle_from(module: str, path: list[str]) -> list[str] | None:
        """A circle reached from `module` along `path` (the modules being walked), or None."""
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        for name in graph[module]:
            if found := circle_from(name, path + [module]):
                return found
        done.add(module)
        return None

    circles = [circle for module in sorted(inside) if (circle := circle_from(module, []))]
    assert not circles, f"an import circle inside runtime/: {' -> '.join(circles[0])}"
