"""Issue 9 §2 end to end: every hostile or broken input gets exit 0 or 1 (2 for a usage error) within 10 s, a message
that says where (`file:line:col` inside a file, else the path the user gave), and never a traceback.

Each case runs `tracec` in a child process, as a user would. The cases of the command line itself (paths, outputs,
the kernel cache, several files at once) are in `SHELL_CASES`; those whose fix lies in the parser or the trajectory
reader (source text that is not UTF-8 or nests too deep, hostile JSONL) are in `INPUT_CASES`, a table of their own.
"""

from __future__ import annotations

import json
import os
import random
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_fixtures import DOOR_EPISODES, DOOR_RUBRIC, door_episode, run_tracec, write_jsonl

REPO = Path(__file__).resolve().parents[2]

# A case writes its files under the folder it is given and returns the arguments, relative to that folder.
Make = Callable[[Path], list[str]]


@dataclass(frozen=True)
class Case:
    name: str
    make: Make
    exit: int | tuple[int, ...]  # a tuple where the issue leaves the choice open (a stated limit, or no limit)
    where: str  # a regex the message must match; `{dir}` stands for the case's folder
    env: tuple[tuple[str, str], ...] = ()


def _rubric(folder: Path, text: str | bytes = DOOR_RUBRIC, name: str = "door.rubric") -> str:
    path = folder / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return name


def _trajectories(folder: Path, lines: list[str] | None = None, name: str = "t.jsonl") -> str:
    if lines is None:
        write_jsonl(folder / name, DOOR_EPISODES)
    else:
        (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8", errors="surrogatepass")
    return name


def _score(folder: Path, *more: str, trajectories: list[str] | None = None, rubric: str = DOOR_RUBRIC) -> list[str]:
    return ["score", _rubric(folder, rubric), "--trajectories", _trajectories(folder, trajectories), *more]


def _a_file(folder: Path) -> str:
    (folder / "plain").write_text("not a folder\n")
    return "plain"


def _unwritable(folder: Path) -> str:
    """A folder in which nothing can be created, for root too (where permissions do not bind, /sys is read-only)."""
    if os.geteuid() == 0:
        return "/sys"
    locked = folder / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    return str(locked)


SHELL_CASES = [
    Case("check a path under a regular file", lambda d: ["check", _rubric(d) + "/x.rubric"], 1,
         r"door\.rubric/x\.rubric: error: `door\.rubric` is a file, not a folder"),
    Case("check a folder", lambda d: ["check", "."], 1, r"\.: error: is a folder"),
    Case("explain a missing file", lambda d: ["explain", "no/such.rubric"], 1, r"no/such\.rubric: error: no such file"),
    Case("score -o under a regular file", lambda d: _score(d, "-o", _rubric(d) + "/x.jsonl"), 1,
         r"door\.rubric/x\.jsonl: error: `door\.rubric` is a file, not a folder"),
    Case("score -o a folder", lambda d: (d / "out.jsonl").mkdir() or _score(d, "-o", "out.jsonl"), 1,
         r"out\.jsonl: error: is a folder"),
    Case("score -o in a folder that cannot be written", lambda d: _score(d, "-o", _unwritable(d) + "/e.jsonl"), 1,
         r"/e\.jsonl: error: permission denied"),
    Case("score -o with an ending that is no format", lambda d: _score(d, "-o", "e.csv"), 2,
         r"e\.csv: the output's name must end in \.jsonl or \.parquet"),
    Case("score --trajectories missing", lambda d: ["score", _rubric(d), "--trajectories", "none.jsonl"], 1,
         r"none\.jsonl: error: no such file"),
    Case("score --trajectories a folder", lambda d: ["score", _rubric(d), "--trajectories", "."], 1,
         r"\.: error: is a folder"),
    Case("compile -o under a regular file",
         lambda d: ["compile", _rubric(d), "--backend", "c", "-o", _a_file(d) + "/k.so"], 1,
         r"plain/k\.so: error: `plain` is a file, not a folder"),
    Case("an unwritable kernel cache says which setting moves it", lambda d: _a_file(d) and ["compile", _rubric(d)], 1,
         r"plain/cache: error: the kernel cache cannot be written .*set \$TRACEC_CACHE_DIR",
         env=(("TRACEC_CACHE_DIR", "{dir}/plain/cache"),)),
    Case("the kernel cache under a file, for eval too", lambda d: _a_file(d) and _score(d), 1,
         r"plain/cache: error: the kernel cache .*\$TRACEC_CACHE_DIR",
         env=(("TRACEC_CACHE_DIR", "{dir}/plain/cache"),)),
    Case("a ~user of no user in $TRACEC_CACHE_DIR", lambda d: ["check", _rubric(d)], 1,
         r"\$TRACEC_CACHE_DIR=~nosuchuser_x/c: error: `~nosuchuser_x` names no user of this machine",
         env=(("TRACEC_CACHE_DIR", "~nosuchuser_x/c"),)),
    Case("a ~user of no user in $TRACEC_MODELS_DIR", lambda d: ["models"], 1,
         r"\$TRACEC_MODELS_DIR=~nosuchuser_x: error: `~nosuchuser_x` names no user of this machine",
         env=(("TRACEC_MODELS_DIR", "~nosuchuser_x"),)),
    Case("demo --workdir a file", lambda d: ["demo", "--workdir", _a_file(d)], 1,
         r"plain: error: is a file, not a folder"),
    Case("demo --workdir under a file", lambda d: ["demo", "--workdir", _a_file(d) + "/out"], 1,
         r"plain/out: error: `plain` is a file, not a folder"),
    Case("tau2 --dump-db under a file",
         lambda d: ["tau2", "replay", "--domain", "retail", "--task", "0", "--dump-db", _a_file(d) + "/db.json"], 1,
         r"plain/db\.json: error: `plain` is a file, not a folder"),
    Case("env on a missing file", lambda d: ["env", "none.rubric"], 1, r"none\.rubric: error: no such file"),
    Case("env with options of the other form", lambda d: ["env", "validate", _rubric(d), "--seed", "3"], 2,
         r"--seed does not go with `tracec env validate FILE`"),
]


def _garbage(seed: int) -> bytes:
    return random.Random(seed).randbytes(4096)


def _nested(depth: int) -> str:
    return DOOR_RUBRIC.replace("act.verb == wait", "(" * depth + "act.verb == wait" + ")" * depth)


def _flat(terms: int, joiner: str) -> str:
    if joiner == "and":
        body = " and ".join(["act.verb == wait"] * terms)
    else:
        body = " + ".join(["count(next.open)"] * terms) + " > 0"
    return DOOR_RUBRIC.replace("act.verb == wait", body)


def _jsonl_with(field_path: tuple[str, ...], value_json: str) -> list[str]:
    """The door episodes as JSONL text, the first one with `value_json` (raw JSON text) spliced in at a field."""
    lines = [json.dumps(e) for e in DOOR_EPISODES]
    marker = "__SPLICE__"
    first = json.loads(lines[0])
    target = first
    for key in field_path[:-1]:
        target = target[key]
    target[field_path[-1]] = marker
    lines[0] = json.dumps(first).replace(f'"{marker}"', value_json)
    return lines


# Lark breaks lines at \n only; Python's splitlines also at \v and \f, which would quote a line too early.
FORM_FEEDS = DOOR_RUBRIC.replace("rubric door_rubric", "# a comment\vwith\fform feeds\nrubric door_rubric").replace(
    "act.verb == wait", "act.verb == wiat")
TYPO_LINE = next(line for line in FORM_FEEDS.split("\n") if "wiat" in line)
MATCHES = DOOR_RUBRIC.replace('contains(next.note, "can\'t")', "matches(next.note, /can.t/)")  # read by RE2
NOT_UTF8 = DOOR_RUBRIC.encode().replace(b'"waits"', b'"w\xffits"')
LONG_TASK = _jsonl_with(("task",), "1" * 5000)
LONG_FACT = _jsonl_with(("states", 1, "open", 0), "-" + "1" * 5000)
# Issue 20 §3: a lone \r is an error at its place, an empty `{}` in a template is located at its `}`, `-(4)` binds
# no literal.
LONE_CR = DOOR_RUBRIC.replace("rubric door_rubric", "# note\rrubric door_rubric")
LONE_CR_LINE = LONE_CR.split("\n").index(next(line for line in LONE_CR.split("\n") if "\r" in line)) + 1
EMPTY_BRACES = "\n" + (REPO / "examples/envs/datetime_reasoning.rubric").read_text().replace(
    "I want to fly from {flight.origin}", "I want to fly from {}", 1)
BRACES_LINE = next(i for i, line in enumerate(EMPTY_BRACES.split("\n"), 1) if "{}" in line)
BRACES_COLUMN = EMPTY_BRACES.split("\n")[BRACES_LINE - 1].index("{}") + 2
NEGATED = DOOR_RUBRIC.replace("rubric door_rubric for door {", "rubric door_rubric for door {\n  bind n: int = -(4)")
NEGATED_LINE = next(i for i, line in enumerate(NEGATED.split("\n"), 1) if "-(4)" in line)
LOCATED_SOURCE = r"door\.rubric:\d+:\d+: error: "
LOCATED_DATA = r"t\.jsonl:\d+(:\d+)?: error: "
OK_OR_LOCATED = rf"(door\.rubric: ok|{LOCATED_SOURCE})"
SCORED_OR_LOCATED = rf"(e\.jsonl: 6 steps of 3 episodes|{LOCATED_SOURCE})"
ACCEPTED_OR_LOCATED = rf"(\"episode\"|e\.parquet: \d+ steps|{LOCATED_DATA})"  # processed, or rejected where it is

INPUT_CASES = [
    *[Case(f"{command} a .rubric that is not UTF-8", (lambda d, c=command: [c, _rubric(d, NOT_UTF8)]), 1,
           r"door\.rubric:9:\d+: error: .*UTF-8") for command in ("check", "explain", "compile")],
    Case("score a .rubric that is not UTF-8", lambda d: ["score", _rubric(d, NOT_UTF8), "--trajectories",
                                                       _trajectories(d)], 1, r"door\.rubric:9:\d+: error: .*UTF-8"),
    Case("env a .rubric that is not UTF-8", lambda d: ["env", _rubric(d, b"environment e \"\xff\" {}")], 1,
         r"door\.rubric:1:\d+: error: .*UTF-8"),
    *[Case(f"check random binary garbage ({seed})", (lambda d, s=seed: ["check", _rubric(d, _garbage(s))]), 1,
           LOCATED_SOURCE) for seed in range(3)],
    Case("check NUL bytes", lambda d: ["check", _rubric(d, DOOR_RUBRIC.replace("waits", "wa\x00its", 1))], 1,
         LOCATED_SOURCE),
    Case("check 20,000 terms joined by and", lambda d: ["check", _rubric(d, _flat(20_000, "and"))], (0, 1),
         OK_OR_LOCATED),
    Case("check 20,000 terms joined by +", lambda d: ["check", _rubric(d, _flat(20_000, "+"))], (0, 1), OK_OR_LOCATED),
    Case("score 20,000 terms joined by and", lambda d: _score(d, "-o", "e.jsonl", rubric=_flat(20_000, "and")), (0, 1),
         SCORED_OR_LOCATED),
    Case("check nesting 100,000 deep", lambda d: ["check", _rubric(d, _nested(100_000))], (0, 1), OK_OR_LOCATED),
    Case("score nesting 100,000 deep", lambda d: _score(d, "-o", "e.jsonl", rubric=_nested(100_000)), (0, 1),
         SCORED_OR_LOCATED),
    Case("score `not` nested 20,000 deep", lambda d: _score(d, "-o", "e.jsonl", rubric=DOOR_RUBRIC.replace(
        "act.verb == wait", "not " * 20_000 + "act.verb == wait")), (0, 1), SCORED_OR_LOCATED),
    Case("score an env_reward of 400 digits", lambda d: _score(d, trajectories=_jsonl_with(("env_reward",), "9" * 400)),
         1, LOCATED_DATA),
    Case("score a number of 5,000 digits", lambda d: _score(d, trajectories=LONG_TASK), 1,
         rf"^t\.jsonl:1:{LONG_TASK[0].index('1' * 5000) + 1}: error: episode a: `task` is a number of 5,000 digits; "
         r"a number may have at most 4,300\n"),
    Case("score a number of 5,000 digits in a fact", lambda d: _score(d, trajectories=LONG_FACT), 1,
         rf"^t\.jsonl:1:{LONG_FACT[0].index('-1111') + 1}: error: episode a: `states\[1\]\.open\[0\]` is a number "
         r"of 5,000 digits; a number may have at most 4,300\n"),
    *[Case(f"eval a first line {first!r} (pyarrow's reader crashed on null)", (lambda d, f=first: _score(
        d, trajectories=[f, json.dumps(DOOR_EPISODES[0])])), 1,
           rf"^t\.jsonl:1:1: error: expected a JSON object \(one episode a line\), got {re.escape(shown)}\n")
      for first, shown in (("null", "null"), ("[null]", "[null]"), ("true", "true"), ("5", "5"),
                           ("\ufeffnull", "null"), (" \tnull", "null"))],
    Case("score null after a good line", lambda d: _score(d, trajectories=[json.dumps(DOOR_EPISODES[0]), "null"]), 1,
         r"^t\.jsonl:2:1: error: expected a JSON object \(one episode a line\), got null\n"),
    Case("score two episodes on one line", lambda d: _score(d, trajectories=[
        json.dumps(DOOR_EPISODES[0]) + " " + json.dumps(DOOR_EPISODES[1])]), 1,
         r"^t\.jsonl:1:\d+: error: malformed JSON: Extra data\n"),
    Case("score one episode over two lines", lambda d: _score(d, trajectories=json.dumps(DOOR_EPISODES[0]).split(
        ", ", 1)), 1, r"^t\.jsonl:1:\d+: error: malformed JSON: "),
    Case("score arrays nested 100,000 deep", lambda d: _score(d, trajectories=_jsonl_with(
        ("states", 0, "open"), "[" * 100_000 + "]" * 100_000)), 1, LOCATED_DATA),
    Case("score a lone surrogate in an entity", lambda d: _score(d, trajectories=_jsonl_with(
        ("states", 0, "room"), '"\\ud800"')), (0, 1), ACCEPTED_OR_LOCATED),
    Case("score a lone surrogate in a set", lambda d: _score(d, trajectories=_jsonl_with(
        ("states", 1, "open"), '["\\ud800"]')), (0, 1), ACCEPTED_OR_LOCATED),
    Case("score a lone surrogate in text a regex reads", lambda d: _score(d, rubric=MATCHES, trajectories=_jsonl_with(
        ("states", 1, "note"), '"can\'t \\ud800"')), (0, 1), ACCEPTED_OR_LOCATED),
    Case("score a lone surrogate in an episode id, to Parquet",
         lambda d: _score(d, "-o", "e.parquet", trajectories=_jsonl_with(("episode",), '"\\ud800"')), (0, 1),
         ACCEPTED_OR_LOCATED),
    Case("score records that share no field with the schema",
         lambda d: _score(d, trajectories=[json.dumps({"episode": "x", "states": [{"hp": 1}, {"hp": 2}],
                                                      "actions": [{"cmd": "hit"}], "env_reward": 1.0})]),
         (0, 1), r"t\.jsonl"),  # reported: an error, or a warning on stderr beside the scores
    Case("score an episode id used twice",
         lambda d: _score(d, trajectories=[json.dumps(door_episode("a", "t", ["go"], 0))] * 2), (0, 1), r"t\.jsonl:2"),
    Case("a lone \\r is an error at its place, quoting its line up to it", lambda d: ["check", _rubric(d, LONE_CR)],
         1, rf"^door\.rubric:{LONE_CR_LINE}:7: error: a carriage return \(\\r\) not followed by a newline; lines end "
         r"with \\n or \\r\\n\n    # note\ufffd\n          \^\n"),
    Case("an empty `{}` in a template is located at its `}`", lambda d: ["check", _rubric(d, EMPTY_BRACES)], 1,
         rf"^door\.rubric:{BRACES_LINE}:{BRACES_COLUMN}: error: unexpected `}}`; expected an expression\n"),
    Case("a binding of -(4) says to write -4", lambda d: ["check", _rubric(d, NEGATED)], 1,
         rf"^door\.rubric:{NEGATED_LINE}:17: error: a binding's value is a literal: write `-4`, with the `-` right "
         r"before the number\n"),
    Case("a source whose \\v and \\f are not line breaks quotes the line it names",
         lambda d: ["check", _rubric(d, FORM_FEEDS)], 1,
         rf"door\.rubric:{FORM_FEEDS.split(chr(10)).index(TYPO_LINE) + 1}:\d+: error: "
         rf".*\n +{re.escape(TYPO_LINE.strip())}"),
]


def _run(case: Case, folder: Path, cache: Path):
    argv = case.make(folder)
    env = {"TRACEC_CACHE_DIR": str(cache), **{k: v.format(dir=folder) for k, v in case.env}}
    return run_tracec(argv, cwd=folder, env=env)


def _assert_answered(case: Case, folder: Path, cache: Path) -> None:
    result = _run(case, folder, cache)
    assert "Traceback" not in result.err, result.err
    allowed = case.exit if isinstance(case.exit, tuple) else (case.exit,)
    assert result.code in allowed, f"exit {result.code}, expected {case.exit}\n{result.err}"
    told = result.err if result.code else result.err + result.out
    assert re.search(case.where, told), result.err


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kernels")


@pytest.mark.parametrize("case", SHELL_CASES, ids=lambda c: c.name)
def test_the_shell_answers_hostile_paths_and_options(case: Case, tmp_path: Path, kernel_cache: Path) -> None:
    _assert_answered(case, tmp_path, kernel_cache)


@pytest.mark.parametrize("case", INPUT_CASES, ids=lambda c: c.name)
def test_hostile_sources_and_trajectories_are_answered(case: Case, tmp_path: Path, kernel_cache: Path) -> None:
    _assert_answered(case, tmp_path, kernel_cache)


def test_check_a_missing_b_checks_both(tmp_path: Path, kernel_cache: Path) -> None:
    _rubric(tmp_path, name="a.rubric")
    _rubric(tmp_path, DOOR_RUBRIC.replace("act.verb == wait", "act.verb == wiat"), name="b.rubric")
    result = run_tracec(["check", "a.rubric", "missing.rubric", "b.rubric"], cwd=tmp_path)
    assert result.code == 1
    assert result.out.splitlines() == ["a.rubric: ok (1 schemas, 1 rubrics, 0 capabilities, 0 environments)"]
    assert "missing.rubric: error: no such file" in result.err and "b.rubric:9:" in result.err


def test_a_refused_output_leaves_the_old_file_and_names_no_temporary(tmp_path: Path, kernel_cache: Path) -> None:
    (tmp_path / "out.jsonl").mkdir()
    result = run_tracec(_score(tmp_path, "-o", "out.jsonl"), cwd=tmp_path, env={"TRACEC_CACHE_DIR": str(kernel_cache)})
    assert result.code == 1 and ".tmp" not in result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["door.rubric", "out.jsonl", "t.jsonl"]


def test_an_empty_trajectory_file_gives_empty_outputs_with_the_columns(tmp_path: Path, kernel_cache: Path) -> None:
    env = {"TRACEC_CACHE_DIR": str(kernel_cache)}
    for out in ("e.jsonl", "e.parquet"):
        result = run_tracec(_score(tmp_path, "-o", out, trajectories=[]), cwd=tmp_path, env=env)
        assert result.code == 0, result.err
    assert (tmp_path / "e.jsonl").read_text() == ""
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.num_rows == 0
    assert table.column_names == ["episode", "task", "t", "ops", "r_F", "r_B", "r_TRCA", "R", "A_E", "A_S", "A"]
