"""The `tracec` command line: exit codes, located errors without tracebacks, outputs written whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tracec.cli import main

RUBRIC = """
schema door {
  state { room: entity  open: set(entity)  note: text }
  action { verb: enum(go, open, wait)  obj: entity }
}
rubric door_rubric for door {
  evidence   moves   "changes room":       changed(room)
  execution  opens   "opens the door":     act.verb == open and "door" in next.open
  invalidity waits   "waits":              act.verb == wait
  invalidity stuck   "the game says no":   contains(next.note, "can't")
  context prev.room
}
"""


def _episode(name: str, task: str, verbs: list[str], reward: float) -> dict:
    states = [{"room": "hall", "open": [], "note": ""}]
    for verb in verbs:
        last = dict(states[-1])
        if verb == "open":
            last["open"] = ["door"]
        if verb == "go":
            last["room"] = "yard" if last["room"] == "hall" else "hall"
        last["note"] = "You can't." if verb == "wait" else "ok"
        states.append(last)
    actions = [{"verb": v, "obj": "door"} for v in verbs]
    return {"episode": name, "task": task, "instruction": "leave", "states": states, "actions": actions,
            "env_reward": reward, "success": reward > 0}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    rubric = tmp_path / "door.rubric"
    rubric.write_text(RUBRIC)
    episodes = [
        _episode("a", "t1", ["open", "go"], 1.0),
        _episode("b", "t1", ["wait", "wait", "go"], 0.0),
        _episode("c", "t2", ["go"], 0.0),
    ]
    trajectories = tmp_path / "t.jsonl"
    trajectories.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    return rubric, trajectories


def test_check_reports_ok_and_errors_with_location(files, tmp_path, capsys):
    rubric, _ = files
    assert main(["check", str(rubric)]) == 0
    assert "ok (1 schemas, 1 rubrics" in capsys.readouterr().out
    bad = tmp_path / "bad.rubric"
    bad.write_text(RUBRIC.replace("act.verb == wait", "act.verb == wiat"))
    assert main(["check", str(rubric), str(bad)]) == 1
    captured = capsys.readouterr()
    assert f"{bad}:9:" in captured.err and "did you mean `wait`?" in captured.err and "^^^^" in captured.err
    assert "Traceback" not in captured.err


def test_usage_errors_exit_2(files, capsys):
    rubric, _ = files
    assert main([]) == 2
    assert main(["compile", str(rubric), "--backend", "fortran"]) == 2
    assert main(["compile", str(rubric), "-o", "x.so"]) == 2
    assert "use it with --backend c" in capsys.readouterr().err


def test_missing_file_is_a_user_error(capsys):
    assert main(["explain", "no/such.rubric"]) == 1
    assert "No such file or directory: no/such.rubric" in capsys.readouterr().err


def test_explain_prints_the_operator_table(files, capsys):
    rubric, _ = files
    assert main(["explain", str(rubric)]) == 0
    out = capsys.readouterr().out
    assert "opens     execution   1       opens the door" in out
    assert "waits     invalidity  0.5     waits" in out
    assert "lift.0: bool = contains(next.note, \"can't\")" in out


def test_eval_writes_one_record_per_step(files, tmp_path):
    rubric, trajectories = files
    out = tmp_path / "eval.jsonl"
    assert main(["eval", str(rubric), "--trajectories", str(trajectories), "-o", str(out), "--backend", "interp"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 6
    assert set(records[0]) == {"episode", "task", "t", "ops", "r_F", "r_B", "r_TRCA", "R", "A_E", "A_S", "A"}
    assert records[0]["ops"] == {"moves": 0, "opens": 1, "waits": 0, "stuck": 0}
    assert [r["t"] for r in records if r["episode"] == "b"] == [0, 1, 2]
    assert records[2]["ops"]["stuck"] == 1 and records[2]["r_F"] < 0


def test_eval_parquet_matches_jsonl(files, tmp_path):
    rubric, trajectories = files
    assert main(["eval", str(rubric), "--trajectories", str(trajectories), "-o", str(tmp_path / "e.jsonl")]) == 0
    assert main(["eval", str(rubric), "--trajectories", str(trajectories), "-o", str(tmp_path / "e.parquet")]) == 0
    rows = pq.read_table(tmp_path / "e.parquet").to_pylist()
    assert rows == [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]


def test_a_bad_trajectory_line_leaves_no_output(files, tmp_path, capsys):
    rubric, trajectories = files
    out = tmp_path / "eval.jsonl"
    out.write_text("previous results\n")
    broken = tmp_path / "broken.jsonl"
    lines = trajectories.read_text().splitlines()
    broken.write_text(lines[0] + "\n" + lines[1][:-9] + "\n")
    assert main(["eval", str(rubric), "--trajectories", str(broken), "-o", str(out)]) == 1
    assert f"{broken}:2:" in capsys.readouterr().err
    assert out.read_text() == "previous results\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_compile_c_artifact_is_written(files, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRACEC_CACHE_DIR", str(tmp_path / "cache"))
    rubric, _ = files
    artifact = tmp_path / "door.so"
    assert main(["compile", str(rubric), "--backend", "c", "-o", str(artifact)]) == 0
    assert artifact.is_file() and "door_rubric: 4 operators" in capsys.readouterr().out


def test_env_prints_the_task(repo_dir, capsys):
    env = repo_dir / "examples" / "envs" / "structured_data_reasoning.rubric"
    assert main(["env", str(env), "--seed", "3"]) == 0
    first = capsys.readouterr().out
    assert main(["env", str(env), "--seed", "3"]) == 0
    assert capsys.readouterr().out == first and first.strip()
