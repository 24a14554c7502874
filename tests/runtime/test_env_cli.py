"""`tracec env`: describe, validate (exit 1 with the reason when a check fails), play, and the error exits."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tracec.runtime.env.cli import env_command

REPO = Path(__file__).resolve().parents[2]
TRIPS = REPO / "examples" / "envs" / "structured_data_reasoning.rubric"


def test_describe_and_validate(capsys: pytest.CaptureFixture[str]) -> None:
    assert env_command([str(TRIPS), "--seed", "3"]) == 0
    assert capsys.readouterr().out.startswith("environment cancel_trip: ")
    assert env_command(["validate", str(TRIPS), "--seeds", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:2] == ["cancel_trip", "5"] and out[-1] == "ok"


def test_failed_validation_exits_1_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.rubric"
    broken.write_text(TRIPS.read_text().replace("0.6 * state + 0.4 * report", "0.5 * state + 0.4 * report"))
    assert env_command(["validate", str(broken), "--seeds", "3"]) == 1
    assert capsys.readouterr().out.splitlines()[2] == "FAILED: seed 0: the gold solution scores 0.900 (state 1, report 1)"


def test_play_reads_turns_from_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("I am done\n"))
    assert env_command([str(TRIPS), "--seed", "1", "--play"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "steps 1  state 0  report 0  reward 0.000"


def test_errors_exit_1_and_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.rubric"
    bad.write_text(TRIPS.read_text().replace("status == active)", "status == actve)"))
    assert env_command([str(bad)]) == 1
    assert f"{bad}:8:61: error: `actve` is not a member" in capsys.readouterr().err
    assert env_command([str(tmp_path / "none.rubric")]) == 1
    assert "No such file or directory" in capsys.readouterr().err
    assert env_command([]) == 2
    assert env_command(["validate", str(TRIPS), "--seeds", "0"]) == 2
    assert env_command([str(TRIPS), "--max-steps", "0", "--play"]) == 2
