"""What `RubricScorer.score` returns: the operators, rewards, returns and advantages of every step of a fact batch,
and the views of it a caller reads (per-step records, each episode's TRCA return). Writing it to disk is `output`'s."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tracec.compiler.context import ContextKeys
from tracec.runtime.facts.fact_batch import FactBatch
from tracec.runtime.rewards.trca import StepRewards


@dataclass(frozen=True)
class ScoredBatch:
    """Operators, rewards, returns and advantages of every step of a batch."""

    batch: FactBatch
    operator_names: tuple[str, ...]
    fired: np.ndarray  # (n_steps, n_operators) uint8: O
    context_key: ContextKeys | None  # per step: the context hash (as an array) and the tuple it hashed
    rewards: StepRewards
    memory: np.ndarray | None = field(default=None, repr=False)  # (7, m >= n_steps): the block `rewards` lives in

    def records(self) -> Iterator[dict[str, Any]]:
        """One dict per step: episode, task, t, ops {name: 0|1}, r_F, r_B, r_TRCA, R, A_E, A_S, A."""
        offsets = self.batch.episode_offsets
        r = self.rewards
        for e, (episode, task) in enumerate(zip(self.batch.episodes, self.batch.tasks)):
            for step in range(offsets[e], offsets[e + 1]):
                yield {
                    "episode": episode,
                    "task": task,
                    "t": int(step - offsets[e]),
                    "ops": {name: int(v) for name, v in zip(self.operator_names, self.fired[step])},
                    "r_F": float(r.r_F[step]),
                    "r_B": float(r.r_B[step]),
                    "r_TRCA": float(r.r_TRCA[step]),
                    "R": float(r.R[step]),
                    "A_E": float(r.A_E[step]),
                    "A_S": float(r.A_S[step]),
                    "A": float(r.A[step]),
                }

    def episode_returns(self) -> np.ndarray:
        """sum_t r_TRCA,t per episode (n_episodes,): the dense TRCA return of each whole episode."""
        totals = np.concatenate([[0.0], np.cumsum(self.rewards.r_TRCA)])
        return totals[self.batch.episode_offsets[1:]] - totals[self.batch.episode_offsets[:-1]]
