"""Shaped episode-level GRPO: a rubric's return as GRPO's reward, one advantage on every step of an episode; on
the shipped tool-calling environment scored by its shipped rubric."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
from numerics import standardized_tolerance, tolerance
from toy_env import capability_env
from tracec.runtime.facts.trajectories.jsonl import Episode
from tracec.runtime.scored_batch import ScoredBatch
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.envs.toolcall import format_tool_call
from tracec.trace_rl.grpo.shaped import shaped_returns, shaped_step_advantages

REPO = Path(__file__).resolve().parents[2]


def play(seed: int, turns: list[str], name: str) -> Episode:
    """One scripted episode of task `seed`, as the trainer hands it to the rubric (its task: its rollout group)."""
    with contextlib.closing(capability_env()) as env:
        env.reset(seed)
        for turn in turns:
            if env.step(turn).done:
                break
        record = env.trajectory(name)
    return Episode(episode=name, task=f"group{seed}", instruction=record["instruction"], states=record["states"],
                   actions=record["actions"], env_reward=record["env_reward"], success=record["success"])


def solution(seed: int) -> list[str]:
    """The gold solution of task `seed`: its tool calls as the agent writes them, then a word to the user."""
    with contextlib.closing(capability_env()) as env:
        env.reset(seed)
        calls = env.scenario.gold_calls
    return [format_tool_call(c.name, c.arguments) for c in calls] + ["Done: it is all set."]


@pytest.fixture(scope="module")
def episodes() -> list[Episode]:
    five, six = solution(5), solution(6)
    scripts = [(5, five), (5, five[1:]), (5, ["hello", "hello"]), (5, five[:1] + ["I cannot do more."]),
               (6, six), (6, ["hi"] * 3), (6, six[1:])]
    return [play(seed, turns, f"e{i}") for i, (seed, turns) in enumerate(scripts)]


@pytest.fixture(scope="module")
def scorer() -> RubricScorer:
    return RubricScorer.from_file(REPO / "examples" / "toolenv.rubric")


def first_step_return(scored: ScoredBatch, episode: int, gamma: float) -> float:
    """G_0 transcribed: sum_k gamma^k (r_TRCA,k + r_env,k), the env reward paid at the last step."""
    offsets = scored.batch.episode_offsets
    steps = scored.rewards.r_TRCA[offsets[episode]:offsets[episode + 1]]
    env = float(scored.batch.env_reward[episode])
    return sum(gamma ** k * (float(r) + (env if k == len(steps) - 1 else 0.0)) for k, r in enumerate(steps))


@pytest.mark.parametrize("divide", [True, False], ids=["std", "none"])
def test_every_step_gets_the_standardized_rubric_return(episodes: list[Episode], scorer: RubricScorer,
                                                        divide: bool) -> None:
    scored = scorer.score(episodes)
    advantages = shaped_step_advantages(scored, divide_by_std=divide)
    returns = [first_step_return(scored, i, scorer.config.gamma) for i in range(len(episodes))]
    np.testing.assert_allclose(shaped_returns(scored), returns, rtol=0,
                               atol=tolerance(4 * 3, max(map(abs, returns)) + 1, np.float64))
    for i, (episode, per_step) in enumerate(zip(episodes, advantages)):
        assert len(per_step) == len(episode.actions)
        assert np.all(per_step == per_step[0])  # one advantage for the whole episode
        members = [r for r, other in zip(returns, episodes) if other.task == episode.task]
        mean = sum(members) / len(members)
        std = (sum((m - mean) ** 2 for m in members) / len(members)) ** 0.5
        expected = (returns[i] - mean) / (std + 1e-6) if divide else returns[i] - mean
        close = standardized_tolerance(members, 1e-6, input_error=tolerance(4 * 3, max(map(abs, members)) + 1,
                                                                            np.float64), divide=divide)
        assert per_step[0] == pytest.approx(expected, abs=close)


def test_the_shaping_tells_apart_what_the_environments_reward_does_not(episodes: list[Episode],
                                                                      scorer: RubricScorer) -> None:
    """Both the full solution and the one that changes the booking unchecked win (env_reward 1): GRPO gives them
    one advantage, the shaped return does not (the rubric pays for the check first)."""
    advantages = shaped_step_advantages(scorer.score(episodes), divide_by_std=True)
    assert episodes[0].env_reward == episodes[1].env_reward == 1.0
    assert advantages[0][0] > advantages[1][0] > 0 > advantages[2][0]


def test_the_groups_are_the_tasks(episodes: list[Episode], scorer: RubricScorer) -> None:
    together = shaped_step_advantages(scorer.score(episodes), divide_by_std=True)
    alone = shaped_step_advantages(scorer.score([e for e in episodes if e.task == "group6"]), divide_by_std=True)
    for got, single in zip([a for a, e in zip(together, episodes) if e.task == "group6"], alone):
        assert np.array_equal(got, single)  # bit for bit: a group's statistics depend on its contents only
    lone = shaped_step_advantages(scorer.score(episodes[:1]), divide_by_std=True)
    assert np.array_equal(lone[0], np.zeros(len(episodes[0].actions)))  # a group of one is its own mean
