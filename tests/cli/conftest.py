"""The `files` fixture: the door rubric of `cli_fixtures` and three episodes of it, in a fresh folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_fixtures import DOOR_EPISODES, DOOR_RUBRIC, write_jsonl


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """The door rubric and three episodes of it (two of task t1, one of t2)."""
    rubric = tmp_path / "door.rubric"
    rubric.write_text(DOOR_RUBRIC)
    return rubric, write_jsonl(tmp_path / "t.jsonl", DOOR_EPISODES)
