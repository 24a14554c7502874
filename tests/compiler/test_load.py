"""The front end in one call (`compiler.load`): a file's rubric chosen by name or as its only one, every other case
one message that lists what the file has; and the commands that only compile never load the runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tracec.compiler.load import chosen_declaration, load_rubric
from tracec.dsl.errors import CheckError

SCHEMA = "schema chat { state { solved: bool } action { tool: entity  ok: bool } }\n"
HELPFUL = 'rubric helpful for chat {\n  evidence solves "solved": next.solved and not prev.solved\n}\n'
OTHER = 'rubric other for chat {\n  invalidity broken "a call fails": not act.ok\n}\n'


def test_the_only_rubric_needs_no_name() -> None:
    assert load_rubric(SCHEMA + HELPFUL, "one.rubric").name == "helpful"


def test_a_file_with_several_rubrics_needs_a_name() -> None:
    two = SCHEMA + HELPFUL + OTHER
    with pytest.raises(CheckError, match="name the rubric to use; this file has: helpful, other \\(--rubric NAME"):
        load_rubric(two, "two.rubric")
    assert load_rubric(two, "two.rubric", "other").name == "other"
    with pytest.raises(CheckError, match="no rubric `missing` in this file; it has: helpful, other"):
        load_rubric(two, "two.rubric", "missing")


def test_a_file_without_a_rubric_says_what_it_holds() -> None:
    with pytest.raises(CheckError, match="no rubric block to score with \\(it holds schema chat\\)"):
        load_rubric(SCHEMA, "schema.rubric")


def test_any_kind_of_declaration_is_chosen_by_the_same_rule() -> None:
    declared = {"b": 2, "a": 1}
    assert chosen_declaration({"a": 1}, None, "environment", "f.rubric") == 1
    assert chosen_declaration(declared, "b", "environment", "f.rubric") == 2
    with pytest.raises(CheckError, match="name the environment to use; this file has: a, b"):
        chosen_declaration(declared, None, "environment", "f.rubric")
    with pytest.raises(CheckError, match="no environment `c` in this file; it has: none"):
        chosen_declaration({}, "c", "environment", "f.rubric")


@pytest.mark.parametrize("verb", ["explain", "compile"])
def test_explain_and_compile_never_load_the_runtime(verb: str, tmp_path: Path) -> None:
    rubric = tmp_path / "one.rubric"
    rubric.write_text(SCHEMA + HELPFUL, encoding="utf-8")
    extra = ["--backend", "interp"] if verb == "compile" else []
    code = (f"import sys; from tracec.cli import main; code = main({[verb, str(rubric), *extra]!r}); "
            "print(code, sorted(m for m in sys.modules if m.startswith('tracec.runtime')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.splitlines()[-1] == "0 []"
