"""The parser's tables on disk: built once, loaded after, keyed by the grammar's text (and Lark's and Python's
versions), written atomically, and never in the way: an unwritable or damaged cache only costs a build."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import lark
import pytest
from tracec.dsl.parse import parse
from tracec.dsl.syntax import cached_parser

GRAMMAR = resources.files("tracec.grammars").joinpath("rubric.lark").read_text(encoding="utf-8")
SOURCE = (Path(__file__).resolve().parents[2] / "examples" / "household.rubric").read_text(encoding="utf-8")


def _tree(parser: lark.Lark) -> lark.Tree:
    return parser.parse(SOURCE, start="start")


def _refuse_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the parser was built, not loaded")

    monkeypatch.setattr(lark.Lark, "__init__", refuse)


def test_the_second_parser_is_loaded_and_parses_alike(tmp_path, monkeypatch):
    built = cached_parser(GRAMMAR, tmp_path)
    (saved,) = tmp_path.iterdir()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the temporary file was moved into place
    _refuse_builds(monkeypatch)
    loaded = cached_parser(GRAMMAR, tmp_path)
    assert _tree(loaded) == _tree(built)
    assert [p.name for p in tmp_path.iterdir()] == [saved.name]


def test_another_grammar_gets_another_file(tmp_path):
    cached_parser(GRAMMAR, tmp_path)
    changed = GRAMMAR.replace('"lambda"', '"lam"')
    other = cached_parser(changed, tmp_path)
    assert len(list(tmp_path.iterdir())) == 2
    with pytest.raises(lark.exceptions.UnexpectedInput):
        other.parse(SOURCE, start="start")  # `lambda 0.8` no longer parses: the changed grammar was built


def test_a_damaged_file_is_rebuilt(tmp_path):
    cached_parser(GRAMMAR, tmp_path)
    (saved,) = tmp_path.iterdir()
    saved.write_bytes(saved.read_bytes()[:100])
    assert _tree(cached_parser(GRAMMAR, tmp_path)) == _tree(lark.Lark(GRAMMAR, parser="lalr",
                                                                       propagate_positions=True,
                                                                       maybe_placeholders=True,
                                                                       start=["start", "expr"]))
    assert saved.stat().st_size > 100  # and saved whole again


def test_a_cache_that_cannot_be_written_only_costs_a_build(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    parser = cached_parser(GRAMMAR, blocker / "parser")
    assert _tree(parser) is not None
    if os.geteuid() != 0:  # root writes anywhere: the read-only case means nothing to it
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert _tree(cached_parser(GRAMMAR, locked)) is not None and not list(locked.iterdir())


def test_the_command_line_parses_with_an_unusable_cache_folder(tmp_path):
    """A fresh process whose $TRACEC_CACHE_DIR is a file: parsing works, nothing is raised or printed."""
    blocker = tmp_path / "cache"
    blocker.write_text("")
    code = "from tracec.dsl.parse import parse_file; import sys; parse_file(sys.argv[1]); print('ok')"
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parents[2] / "examples" /
                                                             "household.rubric")],
                          capture_output=True, text=True, env={**os.environ, "TRACEC_CACHE_DIR": str(blocker)},
                          timeout=120, check=False)
    assert done.returncode == 0 and done.stdout == "ok\n" and done.stderr == ""
    assert parse(SOURCE) is not None


def test_tables_saved_by_the_install_are_loaded_first(tmp_path, monkeypatch):
    installed, user = tmp_path / "installed", tmp_path / "user"
    built = cached_parser(GRAMMAR, installed)
    _refuse_builds(monkeypatch)
    assert _tree(cached_parser(GRAMMAR, user, installed=installed)) == _tree(built)
    assert not user.exists()  # nothing built, nothing saved in the user's folder


def test_after_the_install_step_a_process_with_an_empty_cache_builds_no_parser(tmp_path):
    """`make venv` runs `python -m tracec.dsl.syntax`; then a first parse with an empty $TRACEC_CACHE_DIR loads the
    installed tables and writes no tables of its own."""
    install = subprocess.run([sys.executable, "-m", "tracec.dsl.syntax"], capture_output=True, text=True, timeout=120,
                             check=False)
    assert install.returncode == 0, install.stderr
    cache = tmp_path / "cache"
    code = "from tracec.dsl.parse import parse_file; import sys; parse_file(sys.argv[1]); print('ok')"
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parents[2] / "examples" /
                                                             "household.rubric")],
                          capture_output=True, text=True, env={**os.environ, "TRACEC_CACHE_DIR": str(cache)},
                          timeout=120, check=False)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    assert not (cache / "parser").exists()
