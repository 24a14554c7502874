"""A weighted mixture of environments as one environment: multi-capability GRPO's training target.

    env = MixtureEnvironment([("refund_then_bags", make_a), ("cancel_unshipped", make_b)], weights=(1.0, 1.0))
    first = env.reset(17)            # seed 17's component, chosen by `component_index(17, weights)`, then its task 17

`reset(seed)` picks the component by a draw that is a pure function of the seed and the weights, so the K
environments of a GRPO group (which share a seed) play the same component's same task, and a resumed run draws
what the killed one did. Every other call goes to the component of the last `reset`: the protocol's
`system_prompt`, `step`, `trajectory`, `hint()`, `admissible_commands` and `tools` (before the first `reset`, a
RuntimeError), and, through attribute lookup, whatever other part it has (`call_format`, `scores()`, ...; an attribute
the component lacks is missing here too). `close()` closes every component made.

The draw: u = the first 8 bytes of sha256(`"mixture/{seed}"`), big-endian, / 2^64, uniform in [0, 1); the component
is the first i whose cumulative normalised weight exceeds u (a zero weight is never drawn). Over many seeds each
component's share tends to its weight; over the trainer's seed range the assignment is fixed, not resampled.
Left out: per-component seed ranges (every component sees the seed it is drawn for).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from tracec.trace_rl.envs.protocol import Environment, EnvironmentFactory, Observation, StepResult


def component_index(seed: int, weights: Sequence[float]) -> int:
    """The component seed `seed` plays: a deterministic draw from `weights` (non-negative, not all 0)."""
    total = math.fsum(weights)
    if not weights or min(weights) < 0 or not total > 0:
        raise ValueError(f"mixture weights {list(weights)}: non-negative numbers, not all 0")
    u = int.from_bytes(hashlib.sha256(f"mixture/{seed}".encode()).digest()[:8], "big") / 2**64
    cumulative = [c / total for c in accumulate(weights)]
    return min(bisect.bisect_right(cumulative, u), len(weights) - 1)  # the min: rounding at the top end


class MixtureEnvironment(Environment):
    """Named environment factories with weights; one component is made (once) when first drawn."""

    def __init__(self, components: Sequence[tuple[str, EnvironmentFactory]], *,
                 weights: Sequence[float]) -> None:
        if len(components) != len(weights):
            raise ValueError(f"{len(components)} components but {len(weights)} weights")
        component_index(0, weights)  # the weights' check, now
        self.names = tuple(name for name, _ in components)
        self._makers = [make for _, make in components]
        self.weights = tuple(weights)
        self._made: dict[int, Environment] = {}
        self._index: int | None = None

    @property
    def component(self) -> str | None:
        """The name of the component the last `reset` drew (None before the first)."""
        return None if self._index is None else self.names[self._index]

    def _current(self) -> Environment:
        if self._index is None:
            raise RuntimeError("a mixture environment has no component before its first reset(seed)")
        return self._made[self._index]

    @property
    def system_prompt(self) -> str:
        return self._current().system_prompt

    def reset(self, seed: int) -> Observation:
        index = component_index(seed, self.weights)
        if index not in self._made:
            self._made[index] = self._makers[index]()
        self._index = index
        return self._made[index].reset(seed)

    def step(self, action: str) -> StepResult:
        return self._current().step(action)

    def trajectory(self, episode: str) -> dict[str, Any]:
        return self._current().trajectory(episode)

    def hint(self) -> str | None:
        return self._current().hint()

    @property
    def admissible_commands(self) -> Sequence[str] | None:
        return self._current().admissible_commands

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self._current().tools

    def close(self) -> None:
        for env in self._made.values():
            env.close()

    def __getattr__(self, name: str) -> Any:
        # Only names not found on the mixture itself come here: the component's parts outside the protocol.
        if name.startswith("_"):
            raise AttributeError(name)
        index = self.__dict__.get("_index")
        if index is None:
            raise AttributeError(f"{name!r}: a mixture environment has no component before its first reset(seed)")
        return getattr(self.__dict__["_made"][index], name)
