"""`tracec score` of one trajectory file by each way of reading JSONL, side by side, for the reader fuzz tests
(test_reader_fuzz.py, and the longer atheris run of fuzz_reader.py; docs/trajectories.md, "Fuzzing the reader").

The ways: `fast` is the command as it runs (Arrow's JSON reader, the line reader for whatever it declines); `lines`
the line reader alone, with the C gatherer (runtime/_gather.c); `python` the line reader without it. Each is
`tracec.cli.main` in this process with the others switched off, its stdout and stderr caught. Run as a script,
this module serves requests, one JSON line each (`[trajectory path, way]`, answered `[exit code, out, err]`), so
that a test can keep one child process for many files and still see it die of a signal.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path

from tracec.cli import main
from tracec.runtime.facts import columns
from tracec.runtime.facts.trajectories import files as trajectory_files

# Every kind of fact, read by an operator or the context, so that both readers check and code each of them.
RUBRIC = """
schema probe {
  state { room: entity  open: set(entity)  note: text  n: int  heat: float }
  action { verb: enum(go, open, wait)  ok: bool }
}
rubric probing for probe {
  evidence   moves  "changes room":  changed(room)
  execution  opens  "opens":         act.verb == open and "door" in next.open and act.ok
  invalidity hot    "too hot":       next.heat > 1.5 or next.n > 3
  invalidity stuck  "says no":       contains(next.note, "can't")
  context prev.room
}
"""
WAYS = ("fast", "lines", "python")
Answer = tuple[int, str, str]

_FAST_TABLE, _GATHER = trajectory_files.json_table, columns._gather
# What the line reader refuses and Arrow's reader accepts inside a field no rubric reads (docs/trajectories.md).
_PYTHON_ONLY = re.compile(r"JSON nested too deeply to read|is a number of [\d,]+ digits; a number may have at most")
_LOCATED = re.compile(r"[^\n]*:\d+:\d+: error: |[^\n]*: error: no state or action has a value")


def _declined(path: str, plan: object) -> None:
    return None  # as Arrow's reader declines a file: the line reader reads it


def evaluate(rubric: Path, trajectories: Path, way: str) -> Answer:
    """`tracec score RUBRIC --trajectories T` read the given way, in this process."""
    trajectory_files.json_table = _FAST_TABLE if way == "fast" else _declined  # type: ignore[assignment]
    columns._gather = _GATHER if way != "python" else None
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["score", str(rubric), "--trajectories", str(trajectories), "--backend", "interp"])
    finally:
        trajectory_files.json_table, columns._gather = _FAST_TABLE, _GATHER
    return code, out.getvalue(), err.getvalue()


def disagreement(answers: dict[str, Answer], trajectories: Path) -> str | None:
    """What is wrong with the answers of the ways to one file, or None: each must be a score (exit 0) or one
    located error (exit 1), without a traceback, and all the same, but where the fast way accepts what the line
    reader cannot read at all in a field no rubric reads."""
    for way, (code, _, err) in answers.items():
        if code not in (0, 1) or "Traceback" in err:
            return f"{way}: exit {code}\n{err}"
        if code == 1 and not (_LOCATED.match(err) and err.startswith(str(trajectories))):
            return f"{way}: an error that names no place in {trajectories}:\n{err}"
    if answers["lines"] != answers["python"]:
        return f"the C gatherer and the Python path differ:\n{answers['lines']}\n{answers['python']}"
    fast, lines = answers["fast"], answers["lines"]
    if fast != lines and not (fast[0] == 0 and lines[0] == 1 and _PYTHON_ONLY.search(lines[2])):
        return f"Arrow's reader and the line reader differ:\n{fast}\n{lines}"
    return None


def serve() -> None:
    rubric = Path(sys.argv[1])
    rubric.write_text(RUBRIC)
    for request in sys.stdin:
        path, way = json.loads(request)
        print(json.dumps(evaluate(rubric, Path(path), way)), flush=True)


if __name__ == "__main__":
    serve()
