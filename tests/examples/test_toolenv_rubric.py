"""examples/toolenv.rubric over the shipped capability environments: the gold solution is never punished, random
tool calls (and a few malformed ones) hit every Invalidity operator."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from rubric_checks import assert_invalidity_profile
from tracec.runtime.facts.trajectories.records import write_records
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.envs.agent import Agent, Message, run_episode
from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.envs.capability.episode import CapabilityEnvironment
from tracec.trace_rl.envs.capability.validate import GoldAgent, RandomAgent

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEEDS = range(12)
MALFORMED = ("<action>frobnicate(x=1)</action>", "<action>cancel(</action>", '{"name": "cancel", "arguments": 3}')


class SloppyAgent:
    """The validator's random-tool agent, with one turn in five a call that does not parse or names no tool."""

    def __init__(self, random_agent: RandomAgent, rng: random.Random):
        self.random_agent, self.rng = random_agent, rng

    def act(self, messages: list[Message]) -> str:
        if self.rng.random() < 0.2:
            return self.rng.choice(MALFORMED)
        return self.random_agent.act(messages)


def _play(env: CapabilityEnvironment, seed: int, agent: Agent) -> None:
    run_episode(env, agent, seed, env.max_steps)
    assert env.done


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory):
    records, gold, others = [], [], []
    for path in sorted((EXAMPLES / "envs").glob("*.rubric")):
        program = load_environment(str(path))
        for seed in SEEDS:
            env = CapabilityEnvironment(program)
            _play(env, seed, GoldAgent(env))
            assert env.scores().reward == 1.0
            records.append(env.trajectory(f"gold-{program.name}-{seed}"))
            gold.append(records[-1]["episode"])
            rng = random.Random(f"{program.name}/{seed}")
            env = CapabilityEnvironment(program)
            _play(env, seed, SloppyAgent(RandomAgent(env), rng))
            records.append(env.trajectory(f"random-{program.name}-{seed}"))
            others.append(records[-1]["episode"])
    out = tmp_path_factory.mktemp("toolenv") / "episodes.jsonl"
    write_records(records, out)
    scorer = RubricScorer.from_file(EXAMPLES / "toolenv.rubric", backend="interp")
    return scorer, scorer.score(out), gold, others


def test_gold_solutions_are_never_punished_and_random_calls_are(played):
    scorer, result, gold, others = played
    assert_invalidity_profile(scorer, result, gold, others)

