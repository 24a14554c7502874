"""Golden tests for the language front end: every construct's syntax tree, and the exact text of every error.

`tests/golden/ok/<case>.rubric` is parsed, its tree dumped to `<case>.ast`, and the file must type-check.
`tests/golden/errors/<case>.rubric` must fail to parse or check with exactly `<case>.err`. `pytest --update-golden`
rewrites the expected files; review the diff.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tracec.dsl.check import check
from tracec.dsl.errors import NOWHERE, Loc, RubricError
from tracec.dsl.parse import parse

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
OK_CASES = sorted((GOLDEN / "ok").glob("*.rubric"))
ERROR_CASES = sorted((GOLDEN / "errors").glob("*.rubric"))


def dump(node: object) -> str:
    """A stable, indented rendering of a syntax tree: one node a line, scalars inline, `@line:col` for locations."""
    return "\n".join(_dump(node, 0)) + "\n"


def _dump(node: object, depth: int) -> list[str]:
    pad = "  " * depth
    if not dataclasses.is_dataclass(node):
        return [pad + repr(node)]
    scalars, children = [], []
    for f in dataclasses.fields(node):
        if f.name in ("path", "source"):
            continue
        value = getattr(node, f.name)
        if isinstance(value, Loc):
            if value != NOWHERE:
                scalars.append(f"{f.name}@{value.line}:{value.column}" if f.name != "loc"
                               else f"@{value.line}:{value.column}")
        elif dataclasses.is_dataclass(value) or (isinstance(value, tuple) and any(_is_node(v) for v in value)):
            children.append((f.name, value))
        else:
            scalars.append(f"{f.name}={value!r}")
    lines = [pad + " ".join([type(node).__name__, *scalars])]
    for name, value in children:
        if isinstance(value, tuple):
            lines.append(f"{pad}  {name}:")
            for item in value:
                lines.extend(_dump(item, depth + 2))
        else:
            inner = _dump(value, depth + 1)
            lines.append(f"{pad}  {name}: {inner[0].lstrip()}")
            lines.extend(inner[1:])
    return lines


def _is_node(value: object) -> bool:
    return dataclasses.is_dataclass(value)


def _compare(expected_path: Path, actual: str, update: bool) -> None:
    if update or not expected_path.exists():
        expected_path.write_text(actual)
        if not update:
            pytest.fail(f"{expected_path.name} did not exist; written, review it")
        return
    assert actual == expected_path.read_text(), f"{expected_path} differs (rerun with --update-golden and review)"


@pytest.mark.parametrize("case", OK_CASES, ids=lambda p: p.stem)
def test_ok(case: Path, update_golden: bool) -> None:
    module = parse(case.read_text(), case.name)
    _compare(case.with_suffix(".ast"), dump(module), update_golden)
    check(module)


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda p: p.stem)
def test_error(case: Path, update_golden: bool) -> None:
    with pytest.raises(RubricError) as info:
        check(parse(case.read_text(), case.name))
    _compare(case.with_suffix(".err"), str(info.value) + "\n", update_golden)


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda p: p.stem)
def test_every_error_quotes_its_own_line_with_the_caret_under_its_column(case: Path) -> None:
    text = case.read_text()
    with pytest.raises(RubricError) as info:
        check(parse(text, case.name))
    lines = text.split("\n")
    for diagnostic in info.value.diagnostics:
        formatted = diagnostic.format().splitlines()
        if diagnostic.loc == NOWHERE:
            assert len(formatted) == 1
            continue
        _, quoted, caret = formatted
        source_line = lines[diagnostic.loc.line - 1].expandtabs(1)
        assert quoted == "    " + source_line
        column = caret.index("^") - 4
        assert column == diagnostic.loc.column - 1 and column < max(1, len(source_line))


def test_one_file_reports_many_errors() -> None:
    text = (GOLDEN / "errors" / "many_errors.rubric").read_text()
    with pytest.raises(RubricError) as info:
        check(parse(text, "many_errors.rubric"))
    assert len(info.value.diagnostics) >= 5
    lines = [d.loc.line for d in info.value.diagnostics]
    assert lines == sorted(lines)
