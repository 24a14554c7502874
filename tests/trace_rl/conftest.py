"""Fixtures the target-environment tests share: one TextWorld game per run (shared by xdist workers), and the
tau2-bench data and domains, loaded once per worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracec.trace_rl.envs.tau2.env import Domain, find_data_dir, load_domain
from tracec.trace_rl.envs.textworld_env import SimpleGame, make_game

GAME = SimpleGame(seed=2)


@pytest.fixture(scope="session")
def textworld_game(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The base temp folder's parent is common to all xdist workers; make_game publishes atomically, so a race
    # between workers at worst makes the game twice.
    shared = tmp_path_factory.getbasetemp().parent / "tw-cache"
    return make_game(GAME, shared)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return find_data_dir()


@pytest.fixture(scope="session")
def domains(data_dir: Path) -> dict[str, Domain]:
    return {name: load_domain(name, data_dir) for name in ("airline", "retail")}
