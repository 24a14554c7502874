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
from importlib import resources
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
    untouched: tuple[str, ...] = ()  # files whose bytes (folders: entries) the case must leave as they were, or absent
    #   ones absent (a refused command makes no output folder)


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


# A safetensors header promising one 4x8 float tensor (128 bytes) over a file that ends after 16 of them.
_CUT_HEADER = json.dumps({"w": {"dtype": "F32", "shape": [4, 8], "data_offsets": [0, 128]}}).encode()
_CUT_WEIGHTS = len(_CUT_HEADER).to_bytes(8, "little") + _CUT_HEADER + bytes(16)


def _route(folder: Path, *more: str) -> list[str]:
    return ["route", "--task", "hello", "--options", _options(folder), *more]


def _evaluate(folder: Path, *more: str) -> list[str]:
    return ["evaluate", "--target", "capability", "--env", _rubric(folder), "-o", "out", *more]


def _adapter(folder: Path, weights: bytes | None) -> str:
    """An adapter folder with a LoRA config and `weights` as its safetensors file (None: no weights file)."""
    (folder / "adapter").mkdir()
    (folder / "adapter" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4,
                                                                        "target_modules": ["q_proj"]}))
    if weights is not None:
        (folder / "adapter" / "adapter_model.safetensors").write_bytes(weights)
    return "a=adapter"


def _run_file(folder: Path) -> str:
    """A labelling run of one failed trajectory against one capability."""
    (folder / "r1.json").write_text(json.dumps({"attempt": 1, "totals": {"total_failed": 1, "total_passed": 0},
                                                "labels": {"careful": {"lacking_failed": ["e1"]}}}))
    return "r1.json"


def _link(folder: Path, target: str, name: str = "link") -> str:
    (folder / name).symlink_to(target)
    return name


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
# A run on the tiny model; each case adds the setting it gets wrong. Its inputs are all checked before torch loads.
TINY_RUN = '[model]\nname = "tiny"\n[run]\niterations = 1\n'


def _train(folder: Path, toml: str, *more: str) -> list[str]:
    """`tracec train` of the tiny run with `toml` added, into the run folder `run` (which it must not leave)."""
    return ["train", _toml(folder, TINY_RUN + toml), "--out", "run", "--quiet", *more]


def _fake_game(folder: Path) -> str:
    (folder / "game.z8").write_text("not a game\n")
    return "game.z8"


def _model_folder(folder: Path, config: str) -> str:
    """A checkpoint folder whose config.json is `config` (weights and tokenizer beside it, in name)."""
    (folder / "model").mkdir()
    for name, text in (("config.json", config), ("model.safetensors", ""), ("tokenizer.json", "{}")):
        (folder / "model" / name).write_text(text)
    return "model"


def _rubric_env(folder: Path) -> str:
    """A capability environment of tool calls (a copy of the shipped example)."""
    (folder / "tools.rubric").write_text((resources.files("tracec.examples") / "envs" / "tool_calling_precision.rubric")
                                         .read_text(encoding="utf-8"))
    return "tools.rubric"


def _raising_factory(folder: Path) -> str:
    """A module of the user's (importable from the case's folder) whose factory fails on its second line."""
    (folder / "raising_factory.py").write_text("def make():\n    return {}['nope']\n")
    return "raising_factory:make"

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
    Case("evaluate --conditions ''", lambda d: _evaluate(d, "--conditions", ""), 2, r"--conditions: name at least",
         untouched=("out",)),
    Case("evaluate --conditions ' , '", lambda d: _evaluate(d, "--conditions", " , "), 2, r"--conditions: name",
         untouched=("out",)),
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
    Case("evaluate --conditions of no such name", lambda d: _evaluate(d, "--model", "tiny", "--conditions", "nope"), 2,
         r"--conditions: unknown condition 'nope'", untouched=("out",)),
    Case("evaluate --adapter without weights", lambda d: _evaluate(d, "--adapter", _adapter(d, None)), 1,
         r"^adapter: not an adapter folder \(adapter_config\.json but no adapter_model\.safetensors\)"),
    Case("route --adapter whose weights are cut short",
         lambda d: _route(d, "--model", "tiny", "--adapter", _adapter(d, _CUT_WEIGHTS)), 1,
         r"^adapter/adapter_model\.safetensors: damaged adapter \(\d+ bytes where its header describes \d+"),
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
    Case("analyze label --capability without --rubric", lambda d: ["analyze", "label", _trajectories(d),
                                                                   "--capabilities", "c.json", "-o", "runs",
                                                                   "--capability", "x"], 2,
         r"--capability selects capability blocks of a --rubric file", untouched=("runs",)),
    Case("analyze label -o a file", lambda d: ["analyze", "label", _trajectories(d), "--capabilities", "c.json", "-o",
                                               _a_file(d)], 1, r"^plain: error: is a file, not a folder"),
    Case("analyze select --rho 2", lambda d: ["analyze", "select", "runs", "-o", "s.json", "--rho", "2"], 2,
         r"argument --rho: must be a number between 0 and 1, got 2"),
    Case("analyze select -o a folder", lambda d: ["analyze", "select", "runs", "-o", _folder(d)], 1,
         r"^out: error: is a folder"),
    Case("analyze select -o onto its run file", lambda d: ["analyze", "select", _run_file(d), "-o", "r1.json"], 1,
         r"^r1\.json: error: is the input itself; name another file to write", untouched=("r1.json",)),
    Case("analyze select -o onto a link to its run file",
         lambda d: ["analyze", "select", _run_file(d), "-o", _link(d, "r1.json")], 1,
         r"^link: error: is the input r1\.json itself", untouched=("r1.json",)),
    Case("analyze select --chart onto its run file",
         lambda d: ["analyze", "select", _run_file(d), "-o", "s.json", "--chart", "r1.json"], 1,
         r"^r1\.json: error: is the input itself", untouched=("r1.json", "s.json")),
    Case("analyze discover -o onto its trajectories", lambda d: ["analyze", "discover", _trajectories(d), "-o",
                                                                 "t.jsonl"], 1,
         r"^t\.jsonl: error: is the input itself", untouched=("t.jsonl",)),
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
    Case("synth env without a capability", lambda d: ["synth", "env", "-o", "out"], 2,
         r"name the capability: --capability NAME --description TEXT, or --selected FILE"),
    Case("synth env --selected an empty selection",
         lambda d: ["synth", "env", "--selected", _toml(d, "[]", "selected.json"), "-o", "out"], 1,
         r"^selected\.json: error: lists no capability \(the selection kept none\)"),
    Case("synth rubric --schema a file without a schema",
         lambda d: ["synth", "rubric", "--schema", _toml(d, "", "empty.rubric"), "--description", "d", "-o",
                    "o.rubric"], 1,
         r"^empty\.rubric: error: declares no schema; --schema names a \.rubric file with a `schema` block"),
    Case("synth rubric --llm http without its server", lambda d: _synth_rubric(d, "--llm", "http"), 2,
         r"--llm http needs --base-url and --model"),
    Case("analyze discover --llm http without its server", lambda d: _discover(d, "--llm", "http"), 2,
         r"--llm http needs --base-url and --model"),
    Case("synth rubric -o onto its schema", lambda d: ["synth", "rubric", "--schema", _rubric(d), "--description",
                                                       "d", "-o", "door.rubric"], 1,
         r"^door\.rubric: error: is the input itself", untouched=("door.rubric",)),
    Case("synth rubric -o a folder", lambda d: ["synth", "rubric", "--schema", "toolenv", "--description", "d", "-o",
                                                _folder(d)], 1, r"^out: error: is a folder"),
    # train and pipeline
    Case("train a missing config", lambda d: ["train", "none.toml"], 1, r"^none\.toml: error: no such config file"),
    Case("train a config that is not UTF-8", lambda d: ["train", _toml(d, NOT_UTF8)], 1,
         r"^run\.toml:3:\d+: error: the file is not UTF-8"),
    Case("train a config with an unknown key", lambda d: ["train", _toml(d, UNKNOWN_KEY)], 1,
         r"^run\.toml:2:1: error: .*group_sise"),
    Case("train --out a file", lambda d: [*_train(d, f'[env.capability]\npath = "{_rubric_env(d)}"\n')[:2], "--out",
                                          _a_file(d)], 1, r"^plain: error: is a file, not a folder"),
    Case("train lora.targets naming no module", lambda d: _train(d, '[lora]\ntargets = ["nope_proj"]\n'), 1,
         r'^run\.toml:6:1: error: lora\.targets = \["nope_proj"\]: the model "tiny" has no module named nope_proj; '
         r"LoRA can adapt its layers named embed_tokens, q_proj, .* \(full names like model\.layers\.0\.self_attn",
         untouched=("run",)),
    Case("train a model that is none", lambda d: _train(d, "", "--set", "model.name=nonesuch"), 1,
         r'^--set model\.name=nonesuch: error: model\.name = "nonesuch": no model', untouched=("run",)),
    Case("train a model folder whose config.json is {}",
         lambda d: _train(d, "", "--set", f"model.name={_model_folder(d, '{}')}"), 1,
         r'^--set model\.name=model: error: model\.name = ".*/model": .*/model/config\.json names no "model_type"',
         untouched=("run",)),
    Case("train env.textworld.game that is no game",
         lambda d: _train(d, f'[env]\nkind = "textworld"\n[env.textworld]\ngame = "{_fake_game(d)}"\n'), 1,
         r'^run\.toml:8:1: error: env\.textworld\.game = ".*/game\.z8": not a TextWorld game', untouched=("run",)),
    Case("train env.capability.path missing", lambda d: _train(d, '[env.capability]\npath = "none.rubric"\n'), 1,
         r'^run\.toml:6:1: error: env\.capability\.path = ".*/none\.rubric": no such file; name a capability '
         r"environment's `\.rubric` file, e\.g\. \".*tool_calling_precision\.rubric\"", untouched=("run",)),
    Case("train env.capability.path a folder", lambda d: _train(d, f'[env.capability]\npath = "{_folder(d)}"\n'), 1,
         r'^run\.toml:6:1: error: env\.capability\.path = ".*/out": is a folder, not a file', untouched=("run",)),
    Case("train env.capability.path left to a default that is not there", lambda d: _train(d, ""), 1,
         r'^run\.toml: error: env\.capability\.path is not set, and its default, '
         r'"examples/envs/tool_calling_precision\.rubric" \(read as ".*/case\d+/examples/envs/'
         r'tool_calling_precision\.rubric"\), does not work: no such file', untouched=("run",)),
    Case("train the admissible mode on a tool environment",
         lambda d: _train(d, f'[env.capability]\npath = "{_rubric_env(d)}"\n[rollout]\naction_mode = "admissible"\n'),
         1, r'^run\.toml:8:1: error: rollout\.action_mode = "admissible": .*env\.kind = "capability" lists none',
         untouched=("run",)),
    Case("train the oracle credit on a tool environment",
         lambda d: _train(d, f'[env.capability]\npath = "{_rubric_env(d)}"\n[advantage]\nkind = "oracle"\n'),
         1, r'^run\.toml:8:1: error: advantage\.kind = "oracle": the oracle credit .*env\.kind = "capability" '
         r"records none", untouched=("run",)),
    Case("train a python factory that takes an argument",
         lambda d: _train(d, '[env]\nkind = "python"\n[env.python]\nfactory = "json:loads"\n'), 1,
         r'^run\.toml:8:1: error: env\.python\.factory = "json:loads": loads cannot be called with no arguments',
         untouched=("run",)),
    Case("train a python factory whose code raises",
         lambda d: _train(d, f'[env]\nkind = "python"\n[env.python]\nfactory = "{_raising_factory(d)}"\n'), 1,
         r'^run\.toml:8:1: error: env\.python\.factory = "raising_factory:make": make\(\) raised KeyError at '
         r".*raising_factory\.py:2: 'nope'", untouched=("run",)),
    Case("train a python factory that makes no environment",
         lambda d: ["train", _toml(d, NOT_AN_ENVIRONMENT), "--out", "run", "--quiet"], 1,
         r'^run\.toml:8:1: error: env\.python\.factory = "os:getcwd": getcwd\(\) made a str, not an environment',
         untouched=("run",)),
    Case("train --resume where no run is", lambda d: _train(d, f'[env.capability]\npath = "{_rubric_env(d)}"\n',
                                                             "--resume"), 1,
         r"^run: error: --resume: nothing to resume in run: it does not exist", untouched=("run",)),
    Case("train into a folder that holds a run", lambda d: _train(d, f'[env.capability]\npath = "{_rubric_env(d)}"\n')
         if (d / "run").mkdir() or (d / "run" / "metrics.jsonl").write_text("{}\n") else [], 1,
         r"^run already holds a run; pass --resume to continue it", untouched=("run",)),
    Case("pipeline a config that is not UTF-8", lambda d: ["pipeline", _toml(d, NOT_UTF8)], 1,
         r"^run\.toml:3:\d+: error: the file is not UTF-8"),
    Case("pipeline a missing config", lambda d: ["pipeline", "none.toml"], 1, r"^none\.toml: error: no such file"),
    # the other verbs
    *[Case(f"{verb} a missing rubric", (lambda d, verb=verb: [verb, "none.rubric"]), 1,
           r"^none\.rubric: error: no such file") for verb in ("check", "compile", "explain")],
    Case("score a missing rubric", lambda d: ["score", "none.rubric", "--trajectories", _trajectories(d)], 1,
         r"^none\.rubric: error: no such file"),
    Case("score -o of no format", lambda d: ["score", _rubric(d), "--trajectories", _trajectories(d), "-o", "e.csv"], 2,
         r"e\.csv: the output's name must end in"),
    Case("convert a file onto itself", lambda d: ["convert", _trajectories(d), "-o", "./t.jsonl"], 1,
         r"^t\.jsonl: error: is the input itself", untouched=("t.jsonl",)),
    Case("score a file without a rubric", lambda d: ["score", _toml(d, DOOR_RUBRIC.split("rubric ")[0], "s.rubric"),
                                                    "--trajectories", _trajectories(d)], 1,
         r"^s\.rubric: error: this file has no rubric block to score with \(it holds schema "),
    Case("score -o onto its trajectories", lambda d: ["score", _rubric(d), "--trajectories", _trajectories(d), "-o",
                                                     "t.jsonl"], 1,
         r"^t\.jsonl: error: is the input itself", untouched=("t.jsonl",)),
    Case("score -o onto a link to its trajectories",
         lambda d: ["score", _rubric(d), "--trajectories", _trajectories(d), "-o", _link(d, "t.jsonl", "l.jsonl")], 1,
         r"^l\.jsonl: error: is the input t\.jsonl itself", untouched=("t.jsonl",)),
    Case("compile -o onto its rubric", lambda d: ["compile", _rubric(d), "-o", "door.rubric"], 1,
         r"^door\.rubric: error: is the input itself", untouched=("door.rubric",)),
    Case("tau2 replay a db.json without its tables", lambda d: ["tau2", "replay", "--domain", "retail", "--task", "0",
                                                                "--data-dir", _tau2_data(d, "{}")], 1,
         r"tau2/retail/db\.json: not a retail database, missing table"),
    Case("tau2 replay --dump-db onto the domain's database",
         lambda d: ["tau2", "replay", "--domain", "retail", "--task", "0", "--data-dir", _tau2_data(d, "{}"),
                    "--dump-db", "tau2/retail/db.json"], 1,
         r"^tau2/retail/db\.json: error: is the input itself", untouched=("tau2/retail/db.json",)),
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
]

STEPS = {"analyze": ("discover", "label", "select"), "synth": ("env", "rubric"), "tau2": ("replay",),
         "toolsandbox": ("replay",)}
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
    """A file's bytes (a folder's: its entries' names); None when it does not exist."""
    if path.is_dir():
        return "\n".join(sorted(entry.name for entry in path.iterdir())).encode()
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
