"""A capability environment of main's `runtime/env/episode.py` seen through the one environment protocol.

Temporary: the `envs` branch moves the capability environment itself onto `runtime/environment.py`; the trainer's
tests use this adapter until that lands (then it goes).
"""

from __future__ import annotations

from typing import Any

from tracec.runtime.env import Environment, load_environment
from tracec.runtime.environment import EnvironmentFactory, Observation, StepResult


class CapabilityAdapter:
    def __init__(self, program: Any) -> None:
        self.env = Environment(program)

    @property
    def system_prompt(self) -> str:
        return self.env.instructions

    def reset(self, seed: int) -> Observation:
        return Observation(text=self.env.reset(seed), role="user")

    def step(self, action: str) -> StepResult:
        text, done = self.env.step(action)
        role = "user" if self.env.actions[-1]["kind"] == "message" else "tool"
        reward = self.env.scores().reward if done else 0.0
        return StepResult(observation=Observation(text=text, role=role), done=done, reward=reward,
                          state=self.env.states[-1], action=self.env.actions[-1])

    def trajectory(self, episode: str) -> dict[str, Any]:
        return self.env.trajectory(episode)


def capability_factory(path: str) -> EnvironmentFactory:
    program = load_environment(path)
    return lambda: CapabilityAdapter(program)
