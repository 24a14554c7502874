"""A coverage-guided fuzz of the JSONL readers with atheris, for runs longer than test_reader_fuzz.py's: each input
is a trajectory file that `tracec score` reads each way of `reader_paths` in this process. A disagreement raises, a
crash kills the process; libFuzzer saves either input as `crash-*` (docs/trajectories.md, "Fuzzing the reader").
atheris is not one of the project's dependencies:

    .venv/bin/pip install atheris
    .venv/bin/python tests/runtime/fuzz_reader.py fuzz-corpus -max_total_time=3600 -max_len=65536
    .venv/bin/python tests/runtime/fuzz_reader.py crash-...     # one saved input, read again

The corpus folder is made and seeded with two episodes of the probe schema when it is missing or empty.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["tracec", "reader_paths"]):
    import tracec.runtime.facts.trajectories.files  # noqa: F401 - instrumented here, imported by the command later
    from reader_paths import RUBRIC, WAYS, disagreement, evaluate

SEEDS = [
    {"episode": "a", "task": "t", "states": [{"room": "hall", "open": [], "note": "ok", "n": 1, "heat": 0.5},
                                              {"room": "yard", "open": ["door"], "note": "You can't.", "n": 4}],
     "actions": [{"verb": "open", "ok": True}], "env_reward": 1.0, "success": True},
    {"episode": "b", "task": "t", "states": [{"room": "hall"}], "actions": [], "env_reward": -2},
]
FOLDER = Path(tempfile.mkdtemp(prefix="tracec-fuzz-"))
RUBRIC_PATH, TRAJECTORIES = FOLDER / "probe.rubric", FOLDER / "t.jsonl"


def one_input(data: bytes) -> None:
    TRAJECTORIES.write_bytes(data)
    problem = disagreement({way: evaluate(RUBRIC_PATH, TRAJECTORIES, way) for way in WAYS}, TRAJECTORIES)
    if problem is not None:
        raise AssertionError(problem)


def main() -> None:
    RUBRIC_PATH.write_text(RUBRIC)
    corpus = next((Path(arg) for arg in sys.argv[1:] if not arg.startswith("-")), None)  # or an input to rerun
    if corpus is not None and (not corpus.exists() or corpus.is_dir() and not any(corpus.iterdir())):
        corpus.mkdir(parents=True, exist_ok=True)
        (corpus / "seed").write_text("".join(json.dumps(seed) + "\n" for seed in SEEDS))
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
