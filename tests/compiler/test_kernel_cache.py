"""The on-disk kernel cache and the C artifact: a second process reuses what the first compiled, a changed source is
never served stale, and a C artifact runs in a fresh process without a compiler.

Cache hits are read from the kernels themselves (Numba's own hit counter, or the library being loaded instead of
built), never from timings.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tracec.compiler import c_backend, interp, numba_backend
from tracec.compiler.backends import compile_kernel
from tracec.compiler.cache import KernelCache, content_key
from tracec.compiler.ir import ColumnSpec, KernelProgram, Node, entity_id
from tracec.dsl.types import BOOL, ENTITY, FLOAT, INT, SET, Type

from tracec.cache_dir import cache_root

MUG = entity_id("mug")


def _load(name: str, type_: Type) -> Node:
    return Node("load", (), type_, name)


def program(threshold: int = 1) -> KernelProgram:
    holding = Node("load_set", (), SET, "next.holding")
    operators = (
        Node("has", (Node("const", (), ENTITY, MUG), holding), BOOL),
        Node("gt", (Node("count", (holding,), INT), Node("const", (), INT, threshold)), BOOL),
        Node("or", (_load("act.parsed", BOOL),
                    Node("lt", (_load("prev.x", FLOAT), Node("const", (), FLOAT, 0.5)), BOOL)),
             BOOL),
    )
    columns = (ColumnSpec("act.parsed", BOOL), ColumnSpec("next.holding", SET), ColumnSpec("prev.x", FLOAT))
    return KernelProgram(operators, (holding, _load("prev.x", FLOAT)), columns)


def columns(n: int = 40, seed: int = 5) -> dict[str, SimpleNamespace]:
    rng = np.random.default_rng(seed)
    pool = np.array(sorted([MUG, entity_id("cup"), entity_id("apple")]), dtype=np.int64)
    sizes = rng.integers(0, 4, n)
    rows = [np.sort(rng.choice(pool, size, replace=False)) for size in sizes]
    known = lambda: (rng.random(n) > 0.2).astype(np.uint8)
    return {
        "act.parsed": SimpleNamespace(values=rng.integers(0, 2, n).astype(np.uint8), known=known(), offsets=None),
        "next.holding": SimpleNamespace(values=np.concatenate(rows).astype(np.int64), known=known(),
                                        offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)),
        "prev.x": SimpleNamespace(values=rng.uniform(-1, 1, n), known=known(), offsets=None),
    }


RUN = """
import json, pickle, sys
import numpy as np
from pathlib import Path
from tracec.compiler import c_backend
from tracec.compiler.backends import compile_kernel
from tracec.compiler.cache import KernelCache

mode, target, data, out = sys.argv[1:5]
program, columns, n = pickle.loads(Path(data).read_bytes())
if mode == "artifact":
    kernel = c_backend.load_artifact(Path(target))
else:
    kernel = compile_kernel(program, mode, KernelCache(Path(target)))
fired, keys = kernel.run(columns, n)
np.savez(out, fired=fired, keys=keys)
print(json.dumps({"from_cache": kernel.from_cache, "names": list(getattr(kernel, "operator_names", []))}))
"""


def run_in_new_process(tmp_path: Path, mode: str, target: Path, prog: KernelProgram, n: int = 40) -> dict:
    data, out = tmp_path / "input.pickle", tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}.npz"
    data.write_bytes(pickle.dumps((prog, columns(n), n)))
    done = subprocess.run([sys.executable, "-c", RUN, mode, str(target), str(data), str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    with np.load(out) as saved:
        report["fired"], report["keys"] = saved["fired"], saved["keys"]
    return report


def assert_interpreted(report: dict, prog: KernelProgram, n: int = 40) -> None:
    fired, keys = interp.run(prog, columns(n), n)
    np.testing.assert_array_equal(report["fired"], fired)
    np.testing.assert_array_equal(report["keys"], keys)


@pytest.mark.slow
def test_a_second_process_loads_the_numba_kernel_from_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = run_in_new_process(tmp_path, "numba", cache, program())
    assert not first["from_cache"]
    assert list((cache / "numba" / "__pycache__").glob("kernel_*.nbi")), "Numba wrote no cache index"
    second = run_in_new_process(tmp_path, "numba", cache, program())
    assert second["from_cache"]
    assert_interpreted(first, program())
    assert_interpreted(second, program())


def test_numba_kernel_is_cached_and_a_changed_source_is_not_served_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = KernelCache(tmp_path)
    kernel = numba_backend.compile_numba(program(), cache)
    assert not kernel.from_cache
    assert kernel.source_path.read_text() == numba_backend.generate_source(program())
    assert numba_backend.compile_numba(program(), cache).from_cache  # same source: Numba's cache answers
    n = 40
    expected = interp.run(program(), columns(n), n)

    # Somebody edits the cached source so that operator 0 always fires: the file is restored before use.
    text = kernel.source_path.read_text()
    tampered = text.replace("out[r * 3 + 0] = ", "out[r * 3 + 0] = 1  # ")
    assert tampered != text
    kernel.source_path.write_text(tampered)
    again = numba_backend.compile_numba(program(), cache)
    assert again.source_path == kernel.source_path and again.source_path.read_text() == text
    np.testing.assert_array_equal(again.run(columns(n), n)[0], expected[0])

    # A changed program, or a changed generator, is a changed source: a new file, compiled afresh.
    other = numba_backend.compile_numba(program(threshold=2), cache)
    assert other.source_path != kernel.source_path and not other.from_cache
    np.testing.assert_array_equal(other.run(columns(n), n)[0], interp.run(program(threshold=2), columns(n), n)[0])
    monkeypatch.setattr(numba_backend, "BACKEND_VERSION", "tracec-numba-next")
    upgraded = numba_backend.compile_numba(program(), cache)
    assert upgraded.source_path not in (kernel.source_path, other.source_path) and not upgraded.from_cache
    np.testing.assert_array_equal(upgraded.run(columns(n), n)[0], expected[0])


def test_c_library_is_loaded_from_the_cache_without_recompiling(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    first = c_backend.compile_c(program(), cache)
    assert not first.from_cache
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    second = compile_kernel(program(), "c", cache)
    assert second.from_cache
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before  # nothing built, nothing left behind
    assert [p.name for p in (tmp_path / "c").iterdir()] == [first.path.name]


def test_c_artifact_runs_in_a_fresh_process(tmp_path: Path) -> None:
    artifact = tmp_path / "rubric.so"
    names = ("holds_mug", "holds_two", "parsed_or_low")
    c_backend.write_artifact(program(), artifact, KernelCache(tmp_path / "cache"), operator_names=names)
    assert not list(tmp_path.glob(".rubric.so.*"))  # the temporary copy was moved into place
    report = run_in_new_process(tmp_path, "artifact", artifact, program())
    assert report["from_cache"] and report["names"] == list(names)
    assert_interpreted(report, program())
    loaded = c_backend.load_artifact(artifact)
    assert loaded.columns == program().columns and loaded.n_operators == 3 and bool(loaded.context)


def test_artifact_without_a_cache_leaves_only_the_artifact(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    artifact = c_backend.write_artifact(program(), tmp_path / "out" / "k.so")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["k.so"]
    fired, keys = c_backend.load_artifact(artifact).run(columns(), 40)
    assert_interpreted({"fired": fired, "keys": keys}, program())


def test_a_file_that_is_not_a_kernel_is_refused_by_name(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.so"
    bogus.write_text("not a library")
    with pytest.raises(c_backend.ArtifactError, match="notes.so: not a tracec C kernel"):
        c_backend.load_artifact(bogus)


def test_cache_rewrites_a_file_only_when_its_content_differs(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    path = cache.write_text("numba", "k.py", "x = 1\n")
    stamp = path.stat().st_mtime_ns
    os.utime(path, ns=(stamp - 10**9, stamp - 10**9))
    assert cache.write_text("numba", "k.py", "x = 1\n").stat().st_mtime_ns == stamp - 10**9
    assert cache.write_text("numba", "k.py", "x = 2\n").read_text() == "x = 2\n"
    assert [p.name for p in path.parent.iterdir()] == ["k.py"]  # no temporary files left behind


def test_content_key_separates_its_parts() -> None:
    assert content_key("ab", "c") != content_key("a", "bc")
    assert content_key("ab", "c") == content_key("ab", "c")


def test_cache_root() -> None:
    assert cache_root({"TRACEC_CACHE_DIR": "/srv/k"}) == Path("/srv/k")
    assert cache_root({}) == Path.home() / ".cache" / "tracec"
