"""The transcribed ToolSandbox scenarios, read once for the folder's tests."""

from __future__ import annotations

import pytest
from tracec.trace_rl.envs.toolsandbox.scenarios import ScenarioSet, load_scenarios


@pytest.fixture(scope="session")
def scenarios() -> ScenarioSet:
    return load_scenarios()
