"""Episodes of a capability environment: played by the validator's scripted agents or by a policy model.

`play` is the one place an agent meets an environment here: it drives `runtime.env.episode.Environment` turn by
turn and returns the finished episode's trajectory record (trajectory JSONL, with the `toolenv` facts).
Scripted agents (gold, do-nothing, random: `runtime.env.validate`) give labeled episodes for validating a rubric;
a policy (`SamplingBackend`) gives the rollouts of a calibration: groups of K episodes that share a seed, each
sampled under its own seed, the policy seeing the environment's instructions as its system prompt, the task as the
first user turn and every observation after its own turns.
Left out: batching the K rollouts of a group into one decode (the trainer's token-level engine does that).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tracec.runtime.chat import Sampling, SamplingBackend
from tracec.runtime.env import Environment, Program
from tracec.runtime.env.generate import rng_for
from tracec.runtime.env.validate import GoldAgent, NullAgent, RandomAgent

Record = dict[str, Any]


def play(program: Program, seed: int, act: Callable[[list[dict[str, str]]], str], *, episode: str,
         max_steps: int | None = None) -> Record:
    """One episode: `act(conversation so far) -> the agent's next turn`, until the environment says done."""
    env = Environment(program, max_steps=max_steps)
    task = env.reset(seed)
    conversation = [{"role": "system", "content": env.instructions}, {"role": "user", "content": task}]
    done = False
    while not done:
        turn = act(conversation)
        observation, done = env.step(turn)
        role = "user" if env.actions[-1]["kind"] == "message" else "tool"
        conversation += [{"role": "assistant", "content": turn}, {"role": role, "content": observation}]
    return env.trajectory(episode)


def scripted_episodes(program: Program, seeds: range) -> dict[str, list[Record]]:
    """`gold`, `null` and `random` episodes on each seed (the random agent seeded per seed, as validation does)."""
    found: dict[str, list[Record]] = {"gold": [], "null": [], "random": []}
    for seed in seeds:
        scenario = program.scenario(seed)
        agents: dict[str, Any] = {"gold": GoldAgent(scenario), "null": NullAgent(),
                                  "random": RandomAgent(program, scenario, rng_for(seed, "synth/random-agent"))}
        for kind, agent in agents.items():
            def act(conversation: list[dict[str, str]], agent: Any = agent) -> str:
                return str(agent.act(conversation[-1]["content"]))

            found[kind].append(play(program, seed, act, episode=f"{kind}-{seed}"))
    return found


@dataclass(frozen=True, kw_only=True)
class Rollout:
    seed: int
    sample: int
    reward: float
    success: bool
    steps: int
    record: Record


def policy_rollouts(program: Program, policy: SamplingBackend, seeds: range, *, group_size: int,
                    sampling: Sampling, max_steps: int | None = None,
                    report: Callable[[str], None] = lambda _: None) -> list[Rollout]:
    """`group_size` rollouts of `policy` on each seed; sample k of seed s decodes turn t under a seed of its own."""
    rollouts = []
    for seed in seeds:
        for k in range(group_size):
            agent = _PolicyAgent(policy, sampling, rng_for(seed, f"calibrate/{sampling.seed}/{k}"))
            record = play(program, seed, agent, episode=f"policy-{seed}-{k}", max_steps=max_steps)
            rollouts.append(Rollout(seed=seed, sample=k, reward=float(record["env_reward"]),
                                    success=bool(record["success"]), steps=agent.turns, record=record))
        group = rollouts[-group_size:]
        report(f"calibrate: seed {seed}: rewards {', '.join(f'{r.reward:.2f}' for r in group)}")
    return rollouts


class _PolicyAgent:
    def __init__(self, policy: SamplingBackend, sampling: Sampling, draw: random.Random) -> None:
        self.policy, self.sampling, self.draw, self.turns = policy, sampling, draw, 0

    def __call__(self, conversation: list[dict[str, str]]) -> str:
        self.turns += 1
        turn = replace(self.sampling, seed=self.draw.randrange(2**31), n=1)
        return self.policy.sample(conversation, turn)[0]
