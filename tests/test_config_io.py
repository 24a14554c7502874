"""`config_io`'s one walk of a dotted key and its one rule for the paths a config names: relative to the config
file's folder (to the working folder for a `--set`), `~` and `~user` expanded, a `~user` of no user a located error."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tracec.config_io import ConfigError, FieldError, build, expanded_path, set_at, value_at, with_absolute_paths


@dataclass(frozen=True, kw_only=True)
class Files:
    rubric: str = ""
    paths: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Config:
    files: Files = field(default_factory=Files)
    name: str = "x"


def test_value_at_walks_nested_tables_and_is_none_where_they_stop() -> None:
    tables = {"a": {"b": {"c": 1}}, "v": 2}
    assert value_at(tables, "a.b.c") == 1 and value_at(tables, "a.b") == {"c": 1}
    assert value_at(tables, "a.x.c") is None and value_at(tables, "v.w") is None  # a value is no section


def test_set_at_makes_missing_sections_and_refuses_to_descend_into_a_value() -> None:
    tables: dict[str, object] = {"v": 2}
    set_at(tables, "a.b.c", 1)
    assert tables == {"v": 2, "a": {"b": {"c": 1}}}
    with pytest.raises(ConfigError, match=r"`v` is a value, not a section, so `v\.w` cannot be set"):
        set_at(tables, "v.w", 3)


def test_paths_are_made_absolute_from_the_file_and_from_the_working_folder_for_a_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    base = tmp_path / "configs"
    config = Config(files=Files(rubric="r.rubric", paths=("a.rubric", "/abs/b.rubric")))
    made = with_absolute_paths(config, ("files.rubric", "files.paths"), base)
    assert made == Config(files=Files(rubric=str(base / "r.rubric"), paths=(str(base / "a.rubric"), "/abs/b.rubric")))
    given = with_absolute_paths(config, ("files.rubric",), base, sources={"files.rubric": "--set files.rubric=r"})
    assert given.files.rubric == str(tmp_path / "r.rubric")
    assert with_absolute_paths(Config(), ("files.rubric", "files.paths"), base) == Config()  # "" stays unset


def test_a_tilde_is_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    made = with_absolute_paths(Config(files=Files(rubric="~/r.rubric")), ("files.rubric",), Path("/elsewhere"))
    assert made.files.rubric == str(tmp_path / "r.rubric")
    assert expanded_path("files.rubric", "~/r.rubric") == tmp_path / "r.rubric"


def test_a_tilde_of_no_user_is_an_error_naming_the_key_at_its_line() -> None:
    with pytest.raises(FieldError) as bad:
        expanded_path("files.rubric", "~nosuchuser_x/r.rubric")
    assert bad.value.name == "files.rubric" and "`~nosuchuser_x` names no user of this machine" in str(bad.value)
    text = 'name = "x"\n\n[files]\nrubric = "~nosuchuser_x/r.rubric"\n'
    config = build(Config, {"files": {"rubric": "~nosuchuser_x/r.rubric"}})
    with pytest.raises(ConfigError) as located:
        with_absolute_paths(config, ("files.rubric",), Path.cwd(), where="c.toml", text=text)
    assert str(located.value) == ('c.toml:4:1: error: files.rubric = "~nosuchuser_x/r.rubric": `~nosuchuser_x` names '
                                  'no user of this machine; write the path from `/`, or as a relative path')
    listed = build(Config, {"files": {"paths": ["ok.rubric", "~nosuchuser_x/r.rubric"]}})
    with pytest.raises(ConfigError, match=r"^--set files\.paths=\[\.\.\.\]: error: files\.paths = "):
        with_absolute_paths(listed, ("files.paths",), Path.cwd(), sources={"files.paths": "--set files.paths=[...]"})

