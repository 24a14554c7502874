"""Fixtures the trace_rl tests share: one TextWorld game per run (shared by xdist workers), the tau2-bench data and
domains, loaded once per worker, and one torch thread for the modules that run the tiny model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tracec.trace_rl.envs.tau2.env import Domain, find_data_dir, load_domain
from tracec.trace_rl.envs.textworld.env import SimpleGame, make_game

GAME = SimpleGame(seed=2)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """A model this small runs many times slower on two busy threads than on one: thread hand-offs cost more than
    its matrix products (and xdist already runs a worker per core)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def textworld_game(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The base temp folder's parent is common to all xdist workers; make_game publishes atomically, so a race
    # between workers at worst makes the game twice.
    shared = tmp_path_factory.getbasetemp().parent / "tw-cache"
    return make_game(GAME, shared)


@pytest.fixture(scope="session")
def data_dir(shared_dir: Path) -> Path:
    return find_data_dir(shared_dir / "data" / "tau2")  # the shared folder the tests were pointed at


@pytest.fixture(scope="session")
def domains(data_dir: Path) -> dict[str, Domain]:
    return {name: load_domain(name, data_dir) for name in ("airline", "retail")}
