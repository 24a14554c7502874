"""Issue 20: every verb answers at once. A bad argument, path or config is a usage error (exit 2) or a user error
(exit 1) whose message names the option or the file, never a traceback, and it is said before torch, transformers or
numba are imported unless saying it needs torch (a cuda device asked for); `--help` of every verb imports none.

What the process imported is the measure, not a timer: the cases run in one child process, one after another
through `tracec.cli.main` (stdout and stderr captured per case), which records the heavy packages loaded after
each case. Imports only accumulate, so the cases that may import torch run last; every case before them is then
proven not to have imported it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_fixtures import DOOR_EPISODES, DOOR_RUBRIC, write_jsonl
from tracec.cli import COMMANDS

# A case writes its files under the folder it is given and returns the arguments, relative to that folder.
Make = Callable[[Path], list[str]]


@dataclass(frozen=True)
class Case:
    name: str
    make: Make
    exit: int
    says: str  # a regex stderr's first line with `error:` (else its last) must match; for exit 0, stdout's first
    torch: bool = False  # saying it needs torch: the device is asked for a cuda device
    untouched: tuple[str, ...] = ()  # files whose bytes the case must leave as they were, or absent ones absent


def _rubric(folder: Path) -> str:
    (folder / "door.rubric").write_text(DOOR_RUBRIC)
    return "door.rubric"


def _trajectories(folder: Path) -> str:
    write_jsonl(folder / "t.jsonl", DOOR_EPISODES)
    return "t.jsonl"


def _options(folder: Path) -> str:
    (folder / "options.json").write_text(json.dumps([{"name": "base", "label": "A"}]))
    return "options.json"


def _folder(folder: Path, name: str = "out") -> str:
    (folder / name).mkdir()
    return name


def _a_file(folder: Path) -> str:
    (folder / "plain").write_text("not a folder\n")
    return "plain"


def _toml(folder: Path, text: str | bytes, name: str = "run.toml") -> str:
    (folder / name).write_bytes(text.encode() if isinstance(text, str) else text)
    return name


def _tau2_data(folder: Path, db: str) -> str:
    """A tau2 data folder whose retail `db.json` is `db` (the database is read before the tasks)."""
    retail = folder / "tau2" / "retail"
    retail.mkdir(parents=True)
    for name, text in (("db.json", db), ("policy.md", ""), ("tasks.json", "[]")):
        (retail / name).write_text(text)
    return "tau2"


def _route(folder: Path, *more: str) -> list[str]:
    return ["route", "--task", "hello", "--options", _options(folder), *more]


def _evaluate(folder: Path, *more: str) -> list[str]:
    return ["evaluate", "--target", "capability", "--env", _rubric(folder), "-o", "out", *more]


def _discover(folder: Path, *more: str) -> list[str]:
    return ["analyze", "discover", _trajectories(folder), "-o", "candidates.json", *more]


def _synth_env(folder: Path, *more: str) -> list[str]:
    return ["synth", "env", "--capability", "careful", "--description", "acts with care", "-o", "out", *more]


def _synth_rubric(folder: Path, *more: str) -> list[str]:
    return ["synth", "rubric", "--schema", "toolenv", "--description", "tool use", "-o", "ops.rubric", *more]


NOT_UTF8 = b'[run]\niterations = 1\nout = "r\xffn"\n'
UNKNOWN_KEY = "[rollout]\ngroup_sise = 8\n"
NOT_AN_ENVIRONMENT = """
[model]
name = "tiny"
[env]
kind = "python"
max_turns = 1
[env.python]
factory = "os:getcwd"
[rollout]
group_size = 2
groups_per_batch = 1
max_new_tokens = 4
[run]
iterations = 1
"""
NOT_ONE = r"must be at least 1, got 0"

CASES = [
    # route
    Case("route --device potato", lambda d: _route(d, "--device", "potato"), 2,
         r"argument --device: 'potato' is not a device; use cpu, cuda or cuda:N"),
    Case("route --max-new-tokens -1", lambda d: _route(d, "--max-new-tokens", "-1"), 2,
         r"argument --max-new-tokens: must be at least 1, got -1"),
    Case("route --seed -1", lambda d: _route(d, "--seed", "-1"), 2, r"argument --seed: must be at least 0, got -1"),
    Case("route without options", lambda d: ["route", "--task", "hello"], 2, r"routing needs its options"),
    Case("route --task @ a missing file", lambda d: ["route", "--task", "@none.txt", "--options", _options(d)], 1,
         r"^none\.txt: error: no such file"),
    Case("route --options missing", lambda d: ["route", "--task", "hello", "--options", "none.json"], 1,
         r"^none\.json: error: no such file"),
    Case("route --target capability without --env", lambda d: ["route", "--target", "capability", "--options",
                                                                _options(d)], 2, r"--target capability: name its"),
    Case("route --target tau2 of two domains", lambda d: ["route", "--target", "tau2", "--options", _options(d)], 2,
         r"--target: name exactly one domain"),
    Case("route --model that is none", lambda d: _route(d, "--model", "nonesuch"), 1, r"no model 'nonesuch'"),
    # evaluate
    Case("evaluate --target capability without --env",
         lambda d: ["evaluate", "--target", "capability", "-o", "out"], 2, r"--target capability: name its"),
    Case("evaluate --conditions ''", lambda d: _evaluate(d, "--conditions", ""), 2, r"--conditions: name at least"),
    Case("evaluate --conditions ' , '", lambda d: _evaluate(d, "--conditions", " , "), 2, r"--conditions: name"),
    Case("evaluate --tasks 0", lambda d: _evaluate(d, "--tasks", "0"), 2, rf"argument --tasks: {NOT_ONE}"),
    Case("evaluate --first-seed -1", lambda d: _evaluate(d, "--first-seed", "-1"), 2, r"argument --first-seed: "),
    Case("evaluate --max-turns 0", lambda d: _evaluate(d, "--max-turns", "0"), 2, rf"argument --max-turns: {NOT_ONE}"),
    Case("evaluate --max-turns 5000", lambda d: _evaluate(d, "--max-turns", "5000"), 2, r"--max-turns: .*1\.\.1000"),
    Case("evaluate --device potato", lambda d: _evaluate(d, "--device", "potato"), 2, r"argument --device: 'potato'"),
    Case("evaluate --env missing", lambda d: ["evaluate", "--target", "capability", "--env", "none.rubric", "-o", "o"],
         1, r"^none\.rubric: error: no such file"),
    Case("evaluate -o a file", lambda d: ["evaluate", "--target", "capability", "--env", _rubric(d), "-o", _a_file(d)],
         1, r"^plain: error: is a file, not a folder"),
    Case("evaluate --adapter without a name", lambda d: _evaluate(d, "--adapter", "folder"), 2,
         r"--adapter folder: write --adapter NAME=DIR"),
    Case("evaluate --adapter that is no adapter", lambda d: _evaluate(d, "--adapter", f"a={_folder(d, 'empty')}"), 1,
         r"^empty: not an adapter folder"),
    Case("evaluate --run missing", lambda d: _evaluate(d, "--run", "none"), 1, r"^none/pipeline\.toml: error: no such"),
    Case("evaluate --model that is none", lambda d: _evaluate(d, "--model", "nonesuch"), 1, r"no model 'nonesuch'"),
    # analyze
    Case("analyze discover -o a folder", lambda d: ["analyze", "discover", _trajectories(d), "-o", _folder(d)], 1,
         r"^out: error: is a folder"),
    Case("analyze discover --runs 0", lambda d: _discover(d, "--runs", "0"), 2, rf"argument --runs: {NOT_ONE}"),
    Case("analyze discover --case-chars 10", lambda d: _discover(d, "--case-chars", "10"), 2,
         r"argument --case-chars: must be at least 200, got 10"),
    Case("analyze discover --temperature -1", lambda d: _discover(d, "--temperature", "-1"), 2,
         r"argument --temperature: must be a number at least 0, got -1"),
    Case("analyze discover --max-tokens 0", lambda d: _discover(d, "--max-tokens", "0"), 2, r"argument --max-tokens"),
    Case("analyze discover --tries 0", lambda d: _discover(d, "--tries", "0"), 2, rf"argument --tries: {NOT_ONE}"),
    Case("analyze discover --seed -1", lambda d: _discover(d, "--seed", "-1"), 2, r"argument --seed: "),
    Case("analyze discover --timeout 0", lambda d: _discover(d, "--timeout", "0"), 2,
         r"argument --timeout: must be a number more than 0"),
    Case("analyze discover --runs x", lambda d: _discover(d, "--runs", "x"), 2, r"argument --runs: invalid int value"),
    Case("analyze label --runs 0", lambda d: ["analyze", "label", _trajectories(d), "--capabilities", "c.json", "-o",
                                              "runs", "--runs", "0"], 2, rf"argument --runs: {NOT_ONE}"),
    Case("analyze label -o a file", lambda d: ["analyze", "label", _trajectories(d), "--capabilities", "c.json", "-o",
                                               _a_file(d)], 1, r"^plain: error: is a file, not a folder"),
    Case("analyze select --rho 2", lambda d: ["analyze", "select", "runs", "-o", "s.json", "--rho", "2"], 2,
         r"argument --rho: must be a number between 0 and 1, got 2"),
    Case("analyze select -o a folder", lambda d: ["analyze", "select", "runs", "-o", _folder(d)], 1,
         r"^out: error: is a folder"),
    # synth
    *[Case(f"synth env --validate-seeds {n}", (lambda d, n=n: _synth_env(d, "--validate-seeds", n)), 2,
           r"argument --validate-seeds: must be at least 1") for n in ("-1", "0")],
    Case("synth env --max-steps 0", lambda d: _synth_env(d, "--max-steps", "0"), 2,
         r"argument --max-steps: must be between 1 and 1000, got 0"),
    Case("synth env --group-size 1", lambda d: _synth_env(d, "--group-size", "1"), 2, r"argument --group-size: "),
    Case("synth env --policy-temperature -1", lambda d: _synth_env(d, "--policy-temperature", "-1"), 2,
         r"argument --policy-temperature: must be a number at least 0, got -1"),
    Case("synth env --mean-band 0.2 1.5", lambda d: _synth_env(d, "--mean-band", "0.2", "1.5"), 2,
         r"argument --mean-band: must be a number between 0 and 1, got 1\.5"),
    Case("synth env --success-band 0.6 0.2", lambda d: _synth_env(d, "--success-band", "0.6", "0.2"), 2,
         r"--success-band: LOW 0\.6 is above HIGH 0\.2; give the band as LOW HIGH"),
    Case("synth env -o a file", lambda d: ["synth", "env", "--capability", "c", "--description", "d", "-o",
                                           _a_file(d)], 1, r"^plain: error: is a file, not a folder"),
    Case("synth rubric --seeds 0", lambda d: _synth_rubric(d, "--seeds", "0"), 2, rf"argument --seeds: {NOT_ONE}",
         untouched=("ops.rubric", "ops.episodes.jsonl")),
    Case("synth rubric -o a folder", lambda d: ["synth", "rubric", "--schema", "toolenv", "--description", "d", "-o",
                                                _folder(d)], 1, r"^out: error: is a folder"),
    # train and pipeline
    Case("train a missing config", lambda d: ["train", "none.toml"], 1, r"^none\.toml: error: no such config file"),
    Case("train a config that is not UTF-8", lambda d: ["train", _toml(d, NOT_UTF8)], 1,
         r"^run\.toml:3:\d+: error: the file is not UTF-8"),
    Case("train a config with an unknown key", lambda d: ["train", _toml(d, UNKNOWN_KEY)], 1,
         r"^run\.toml:2:1: error: .*group_sise"),
    Case("train --out a file", lambda d: ["train", _toml(d, NOT_AN_ENVIRONMENT), "--out", _a_file(d)], 1,
         r"^plain: error: is a file, not a folder"),
    Case("pipeline a config that is not UTF-8", lambda d: ["pipeline", _toml(d, NOT_UTF8)], 1,
         r"^run\.toml:3:\d+: error: the file is not UTF-8"),
    Case("pipeline a missing config", lambda d: ["pipeline", "none.toml"], 1, r"^none\.toml: error: no such file"),
    # the other verbs
    *[Case(f"{verb} a missing rubric", (lambda d, verb=verb: [verb, "none.rubric"]), 1,
           r"^none\.rubric: error: no such file") for verb in ("check", "compile", "explain")],
    Case("eval a missing rubric", lambda d: ["eval", "none.rubric", "--trajectories", _trajectories(d)], 1,
         r"^none\.rubric: error: no such file"),
    Case("eval -o of no format", lambda d: ["eval", _rubric(d), "--trajectories", _trajectories(d), "-o", "e.csv"], 2,
         r"e\.csv: the output's name must end in"),
    Case("convert a file onto itself", lambda d: ["convert", _trajectories(d), "-o", "./t.jsonl"], 1,
         r"^t\.jsonl: error: is the input itself", untouched=("t.jsonl",)),
    Case("tau2 replay a db.json without its tables", lambda d: ["tau2", "replay", "--domain", "retail", "--task", "0",
                                                                "--data-dir", _tau2_data(d, "{}")], 1,
         r"tau2/retail/db\.json: not a retail database, missing table"),
    Case("tau2 replay a db.json that is not JSON", lambda d: ["tau2", "replay", "--domain", "retail", "--task", "0",
                                                              "--data-dir", _tau2_data(d, "[1")], 1,
         r"tau2/retail/db\.json: cannot read the retail database"),
    Case("env --seed -1", lambda d: ["env", _rubric(d), "--seed", "-1"], 2, r"argument --seed: must be at least 0"),
    Case("env validate --first-seed -1", lambda d: ["env", "validate", _rubric(d), "--first-seed", "-1"], 2,
         r"argument --first-seed: must be at least 0"),
    Case("demo --iterations 0", lambda d: ["demo", "--iterations", "0"], 2, rf"argument --iterations: {NOT_ONE}"),
    Case("demo --lr 0", lambda d: ["demo", "--lr", "0"], 2, r"argument --lr: must be a number more than 0"),
    Case("demo --train-games past the held-out seeds", lambda d: ["demo", "--train-games", "100001"], 2,
         r"argument --train-games: must be between 1 and 100000"),
    Case("models an unknown action", lambda d: ["models", "remove"], 2, r"argument action: invalid choice"),
    # saying these needs torch: they run last
    Case("route --device cuda:99", lambda d: _route(d, "--model", "tiny", "--device", "cuda:99"), 1,
         r"^--device cuda:99: torch sees .* here; use --device cpu", torch=True),
    Case("evaluate --device cuda:99", lambda d: _evaluate(d, "--model", "tiny", "--device", "cuda:99"), 1,
         r"^--device cuda:99: torch sees", torch=True),
    Case("analyze discover --device cuda:99", lambda d: _discover(d, "--model", "tiny", "--device", "cuda:99"), 1,
         r"^--device cuda:99: torch sees", torch=True),
    Case("synth env --device cuda:99", lambda d: _synth_env(d, "--policy", "tiny", "--device", "cuda:99"), 1,
         r"^--device cuda:99: torch sees", torch=True),
    Case("train a python factory that makes no environment",
         lambda d: ["train", _toml(d, NOT_AN_ENVIRONMENT), "--out", "run", "--quiet"], 1,
         r"^env\.python\.factory = 'os:getcwd': getcwd\(\) made a str, not an environment", torch=True),
]

STEPS = {"analyze": ("discover", "label", "select"), "synth": ("env", "rubric"), "tau2": ("replay",)}
HELP = [["--help"], *([command.name, "--help"] for command in COMMANDS),
        *([name, step, "--help"] for name, steps in STEPS.items() for step in steps)]
HELP_CASES = [Case(" ".join(argv), (lambda d, argv=argv: argv), 0, r"^usage:") for argv in HELP]

# Runs the cases given as JSON, in order, each in its folder; what each said and what was imported after it.
DRIVER = """
import contextlib, io, json, os, sys
from tracec.cli import main

cases, answers = json.loads(open(sys.argv[1]).read()), []
for case in cases:
    os.chdir(case["cwd"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(case["argv"])
    heavy = sorted({name.split(".")[0] for name in sys.modules} & {"torch", "transformers", "numba"})
    answers.append({"code": code, "out": out.getvalue(), "err": err.getvalue(), "heavy": heavy})
open(sys.argv[2], "w").write(json.dumps(answers))
"""


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every case's answer, by name: all of them run in one child process, those that may import torch last."""
    root = tmp_path_factory.mktemp("bad_arguments")
    ordered = sorted(HELP_CASES + CASES, key=lambda case: case.torch)
    runs, before = [], []
    for index, case in enumerate(ordered):
        folder = root / f"case{index:03d}"
        folder.mkdir()
        runs.append({"cwd": str(folder), "argv": case.make(folder)})
        before.append({name: _bytes(folder / name) for name in case.untouched})
    (root / "cases.json").write_text(json.dumps(runs))
    # No LLM server is configured: without a base URL the LLM flags name the local transformers backend.
    environ = {k: v for k, v in os.environ.items() if k not in ("TRACEC_LLM_BASE_URL", "OPENAI_BASE_URL")}
    subprocess.run([sys.executable, "-c", DRIVER, str(root / "cases.json"), str(root / "answers.json")], env=environ,
                   check=True, timeout=300, stdin=subprocess.DEVNULL)
    answered = json.loads((root / "answers.json").read_text())
    return {case.name: {**answer, "cwd": Path(run["cwd"]), "before": files}
            for case, run, files, answer in zip(ordered, runs, before, answered)}


def _bytes(path: Path) -> bytes | None:
    """A file's bytes; None when it does not exist."""
    return path.read_bytes() if path.exists() else None


@pytest.mark.parametrize("case", CASES + HELP_CASES, ids=lambda c: c.name)
def test_a_bad_argument_is_answered_at_once(case: Case, answers: dict[str, dict[str, Any]]) -> None:
    answer = answers[case.name]
    assert "Traceback" not in answer["err"], answer["err"]
    assert answer["code"] == case.exit, f"exit {answer['code']}, expected {case.exit}\n{answer['err']}"
    if case.exit == 0:
        said = answer["out"].splitlines()[0]
    else:  # argparse's usage lines come first, and a library's warnings may (transformers')
        lines = answer["err"].splitlines()
        said = next((line for line in lines if "error:" in line), lines[-1] if lines else "")
    assert re.search(case.says, said), answer["err"] or answer["out"]
    if not case.torch:
        assert answer["heavy"] == [], f"imported {answer['heavy']}"
    assert {name: _bytes(answer["cwd"] / name) for name in case.untouched} == answer["before"]
