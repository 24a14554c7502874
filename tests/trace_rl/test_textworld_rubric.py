"""examples/textworld.rubric over played TextWorld episodes, through the compiled kernel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tracec.runtime.agent import run_episode
from tracec.runtime.evaluate import RubricScorer
from tracec.runtime.output import write_records
from tracec.trace_rl.envs.textworld_agents import RandomAgent, WalkthroughAgent
from tracec.trace_rl.envs.textworld_env import TextWorldEnvironment

RUBRIC = Path(__file__).resolve().parents[2] / "examples" / "textworld.rubric"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scored(textworld_game: Path, tmp_path_factory: pytest.TempPathFactory):
    with TextWorldEnvironment(textworld_game) as env:
        episodes = [run_episode(env, WalkthroughAgent(env), 0, 40, episode="walkthrough")]
        episodes += [run_episode(env, RandomAgent(env, seed=s), 0, 25, episode=f"random{s}") for s in range(2)]
    path = tmp_path_factory.mktemp("tw-scored") / "episodes.jsonl"
    write_records(episodes, path)
    scorer = RubricScorer.from_file(RUBRIC, backend="numba", cache=None)
    return scorer, scorer.evaluate(path)


def _episode(result, name: str) -> slice:
    e = result.batch.episodes.index(name)
    return slice(result.batch.episode_offsets[e], result.batch.episode_offsets[e + 1])


def test_the_walkthrough_wins_with_breakthroughs_on_execution_operators(scored):
    scorer, result = scored
    steps = _episode(result, "walkthrough")
    assert result.batch.env_reward[0] == 1.0
    execution = [j for j, op in enumerate(scorer.compiled.operators) if op.category == "execution"]
    fired = result.fired[steps][:, execution]
    assert fired.any(axis=0).sum() >= 3  # takes the target, places it, scores, wins...
    r_b = result.rewards.r_B[steps]
    assert r_b.sum() > 0 and (r_b >= -1e-12).all()  # coverage only grows
    # A step where an execution operator fires for the first time earns a breakthrough.
    first = int(np.argmax(fired.any(axis=1)))
    assert r_b[first] > 0


def test_random_play_hits_invalidity_operators(scored):
    scorer, result = scored
    invalidity = [j for j, op in enumerate(scorer.compiled.operators) if op.category == "invalidity"]
    hits = sum(int(result.fired[_episode(result, f"random{s}")][:, invalidity].sum()) for s in range(2))
    assert hits > 0
    assert result.rewards.r_F[_episode(result, "random0")].min() < 0


def test_every_backend_scores_the_same(scored):
    scorer, result = scored
    for backend in ("interp", "c"):
        other = RubricScorer(scorer.compiled, _kernel(scorer, backend)).evaluate(result.batch)
        np.testing.assert_array_equal(other.fired, result.fired)
        np.testing.assert_array_equal(other.context_key, result.context_key)


def _kernel(scorer, backend):
    from tracec.compiler.backends import compile_kernel

    return compile_kernel(scorer.compiled.program, backend, None)
