"""The `tracec` command line: one place maps errors to exit codes, a command is one registration, located errors
without tracebacks, outputs written whole or not at all, `--version`, and the shipped examples found from anywhere."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from cli_fixtures import DOOR_RUBRIC, run_tracec
from tracec.cli import Command, main
from tracec.compiler.backends import compile_kernel
from tracec.compiler.c_backend import load_artifact
from tracec.compiler.load import load_rubric
from tracec.runtime.facts.fact_batch import build_fact_batch
from tracec.runtime.facts.trajectories.jsonl import read_trajectories

import tracec
from tracec import cli


def test_check_reports_ok_and_errors_with_location(files, tmp_path, capsys):
    rubric, _ = files
    assert main(["check", str(rubric)]) == 0
    assert "ok (1 schemas, 1 rubrics" in capsys.readouterr().out
    bad = tmp_path / "bad.rubric"
    bad.write_text(DOOR_RUBRIC.replace("act.verb == wait", "act.verb == wiat"))
    assert main(["check", str(rubric), str(bad)]) == 1
    captured = capsys.readouterr()
    assert f"{bad}:9:" in captured.err and "did you mean `wait`?" in captured.err and "^^^^" in captured.err
    assert "Traceback" not in captured.err


def test_usage_errors_exit_2(files, capsys):
    rubric, trajectories = files
    assert main([]) == 2
    assert main(["compile", str(rubric), "--backend", "fortran"]) == 2
    assert main(["compile", str(rubric), "--backend", "numba", "-o", "x.so"]) == 2
    assert "use it with --backend c" in capsys.readouterr().err
    assert main(["score", str(rubric), "--trajectories", str(trajectories), "-o", "scores.txt"]) == 2
    assert "must end in .jsonl or .parquet" in capsys.readouterr().err


def test_missing_file_is_a_user_error(capsys):
    assert main(["explain", "no/such.rubric"]) == 1
    assert capsys.readouterr().err == "no/such.rubric: error: no such file or directory\n"


def test_version_is_the_package_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"tracec {tracec.__version__}\n"
    assert importlib.metadata.version("tracec") == tracec.__version__  # pyproject reads it from tracec/__init__


# A command module as another engineer would write one: arguments, a run, and its library's own user errors.
PLUGIN = '''
class RecipeError(ValueError):
    pass

USER_ERRORS = (RecipeError,)

def add_arguments(parser):
    parser.add_argument("what")

def run(args):
    from tracec.cli.errors import UsageError, UserError
    if args.what == "ok":
        print("done")
        return 0
    if args.what == "user":
        raise UserError("the recipe is missing", "cake.toml")
    if args.what == "usage":
        raise UsageError("--eggs needs --flour")
    if args.what == "library":
        raise RecipeError("cake.toml:3:7: error: unknown key `sugr`")
    if args.what == "interrupt":
        raise KeyboardInterrupt
    raise RuntimeError("a bug")
'''


@pytest.fixture
def bake(tmp_path, monkeypatch):
    (tmp_path / "tracec_test_bake.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tracec_test_bake", raising=False)  # each test imports it afresh
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, Command("bake", "bake a cake", "tracec_test_bake")))


@pytest.mark.parametrize(
    ("what", "code", "err"),
    [
        ("ok", 0, ""),
        ("user", 1, "cake.toml: error: the recipe is missing\n"),
        ("usage", 2, "tracec bake: error: --eggs needs --flour\n(see `tracec bake --help`)\n"),
        ("library", 1, "cake.toml:3:7: error: unknown key `sugr`\n"),
        ("interrupt", 130, "tracec bake: interrupted\n"),
    ],
)
def test_a_registered_command_gets_every_exit_code(bake, capsys, what, code, err):
    assert main(["bake", what]) == code
    assert capsys.readouterr().err == err


def test_a_command_bug_is_an_internal_error_with_its_traceback(bake, capsys):
    assert main(["bake", "crash"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("tracec: internal error; please report it") and "RuntimeError: a bug" in err


def test_help_lists_every_command_and_imports_only_the_one_that_runs(bake, capsys):
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    assert all(command.name in listing for command in cli.COMMANDS)
    assert "tracec_test_bake" not in sys.modules  # listed from its registration alone
    assert main(["bake", "--help"]) == 0 and "tracec_test_bake" in sys.modules
    code = "import sys; from tracec.cli import main; main(['check', '--help']); print(sorted(m for m in " \
           "('numba', 'torch', 'pyarrow', 'tracec.runtime.scoring') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]"


def test_explain_gives_each_operator_its_category_and_weight(files, capsys):
    rubric, _ = files
    assert main(["explain", str(rubric)]) == 0
    out = capsys.readouterr().out
    table = {}
    for line in out.splitlines()[3:7]:
        name, category, weight, description = line.split(maxsplit=3)
        table[name] = (category, float(weight), description)
    # budget/M_c: one evidence and one execution operator get their whole budget, two invalidity ones half each
    assert table == {"moves": ("evidence", 1.0, "changes room"), "opens": ("execution", 1.0, "opens the door"),
                     "waits": ("invalidity", 0.5, "waits"), "stuck": ("invalidity", 0.5, "the game says no")}
    assert "lift.0: bool = contains(next.note, \"can't\")" in out  # the text test is lifted into a fact


def test_score_writes_one_record_per_step(files, tmp_path):
    rubric, trajectories = files
    out = tmp_path / "eval.jsonl"
    assert main(["score", str(rubric), "--trajectories", str(trajectories), "-o", str(out), "--backend", "interp"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 6
    assert set(records[0]) == {"episode", "task", "t", "ops", "r_F", "r_B", "r_TRCA", "R", "A_E", "A_S", "A"}
    assert records[0]["ops"] == {"moves": 0, "opens": 1, "waits": 0, "stuck": 0}
    assert [r["t"] for r in records if r["episode"] == "b"] == [0, 1, 2]
    assert records[2]["ops"]["stuck"] == 1 and records[2]["r_F"] < 0


def test_the_old_verb_eval_is_score(files, tmp_path, capsys):
    rubric, trajectories = files
    written = []
    for verb in ("score", "eval"):
        out = tmp_path / f"{verb}.jsonl"
        assert main([verb, str(rubric), "--trajectories", str(trajectories), "-o", str(out)]) == 0
        written.append(out.read_text())
    assert written[0] == written[1] and len(written[0].splitlines()) == 6
    assert main(["eval", str(rubric), "--trajectories", str(trajectories), "-o", "e.csv"]) == 2
    assert "tracec score: error" in capsys.readouterr().err  # a mistake is named by the verb's one name


def test_score_parquet_matches_jsonl(files, tmp_path):
    rubric, trajectories = files
    assert main(["score", str(rubric), "--trajectories", str(trajectories), "-o", str(tmp_path / "e.jsonl")]) == 0
    assert main(["score", str(rubric), "--trajectories", str(trajectories), "-o", str(tmp_path / "e.parquet")]) == 0
    rows = pq.read_table(tmp_path / "e.parquet").to_pylist()
    assert rows == [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]


def test_a_bad_trajectory_line_leaves_no_output(files, tmp_path, capsys):
    rubric, trajectories = files
    out = tmp_path / "eval.jsonl"
    out.write_text("previous results\n")
    broken = tmp_path / "broken.jsonl"
    lines = trajectories.read_text().splitlines()
    broken.write_text(lines[0] + "\n" + lines[1][:-9] + "\n")
    assert main(["score", str(rubric), "--trajectories", str(broken), "-o", str(out)]) == 1
    assert f"{broken}:2:" in capsys.readouterr().err
    assert out.read_text() == "previous results\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_compile_c_artifact_scores_like_the_interpreter(files, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEC_CACHE_DIR", str(tmp_path / "cache"))
    rubric, trajectories = files
    artifact = tmp_path / "door.so"
    assert main(["compile", str(rubric), "--backend", "c", "-o", str(artifact)]) == 0
    compiled = load_rubric(rubric.read_text(), str(rubric))
    batch = build_fact_batch(read_trajectories(trajectories), compiled.plan)
    fired, keys = load_artifact(artifact).run(batch.columns, batch.n_transitions)  # no compiler, no cache
    expected, expected_keys = compile_kernel(compiled.program, "interp", None).run(batch.columns, batch.n_transitions)
    np.testing.assert_array_equal(fired, expected)
    np.testing.assert_array_equal(keys, expected_keys)


def test_env_prints_the_seeds_task(repo_dir, capsys):
    from tracec.trace_rl.envs.capability import load_environment

    path = repo_dir / "examples" / "envs" / "structured_data_reasoning.rubric"
    program = load_environment(str(path))
    printed = {}
    for seed in (3, 4):
        assert main(["env", str(path), "--seed", str(seed)]) == 0
        printed[seed] = capsys.readouterr().out
        assert f"  {program.scenario(seed).task}\n" in printed[seed]
    assert printed[3] != printed[4]


def _named_default(help_text: str) -> str:
    flat = " ".join(help_text.split())
    found = re.search(r"\$TRACEC_TAU2_DATA, .*?; (now (\S+)|none found now)\)", flat)
    assert found, flat
    return found.group(2) or ""


def test_tau2_replay_help_names_the_default_it_then_uses(shared_dir, tmp_path, monkeypatch, capsys):
    data = shared_dir / "data" / "tau2"
    monkeypatch.setenv("TRACEC_TAU2_DATA", str(data))
    assert main(["tau2", "replay", "--help"]) == 0
    assert Path(_named_default(capsys.readouterr().out)) == data
    assert main(["tau2", "replay", "--domain", "retail", "--task", "0"]) == 0  # no --data-dir: that default
    assert "db hash: " in capsys.readouterr().out
    monkeypatch.setenv("TRACEC_TAU2_DATA", str(tmp_path))  # a folder without the data: said, and refused alike
    assert main(["tau2", "replay", "--help"]) == 0
    assert _named_default(capsys.readouterr().out) == ""
    assert main(["tau2", "replay", "--domain", "retail", "--task", "0"]) == 1
    assert "tau2 data not found" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_trains_evaluates_and_plots_from_any_directory(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    argv = ["demo", "--workdir", "w", "--train-games", "3", "--eval-games", "1", "--iterations", "2",
            "--eval-every", "1", "--groups", "2", "--group-size", "2", "--trace-iterations", "1",
            "--trace-pool-games", "12"]
    result = run_tracec(argv, cwd=elsewhere, env={"TRACEC_CACHE_DIR": str(tmp_path / "cache")}, cpu_limit=900,
                        timeout=900)
    assert result.code == 0, result.err
    summary = json.loads((elsewhere / "w" / "learning.json").read_text())
    for method in ("grpo", "trca"):
        points = summary["curves"][method]["points"]
        assert [p["rollouts"] for p in points] == [0, 4, 8]  # evaluated before training and after each iteration
        assert all(0.0 <= p["success"] <= 1.0 and 0.0 <= p["reward"] <= 1.0 for p in points)
        metrics = [json.loads(line)
                   for line in (elsewhere / "w" / "runs" / method / "metrics.jsonl").read_text().splitlines()]
        assert [m["iteration"] for m in metrics] == [1, 2]
    assert summary["curves"]["trca"]["constant_fraction"] < 1.0  # TRCA's step rewards: its groups are rarely constant
    assert (elsewhere / "w" / "learning.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = re.findall(r"^ +(\d+) +([01]\.\d{3}) \[([01]\.\d{3}), ([01]\.\d{3})\] +([01]\.\d{3}) \[", result.out,
                       flags=re.MULTILINE)
    assert [int(row[0]) for row in table] == [0, 4, 8]
    assert all(float(low) <= float(mid) <= float(high) for _, mid, low, high, _ in table)  # each with its interval
    assert "sparse GRPO" in result.out and "GRPO + TRCA" in result.out
    # the headline: the pre-registered primary metric (the area) first, then the final
    assert re.search(r"TRCA - GRPO area under the held-out success curve \(the primary metric\): [+-]\d\.\d{3} \[.*\n"
                     r" +TRCA - GRPO held-out success at 8 rollouts: [+-]\d\.\d{3} \[", result.out)
    # the TRACE section: the sparse-GRPO run as its base agent, selection, and the table or why there is none
    trace = summary["trace"]
    assert (elsewhere / "w" / "trace" / "base-agent" / "base_agent.json").is_file()
    assert "selection (mean coverage, mean Delta, runs passed)" in result.out
    if trace["kept"]:
        assert set(trace["conditions"]) >= {"base", "GRPO on the target", "TRACE routed", "oracle router"}
        assert re.search(r"TRACE routed - GRPO on the target, equal rollouts: [+-]\d\.\d{3} \[", result.out)
    else:
        assert "selection kept no capability" in result.out
    assert re.search(r"GRPO \+ TRCA: \d+ optimizer steps, ratio p99 <= \d", result.out)  # the trust region
    assert "Warning" not in result.out + result.err and "Loading weights" not in result.err


@pytest.mark.slow
def test_the_wheel_ships_every_example(repo_dir, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(repo_dir)], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("tracec-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("tracec/examples/")}
    expected = {f"tracec/examples/{p.relative_to(repo_dir / 'examples')}"
                for p in (repo_dir / "examples").rglob("*.rubric")}
    assert len(expected) >= 13 and expected <= shipped


def test_auto_builds_the_c_kernel_and_falls_back_to_numba_without_a_compiler(files, tmp_path, monkeypatch, capsys):
    """`auto` (the default): the C kernel where the compiler builds it; with $CC naming no program, the Numba kernel,
    the same outputs; `--backend c` then is a located user error naming the compiler, not a traceback."""
    import pyarrow.parquet as pq

    rubric, trajectories = files
    monkeypatch.setenv("TRACEC_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["compile", str(rubric)]) == 0
    assert "-> c kernel in" in capsys.readouterr().out
    assert main(["score", str(rubric), "--trajectories", str(trajectories), "-o", str(tmp_path / "c.parquet")]) == 0
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("TRACEC_CACHE_DIR", str(tmp_path / "other-cache"))
    assert main(["compile", str(rubric)]) == 0
    assert "-> numba kernel in" in capsys.readouterr().out
    assert main(["score", str(rubric), "--trajectories", str(trajectories), "-o", str(tmp_path / "n.parquet")]) == 0
    assert pq.read_table(tmp_path / "c.parquet").equals(pq.read_table(tmp_path / "n.parquet"))
    capsys.readouterr()
    assert main(["compile", str(rubric), "--backend", "c"]) == 1
    err = capsys.readouterr().err
    assert "no C compiler" in err and "no-such-compiler" in err and "Traceback" not in err
    monkeypatch.setenv("CC", "false")  # a compiler that rejects everything
    assert main(["compile", str(rubric), "--backend", "c"]) == 1
    assert "`false -O3" in capsys.readouterr().err
