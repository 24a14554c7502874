"""Small environments for the trainer's tests, on the one environment protocol.

`LetterEnv`: two turns; the reward is the share of the letters a to m among the characters of the agent's turns, so
the random text of the tiny model gives groups whose rewards differ (GRPO has something to learn); `BareLetterEnv`,
the same game in a class that does not subclass the protocol. `capability_env` makes the shipped
tool_calling_precision environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.protocol import Environment as EnvironmentProtocol
from tracec.trace_rl.envs.protocol import Observation, StepResult

REPO = Path(__file__).resolve().parents[2]


class LetterEnv(EnvironmentProtocol):
    system_prompt = "Write letters. Put your answer in <action>...</action>."

    def __init__(self, turns: int = 2) -> None:
        self.turns = turns

    def reset(self, seed: int) -> Observation:
        self.seed, self.texts = seed, list[str]()
        self.states: list[dict[str, Any]] = [{"share": 0.0}]
        self.actions: list[dict[str, Any]] = []
        return Observation(text=f"Task {seed}: write letters from a to m.", role="user")

    def _reward(self) -> float:
        return _share("".join(self.texts))

    def step(self, action: str) -> StepResult:
        self.texts.append(action)
        share = _share(action)
        self.actions.append({"text": action, "share": share})
        self.states.append({"share": share})
        done = len(self.texts) >= self.turns
        # Observations of lengths that vary with the seed and the turn: the batch's longest row changes from turn
        # to turn, so every row of the KV cache gets holes.
        dots = "." * ((self.seed + 3 * len(self.texts)) % 5)
        return StepResult(observation=Observation(text=f"You wrote {len(action)} characters{dots}", role="user"),
                          done=done, reward=self._reward() if done else 0.0, state=self.states[-1],
                          action=self.actions[-1])

    def trajectory(self, episode: str) -> dict[str, Any]:
        reward = self._reward()
        return {"episode": episode, "task": f"letters/{self.seed}", "instruction": "write many a",
                "states": self.states, "actions": self.actions, "env_reward": reward, "success": reward > 0.5}


def _share(text: str) -> float:
    return sum(character in "abcdefghijklm" for character in text) / max(len(text), 1)


def letter_env() -> LetterEnv:
    return LetterEnv()


class BareLetterEnv:
    """`LetterEnv` as a class of a user's own may be written: it matches the protocol without subclassing it, and has
    no `hint`, `admissible_commands` or `close` (a `kind = "python"` factory's object gets their defaults)."""

    def __init__(self) -> None:
        self.letters = LetterEnv()

    @property
    def system_prompt(self) -> str:
        return self.letters.system_prompt

    def reset(self, seed: int) -> Observation:
        return self.letters.reset(seed)

    def step(self, action: str) -> StepResult:
        return self.letters.step(action)

    def trajectory(self, episode: str) -> dict[str, Any]:
        return self.letters.trajectory(episode)


def bare_letter_env() -> BareLetterEnv:
    return BareLetterEnv()


_PROGRAM = load_environment(str(REPO / "examples" / "envs" / "tool_calling_precision.rubric"))


def capability_env(call_format: str = "text") -> Any:
    # text by default: the tiny tokenizer spells the native format's JSON schemas in ~1500 ids, more than these
    # rollout tests' contexts; the native format has its own tests (test_native_tools.py)
    return CapabilityEnvironment(_PROGRAM, call_format=call_format)
