"""Shared test options: `--update-golden` rewrites golden files (review the diff), `shared_dir` finds ../shared, the
hypothesis profile of the gate.

Float comparisons follow one rule, `numerics.py` beside this file: a tolerance comes from the dtype and from what is
accumulated (n roundings at values of size m: 2 n m u, u = 2^-24 in fp32, 2^-53 in fp64), never from the
differences one machine happened to show; matmul kernels, their blocking and the thread count differ on the next
CPU. Where the code allows, compare in fp64 (`numerics.float64_model` for a model) so that the bound is tiny and a
real bug is orders of magnitude above it; where the arithmetic is exact (integers, dyadic values, one code path in
one order), compare exactly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]


# `make test` (CI's gate) runs the property tests derandomized, so a verdict is reproducible; plain `pytest` and
# `make test-fast` keep drawing fresh examples, which is how they find new bugs.
settings.register_profile("gate", derandomize=True, print_blob=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files instead of comparing")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def repo_dir() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The read-only `shared/` folder that lies beside the repository (CI lays it beside its clone too)."""
    candidate = Path(os.environ.get("TRACEC_SHARED", REPO.parent / "shared"))
    if not candidate.is_dir():
        pytest.fail(f"shared data folder not found at {candidate}; set TRACEC_SHARED")
    return candidate
