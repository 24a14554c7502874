"""The Python API a training loop uses: compile a rubric once, then score batches of trajectories.

    scorer = RubricScorer.from_file("examples/household.rubric", backend="numba")
    result = scorer.evaluate(episodes)          # or a FactBatch, or a path to trajectory JSONL
    result.rewards.A                             # (n_steps,) advantage per step, for that step's action tokens

`trl_reward_func` adapts a scorer to TRL's `GRPOTrainer(reward_funcs=[...])` contract. What this leaves out: turning a
completion into an episode (the caller's `to_episode`), and token-level credit (the trainer spreads A over a step's
action tokens).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tracec.compiler.backends import Kernel, compile_kernel
from tracec.compiler.cache import KernelCache, default_cache_path
from tracec.compiler.pipeline import CompiledRubric, compile_rubric
from tracec.dsl.check import check
from tracec.dsl.errors import NOWHERE, CheckError, Diagnostic
from tracec.dsl.parse import parse
from tracec.runtime.facts import FactBatch, build_fact_batch
from tracec.runtime.rewards import RewardConfig, StepRewards, evaluate_rewards, operator_weights
from tracec.runtime.trajectories import Episode, read_trajectories


@dataclass(frozen=True)
class Evaluation:
    """Operators, rewards, returns and advantages of every step of a batch."""

    batch: FactBatch
    operator_names: tuple[str, ...]
    fired: np.ndarray  # (n_steps, n_operators) uint8: O
    context_key: np.ndarray | None  # (n_steps,) int64
    rewards: StepRewards

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


def _refcount_of_a_lone_local() -> int:
    """What sys.getrefcount says of an object only a local variable holds (2 on CPython up to 3.13, since the call
    adds one; newer interpreters may borrow the argument)."""
    lone = object()
    return sys.getrefcount(lone)


_LONE_LOCAL_REFCOUNT = _refcount_of_a_lone_local()


class RubricScorer:
    """One compiled rubric bound to one kernel backend."""

    def __init__(self, compiled: CompiledRubric, kernel: Kernel):
        self.compiled = compiled
        self.kernel = kernel
        self.config = RewardConfig(
            budget_evidence=compiled.budgets["evidence"],
            budget_execution=compiled.budgets["execution"],
            budget_invalidity=compiled.budgets["invalidity"],
            lam=compiled.lam,
            gamma=compiled.gamma,
        )
        self.fire_weight, self.coverage_weight = operator_weights(compiled.categories, self.config)
        # The output block of the last evaluation, reused once nothing else holds it (see `_output_block`).
        self._spare_block: np.ndarray | None = None
        self._spare_lock = threading.Lock()

    @classmethod
    def from_source(
        cls, text: str, path: str = "<string>", rubric: str | None = None, backend: str = "numba",
        cache: KernelCache | None = None,
    ) -> RubricScorer:
        compiled = load_rubric(text, path, rubric)
        return cls(compiled, compile_kernel(compiled.program, backend, cache or default_cache()))

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], rubric: str | None = None, backend: str = "numba",
        cache: KernelCache | None = None,
    ) -> RubricScorer:
        return cls.from_source(Path(path).read_text(encoding="utf-8"), str(path), rubric, backend, cache)

    @property
    def operator_names(self) -> tuple[str, ...]:
        return tuple(op.name for op in self.compiled.operators)

    def fact_batch(self, episodes: Sequence[Episode]) -> FactBatch:
        return build_fact_batch(episodes, self.compiled.plan)

    def evaluate(self, data: FactBatch | Sequence[Episode] | str | os.PathLike[str]) -> Evaluation:
        if isinstance(data, (str, os.PathLike)):
            data = read_trajectories(data)
        batch = data if isinstance(data, FactBatch) else self.fact_batch(data)
        fired, keys = self.kernel.run(batch.columns, batch.n_transitions)
        block = self._output_block(batch.n_transitions)
        rewards = evaluate_rewards(
            fired, batch.episode_offsets, batch.env_reward, batch.task_group, keys,
            self.fire_weight, self.coverage_weight, self.config, out=block,
        )
        with self._spare_lock:
            self._spare_block = block
        return Evaluation(batch, self.operator_names, fired, keys, rewards)

    def _output_block(self, n_steps: int) -> np.ndarray:
        """A (7, >= n_steps) block for the rewards: the last one when no evaluation still holds a view of it, else new.

        A training loop drops each batch's results before the next, so the same memory serves every batch: fresh
        memory costs a page fault (and the kernel zeroing it) per page, about a quarter of the rewards' time at 10^6
        steps. Reuse is decided by reference count: every array of an Evaluation keeps its block alive, so a block
        that only this scorer references is free. Taken under a lock, so two threads never get the same block.
        """
        with self._spare_lock:
            spare, self._spare_block = self._spare_block, None
        if spare is not None and spare.shape[1] >= n_steps and sys.getrefcount(spare) <= _LONE_LOCAL_REFCOUNT:
            return spare
        return np.empty((7, n_steps))


def load_rubric(text: str, path: str, rubric: str | None = None) -> CompiledRubric:
    """Parse, check and compile the rubric named `rubric` (or the file's only rubric)."""
    checked = check(parse(text, path))
    if rubric is None:
        if len(checked.rubrics) != 1:
            names = ", ".join(sorted(checked.rubrics)) or "none"
            raise CheckError([Diagnostic(path, NOWHERE, f"name the rubric to use; this file has: {names}")])
        rubric = next(iter(checked.rubrics))
    if rubric not in checked.rubrics:
        names = ", ".join(sorted(checked.rubrics)) or "none"
        raise CheckError([Diagnostic(path, NOWHERE, f"no rubric `{rubric}` in this file; it has: {names}")])
    return compile_rubric(checked.rubrics[rubric])


def default_cache() -> KernelCache:
    """The kernel cache folder: $TRACEC_CACHE_DIR, else ~/.cache/tracec."""
    return KernelCache(default_cache_path(os.environ))


def trl_reward_func(
    scorer: RubricScorer, to_episode: Callable[..., Episode | None]
) -> Callable[..., list[float | None]]:
    """A TRL reward function: each completion's TRCA return (sum of r_TRCA over its steps), None where
    `to_episode(prompt, completion, **columns_of_that_row)` says the rubric does not apply."""

    def reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
        episodes: list[Episode] = []
        slots: list[int | None] = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions)):
            row = {key: values[i] for key, values in columns.items() if isinstance(values, list)}
            episode = to_episode(prompt, completion, **row)
            slots.append(len(episodes) if episode is not None else None)
            if episode is not None:
                episodes.append(episode)
        totals = scorer.evaluate(episodes).episode_returns() if episodes else np.zeros(0)
        return [None if slot is None else float(totals[slot]) for slot in slots]

    reward.__name__ = f"tracec_{scorer.compiled.name}"
    return reward
