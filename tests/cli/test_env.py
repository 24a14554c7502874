"""`tracec env`: describe, play and validate an environment (exit 1 with the reason when validation fails), and the
error exits."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tracec.cli import main
from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.envs.config import EnvSection
from tracec.trace_rl.envs.toolcall import format_call, format_tool_call

REPO = Path(__file__).resolve().parents[2]
TRIPS = REPO / "tests" / "data" / "cancel_trip.rubric"


def test_describe_shows_the_seeds_task_and_gold_solution_in_training_s_call_format(
        capsys: pytest.CaptureFixture[str]) -> None:
    scenario = load_environment(str(TRIPS)).scenario(3)
    assert main(["env", str(TRIPS), "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert f"  {scenario.task}\n" in out
    trained_in = EnvSection(kind="textworld").call_format  # `tracec train`'s unless its config says otherwise
    assert trained_in == "native" and f"gold solution ({trained_in} calls):\n" in out
    native = "".join(f"  {line}\n" for c in scenario.gold_calls
                     for line in format_call(c.name, c.arguments, trained_in).splitlines())
    assert native in out and "<tool_call>" in native
    assert main(["env", str(TRIPS), "--seed", "3", "--call-format", "text"]) == 0
    out = capsys.readouterr().out
    assert "gold solution (text calls):\n" in out
    assert "".join(f"  {format_tool_call(c.name, c.arguments)}\n" for c in scenario.gold_calls) in out


def test_validate_passes_and_a_broken_reward_fails_with_the_reason(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "validate", str(TRIPS), "--seeds", "5"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "ok"
    broken = tmp_path / "broken.rubric"
    broken.write_text(TRIPS.read_text().replace("0.6 * state + 0.4 * report", "0.5 * state + 0.4 * report"))
    assert main(["env", "validate", str(broken), "--seeds", "3"]) == 1
    assert "seed 0: the gold solution scores 0.900 (state 1, report 1)" in capsys.readouterr().out


def test_play_scores_the_turns_read_from_stdin(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    scenario = load_environment(str(TRIPS)).scenario(1)
    gold = [format_tool_call(c.name, c.arguments) for c in scenario.gold_calls]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join([*gold, f"Done, the refund is {scenario.report[0]}."])))
    assert main(["env", str(TRIPS), "--seed", "1", "--play"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("state 1  report 1  reward 1.000")
    monkeypatch.setattr("sys.stdin", io.StringIO("I am done\n"))
    assert main(["env", str(TRIPS), "--seed", "1", "--play"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "steps 1  state 0  report 0  reward 0.000"


def test_errors_exit_1_and_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.rubric"
    bad.write_text(TRIPS.read_text().replace("and status == active)", "and status == actve)"))
    line = next(n for n, text in enumerate(bad.read_text().splitlines(), 1) if "actve" in text)
    assert main(["env", str(bad)]) == 1
    assert f"{bad}:{line}:" in capsys.readouterr().err
    assert main(["env", str(tmp_path / "none.rubric")]) == 1
    assert capsys.readouterr().err == f"{tmp_path / 'none.rubric'}: error: no such file or directory\n"
    for argv in ([], ["validate"], ["validate", str(TRIPS), "--seeds", "0"], [str(TRIPS), "--max-steps", "0", "--play"],
                 [str(TRIPS), "--seeds", "3"], ["validate", str(TRIPS), "--play"], ["a", "b"]):
        assert main(["env", *argv]) == 2, argv
