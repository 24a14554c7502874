"""bench/results.py: sections recorded by processes side by side all survive (the lock around the rewrite)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WRITER = """
import sys
from pathlib import Path
from bench.results import record
results, name = Path(sys.argv[1]), sys.argv[2]
for round in range(25):
    record(f"{name}", f"round {round} of {name}", "python writer.py", results=results)
"""


def test_sections_recorded_side_by_side_are_all_kept(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(results), f"writer {i}"], cwd=REPO)
               for i in range(6)]
    assert [w.wait(timeout=120) for w in writers] == [0] * 6
    text = results.read_text()
    for i in range(6):  # a lost update would drop a writer's section or leave it at an earlier round
        assert text.count(f"<!-- begin writer {i} -->") == 1
        assert f"round 24 of writer {i}" in text
    assert not list(tmp_path.glob(".RESULTS.md.*")), "a temporary file was left behind"
