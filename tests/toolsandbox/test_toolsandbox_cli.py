"""`tracec toolsandbox replay` (a scenario's gold replay, its similarity, the world it leaves; every scenario's) and
`tracec evaluate --target toolsandbox` with the tiny model: the pass-rate table, then ToolSandbox's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tracec.cli import main


def test_a_gold_replay_prints_the_episode_its_similarity_and_the_world(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "world.json"
    assert main(["toolsandbox", "replay", "--scenario", "turn_on_wifi_low_battery_mode", "--dump-world", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "user: Turn on wifi"
    assert "ok  set_low_battery_mode_status({\"on\": false}) -> None" in lines
    assert lines[-2] == "user: end_conversation()"
    assert lines[-1].startswith("similarity: 1.000 (milestones 1.000, minefields 0.000), turns: ")
    assert lines[-1].endswith(", perfect")
    world = json.loads(out.read_text())
    assert set(world) == {"setting", "contact", "messaging", "reminder"}
    assert world["setting"][0]["wifi"] is True and world["setting"][0]["low_battery_mode"] is False


def test_every_gold_replay_is_perfect(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["toolsandbox", "replay", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "perfect: 101/101" and len(lines) == 102
    assert all(line.startswith("1.000 ") for line in lines[:-1])


def test_replay_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["toolsandbox", "replay", "--scenario", "nope"]) == 1
    assert "unknown ToolSandbox scenario 'nope' (101 transcribed" in capsys.readouterr().err
    assert main(["toolsandbox", "replay", "--scenario", "convert_currency"]) == 1
    assert "'convert_currency' is left out: its score needs the web tool convert_currency" in capsys.readouterr().err
    assert main(["toolsandbox", "replay", "--all", "--dump-world", str(tmp_path / "w.json")]) == 2
    assert main(["toolsandbox", "replay", "--scenario", "get_wifi", "--dump-world", str(tmp_path)]) == 1
    assert "is a folder" in capsys.readouterr().err
    assert main(["toolsandbox", "replay"]) == 2  # --scenario or --all


def test_evaluate_reports_the_table_and_toolsandbox_s_numbers(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", "--model", "tiny", "--max-new-tokens", "6", "--target", "toolsandbox", "--scenario", "wifi_off",
            "--scenario", "turn_on_wifi_low_battery_mode", "--call-format", "text", "--conditions", "base",
            "--first-seed", "0", "--tasks", "3", "--max-turns", "2", "-o", str(tmp_path / "eval")]
    assert main(argv) == 0  # the default user: the base model as the benchmark's user simulator
    captured = capsys.readouterr()
    assert "| base | 0.0% (0/2) | 0.0% (0/2) |" in captured.out  # two scenarios selected: the tasks are cut to them
    assert "| base | all | 2 |" in captured.out and "| base | state_dependency | 1 |" in captured.out
    assert "toolsandbox.md, toolsandbox.json" in captured.err
    saved = json.loads((tmp_path / "eval" / "toolsandbox.json").read_text())
    assert saved["table"]["base"]["single_tool_call"]["count"] == 1
    results = [json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert [r["task"] for r in results] == ["toolsandbox/wifi_off", "toolsandbox/turn_on_wifi_low_battery_mode"]
    assert main([*argv[:-2], "--scenario", "wifi_of", "-o", str(tmp_path / "e2")]) == 2
    assert "--scenario: no ToolSandbox scenario or category 'wifi_of'; did you mean 'wifi_off'?" in \
        capsys.readouterr().err
    assert main([*argv[:-2], "--first-seed", "5", "-o", str(tmp_path / "e3")]) == 1
    assert "toolsandbox has 2 scenarios selected; a first seed of 5 leaves none" in capsys.readouterr().err
