"""One TextWorld game for every test module that plays one, made once per run and shared by xdist workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracec.trace_rl.envs.textworld_env import SimpleGame, make_game

GAME = SimpleGame(seed=2)


@pytest.fixture(scope="session")
def textworld_game(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The base temp folder's parent is common to all xdist workers; make_game publishes atomically, so a race
    # between workers at worst makes the game twice.
    shared = tmp_path_factory.getbasetemp().parent / "tw-cache"
    return make_game(GAME, shared)
