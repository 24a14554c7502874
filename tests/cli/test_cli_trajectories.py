"""`tracec score` on hostile, empty and columnar trajectories: exit 1 with a located message and nothing written, or
a valid output; never a traceback."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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
  bind goal: entity = match(instruction, /reach (\\w+)/, 1)
  evidence   moves   "changes room":       changed(room) and next.room == goal
  execution  opens   "opens the door":     act.verb == open and "door" in next.open
  invalidity stuck   "the game says no":   contains(next.note, "can't")
  context prev.room
}
"""
GOOD = {"episode": "a", "instruction": "reach yard", "states": [{"room": "hall"}, {"room": "yard"}],
        "actions": [{"verb": "go"}]}

HOSTILE = {
    "a 400-digit env_reward": '{"episode": "x", "env_reward": 1' + "0" * 400 + ', "states": [{}], "actions": []}',
    "a 5000-digit number": '{"episode": "x", "states": [{"room": ' + "7" * 5000 + '}], "actions": []}',
    "arrays nested 10,000 deep": '{"episode": "x", "states": [' + "[" * 10000 + "]" * 10000 + '], "actions": []}',
    "a lone surrogate in an entity": '{"episode": "x", "states": [{}, {"room": "\\ud800"}], "actions": [{}]}',
    "a lone surrogate in a set": '{"episode": "x", "states": [{}, {"open": ["door", "\\udfff"]}], "actions": [{}]}',
    "a lone surrogate in matched text":
        '{"episode": "x", "instruction": "reach \\ud800", "states": [{}], "actions": []}',
    "a lone surrogate in an episode id": '{"episode": "\\ud800", "states": [{}], "actions": []}',
    "a lone surrogate in a text fact": '{"episode": "x", "states": [{}, {"note": "\\ud800"}], "actions": [{}]}',
    "a reused episode id": json.dumps(GOOD) + "\n" + json.dumps(GOOD),
}


@pytest.fixture
def rubric(tmp_path: Path) -> Path:
    path = tmp_path / "door.rubric"
    path.write_text(RUBRIC)
    return path


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_hostile_trajectories_exit_1_with_a_location_and_write_nothing(rubric, tmp_path, capsys, case, suffix):
    trajectories = tmp_path / "t.jsonl"
    trajectories.write_text(json.dumps(GOOD | {"episode": "first"}) + "\n" + HOSTILE[case] + "\n")
    out = tmp_path / f"out{suffix}"
    assert main(["score", str(rubric), "--trajectories", str(trajectories), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert re.match(rf"{re.escape(str(trajectories))}:\d+:\d+: error: ", err) and "Traceback" not in err, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_an_empty_trajectory_file_gives_a_valid_empty_output(rubric, tmp_path):
    trajectories = tmp_path / "t.jsonl"
    trajectories.write_text("\n")
    for suffix in (".jsonl", ".parquet"):
        out = tmp_path / f"out{suffix}"
        assert main(["score", str(rubric), "--trajectories", str(trajectories), "-o", str(out)]) == 0
    assert (tmp_path / "out.jsonl").read_text() == ""
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.num_rows == 0 and table.column_names == ["episode", "task", "t", "ops", "r_F", "r_B", "r_TRCA", "R",
                                                          "A_E", "A_S", "A"]
    assert [field.name for field in table.schema.field("ops").type] == ["moves", "opens", "stuck"]


def test_eval_reads_parquet_trajectories_and_writes_jsonl_to_stdout(rubric, tmp_path, capsys):
    trajectories = tmp_path / "t.jsonl"
    trajectories.write_text(json.dumps(GOOD) + "\n")
    assert main(["convert", str(trajectories), "-o", str(tmp_path / "t.parquet")]) == 0
    capsys.readouterr()
    assert main(["score", str(rubric), "--trajectories", str(tmp_path / "t.parquet")]) == 0
    from_parquet = capsys.readouterr().out
    assert main(["score", str(rubric), "--trajectories", str(trajectories)]) == 0
    assert capsys.readouterr().out == from_parquet
    assert json.loads(from_parquet)["ops"] == {"moves": 1, "opens": 0, "stuck": 0}


# What the `tracec` script does, then the top-level packages it ended up with, as the last line of stderr.
ENTRY = ("import json, sys; from tracec.cli import main; code = main(sys.argv[1:]); "
         "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr); sys.exit(code)")


def test_eval_of_parquet_with_the_c_kernel_imports_neither_pandas_numba_nor_cffi(rubric, tmp_path):
    """Issue 21: a command imports what it needs. pyarrow's numpy conversions import pandas, Numba is only the
    fallback of the fixed kernels, and the C kernel is opened with ctypes."""
    trajectories = tmp_path / "t.jsonl"
    trajectories.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD | {"episode": "b", "env_reward": 1.0}) + "\n")
    assert main(["convert", str(trajectories), "-o", str(tmp_path / "t.parquet")]) == 0
    out = tmp_path / "out.parquet"
    done = subprocess.run([sys.executable, "-c", ENTRY, "score", str(rubric), "--trajectories",
                           str(tmp_path / "t.parquet"), "-o", str(out), "--backend", "c"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "pyarrow" in loaded and not loaded & {"pandas", "numba", "llvmlite", "cffi"}, loaded
    assert pq.read_table(out).num_rows == 2
