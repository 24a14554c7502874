"""The order of a run's task seeds: every seed of `[env]`'s `first_seed .. first_seed + num_seeds - 1` once per pass,
each pass in its own order, drawn from (run seed, pass).

    stream = TaskStream(config.env.first_seed, config.env.num_seeds, config.run.seed)
    seeds = stream.take(groups)   # the next groups' task seeds; stream.position is what a checkpoint records

The trainer's data flow, not the environments' (`envs.registry` makes those): the same stream, restored at its
`position`, hands a resumed run the seeds the killed one would have trained on.
Left out: weighting seeds (a mixture's components are drawn by the seed itself, `envs.mixture`).
"""

from __future__ import annotations

import numpy as np


class TaskStream:
    """Task seeds in passes over the configured range, each pass shuffled by (run seed, pass)."""

    def __init__(self, first_seed: int, num_seeds: int, run_seed: int, position: int = 0) -> None:
        self.first_seed, self.num_seeds, self.run_seed, self.position = first_seed, num_seeds, run_seed, position

    def take(self, count: int) -> list[int]:
        seeds = self.peek(count)
        self.position += count
        return seeds

    def peek(self, count: int) -> list[int]:
        """The next `count` seeds, left in the stream."""
        return [self._seed(self.position + i) for i in range(count)]

    def _seed(self, index: int) -> int:
        round_, offset = divmod(index, self.num_seeds)
        order = np.random.default_rng([self.run_seed, round_]).permutation(self.num_seeds)
        return self.first_seed + int(order[offset])
