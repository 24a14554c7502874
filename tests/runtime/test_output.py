"""Results to disk: JSONL lines are exactly `json.dumps` of each step's record and Parquet rows are those records;
non-finite rewards are refused before anything is written; an empty batch gives an empty output with its columns."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from tracec.dsl.errors import DataError
from tracec.runtime.facts.trajectories.jsonl import Episode
from tracec.runtime.facts.trajectories.records import write_records
from tracec.runtime.output import write_scores
from tracec.runtime.scoring import RubricScorer

SOURCE = """
schema chat { state { solved: bool } action { tool: entity  ok: bool } }
rubric helpful for chat {
  evidence   solves  "the problem gets solved":  next.solved and not prev.solved
  execution  lookup  "calls the lookup tool":    act.tool == "lookup" and act.ok
  invalidity broken  "a call fails":             not act.ok
  context prev.solved
}
"""


def _episodes() -> list[Episode]:
    out = []
    for i in range(6):
        calls = [("lookup", i % 2 == 0), ("answer", True), ("lookup", i % 3 == 0)][: 1 + i % 3]
        states = [{"solved": k >= 2} for k in range(len(calls) + 1)]
        out.append(Episode(f"é{i}\u2603", f"t{i % 2}", "help", states, [{"tool": t, "ok": ok} for t, ok in calls],
                           float(i % 2), None))
    return out + [Episode("empty", "t0", "", [{}], [], 0.0, None)]


@pytest.fixture(scope="module")
def result():
    return RubricScorer.from_source(SOURCE, backend="interp").score(_episodes())


def test_jsonl_lines_are_json_dumps_of_each_record(result, tmp_path: Path) -> None:
    out = tmp_path / "e.jsonl"
    write_scores(result, out)
    assert out.read_text(encoding="utf-8").splitlines() == [json.dumps(r) for r in result.records()]


def test_parquet_rows_are_the_records(result, tmp_path: Path) -> None:
    out = tmp_path / "e.parquet"
    write_scores(result, out)
    table = pq.read_table(out)
    assert table.to_pylist() == list(result.records())
    assert table.schema.field("ops").type.num_fields == 3 and str(table.schema.field("A").type) == "double"


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_non_finite_reward_is_refused_and_nothing_is_written(result, tmp_path: Path, suffix: str) -> None:
    bad_a = result.rewards.A.copy()
    bad_a[3] = np.nan
    broken = replace(result, rewards=replace(result.rewards, A=bad_a))
    out = tmp_path / f"e{suffix}"
    out.write_text("before")
    with pytest.raises(DataError) as caught:
        write_scores(broken, out)
    assert str(caught.value) == (f"{out}: error: cannot write the results: `A` of episode é2\u2603 step 0 is nan, "
                                 "which is not a finite number")
    assert out.read_text() == "before" and len(list(tmp_path.iterdir())) == 1


def test_write_records_refuses_nan_rather_than_write_invalid_json(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    with pytest.raises(DataError) as caught:
        write_records([{"a": 1.0}, {"a": float("inf")}], out)
    assert str(caught.value) == (f"{out}: error: cannot write record 1 as JSON: "
                                 "Out of range float values are not JSON compliant")
    assert not out.exists()


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_an_empty_batch_gives_an_empty_output_with_its_columns(tmp_path: Path, suffix: str) -> None:
    empty = RubricScorer.from_source(SOURCE, backend="interp").score([])
    out = tmp_path / f"e{suffix}"
    write_scores(empty, out)
    if suffix == ".jsonl":
        assert out.read_text() == ""
    else:
        table = pq.read_table(out)
        assert table.num_rows == 0
        assert table.column_names == ["episode", "task", "t", "ops", "r_F", "r_B", "r_TRCA", "R", "A_E", "A_S", "A"]
        assert [f.name for f in table.schema.field("ops").type] == ["solves", "lookup", "broken"]
