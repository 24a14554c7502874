"""Episodes of a capability environment: played by the validator's scripted agents or by a policy model.

Every episode goes through the one episode loop, `trace_rl.envs.agent.run_episode`, on the capability environment of
`trace_rl.envs.capability` (the one environment protocol), and comes back as its trajectory record (trajectory JSONL,
with the `toolenv` facts). Scripted agents (gold, do-nothing, random: `trace_rl.envs.capability.validate`) give labeled
episodes for validating a rubric; a policy (`SamplingBackend`) gives the rollouts of a calibration: groups of K episodes
that share a seed, each turn of sample k sampled under a seed of its own, the policy seeing the environment's system
prompt, the task and every observation after its own turns.
Left out: batching the K rollouts of a group into one decode (the trainer's token-level engine does that).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tracec.trace_rl.envs.agent import Agent, Message, run_episode
from tracec.trace_rl.envs.capability import CapabilityEnvironment, Program
from tracec.trace_rl.envs.capability.generate import rng_for
from tracec.trace_rl.envs.capability.validate import GoldAgent, NullAgent, RandomAgent
from tracec.trace_rl.envs.toolcall import DEFAULT_CALL_FORMAT
from tracec.trace_rl.llm.chat import Sampling, SamplingBackend

Record = dict[str, Any]


def scripted_episodes(program: Program, seeds: range) -> dict[str, list[Record]]:
    """`gold`, `null` and `random` episodes on each seed (the random agent's draws follow the seed)."""
    env = CapabilityEnvironment(program)  # the scripted agents read the seed's hidden solution and tables from it
    agents: dict[str, Agent] = {"gold": GoldAgent(env), "null": NullAgent(), "random": RandomAgent(env)}
    return {kind: [run_episode(env, agent, seed, env.max_steps, episode=f"{kind}-{seed}") for seed in seeds]
            for kind, agent in agents.items()}


@dataclass(frozen=True, kw_only=True)
class Rollout:
    seed: int
    sample: int
    reward: float
    success: bool
    steps: int
    record: Record


class PolicyAgent:
    """A policy model as an agent: each turn samples once, under the next seed of its own draw."""

    def __init__(self, policy: SamplingBackend, sampling: Sampling, draw: random.Random) -> None:
        self.policy, self.sampling, self.draw = policy, sampling, draw

    def act(self, messages: Sequence[Message]) -> str:
        turn = replace(self.sampling, seed=self.draw.randrange(2**31), n=1)
        return self.policy.sample(list(messages), turn)[0]


def policy_rollouts(program: Program, policy: SamplingBackend, seeds: range, *, group_size: int,
                    sampling: Sampling, max_steps: int | None = None,
                    call_format: str = DEFAULT_CALL_FORMAT,
                    report: Callable[[str], None] = lambda _: None) -> list[Rollout]:
    """`group_size` rollouts of `policy` on each seed, the tools given in `call_format`."""
    env = CapabilityEnvironment(program, max_steps=max_steps, call_format=call_format)
    rollouts = []
    for seed in seeds:
        for k in range(group_size):
            agent = PolicyAgent(policy, sampling, rng_for(seed, f"calibrate/{sampling.seed}/{k}"))
            record = run_episode(env, agent, seed, env.max_steps, episode=f"policy-{seed}-{k}")
            rollouts.append(Rollout(seed=seed, sample=k, reward=float(record["env_reward"]),
                                    success=bool(record["success"]), steps=len(record["actions"]), record=record))
        group = rollouts[-group_size:]
        report(f"calibrate: seed {seed}: rewards {', '.join(f'{r.reward:.2f}' for r in group)}")
    return rollouts
