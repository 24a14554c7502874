"""The Python API a training loop uses: compile a rubric once, then score batches of trajectories.

    scorer = RubricScorer.from_file("examples/household.rubric", backend="numba")
    result = scorer.score(episodes)             # or a FactBatch, or a trajectory file (.jsonl, .parquet, .arrow)
    result.rewards.A                             # (n_steps,) advantage per step, for that step's action tokens
    result = scorer.score(next_episodes, out=result)   # done with `result`: its memory is refilled

Output memory is the caller's: every call gets fresh memory, unless the caller hands back an earlier result
with `out=` (whose arrays are then overwritten). Refilling saves the page faults of fresh memory, about a quarter
of the reward time at 10^6 steps; the scorer keeps no state between calls, so threads may share it.

`trl_reward_func` adapts a scorer to TRL's `GRPOTrainer(reward_funcs=[...])` contract. What this leaves out: reading
the rubric (`tracec.compiler.load`), turning a completion into an episode (the caller's `to_episode`), and
token-level credit (the trainer spreads A over a step's action tokens).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from tracec.compiler.backends import Backend, Kernel, compile_kernel
from tracec.compiler.cache import KernelCache
from tracec.compiler.load import load_rubric
from tracec.compiler.pipeline import CompiledRubric
from tracec.dsl.source_file import read_source
from tracec.runtime.facts.fact_batch import FactBatch, build_fact_batch
from tracec.runtime.facts.trajectories.files import read_facts
from tracec.runtime.facts.trajectories.jsonl import Episode, gc_paused
from tracec.runtime.output import write_score_lines, write_scores
from tracec.runtime.rewards.trca import RewardConfig, evaluate_rewards, operator_weights
from tracec.runtime.scored_batch import ScoredBatch

from tracec.cache_dir import cache_root


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
            step_scale=compiled.step_scale,
        )
        self.fire_weight, self.coverage_weight = operator_weights(compiled.categories, self.config)

    @classmethod
    def from_source(
        cls, text: str, path: str = "<string>", rubric: str | None = None, backend: Backend = "numba",
        cache: KernelCache | None = None, *, lam: float | None = None, gamma: float | None = None,
        step_scale: str | None = None,
    ) -> RubricScorer:
        """The rubric `rubric` (or the file's only one) compiled for `backend`; `lam`, `gamma` and `step_scale`,
        where given, replace the rubric's own (a trainer's settings override the file)."""
        compiled = load_rubric(text, path, rubric)
        compiled = replace(compiled, lam=compiled.lam if lam is None else lam,
                           gamma=compiled.gamma if gamma is None else gamma,
                           step_scale=compiled.step_scale if step_scale is None else step_scale)
        return cls(compiled, compile_kernel(compiled.program, backend, cache or default_cache()))

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], rubric: str | None = None, backend: Backend = "numba",
        cache: KernelCache | None = None, *, lam: float | None = None, gamma: float | None = None,
        step_scale: str | None = None,
    ) -> RubricScorer:
        return cls.from_source(read_source(str(path)), str(path), rubric, backend, cache, lam=lam, gamma=gamma,
                               step_scale=step_scale)

    @property
    def operator_names(self) -> tuple[str, ...]:
        return tuple(op.name for op in self.compiled.operators)

    def fact_batch(self, episodes: Sequence[Episode]) -> FactBatch:
        return build_fact_batch(episodes, self.compiled.plan)

    def score(self, data: FactBatch | Sequence[Episode] | str | os.PathLike[str],
              out: ScoredBatch | None = None) -> ScoredBatch:
        """Operators and rewards of every step of `data`: a FactBatch, episodes, or a trajectory file (JSONL, or
        Parquet / Arrow IPC by suffix). `out`, an earlier result the caller is done with, lends its memory: its
        arrays are overwritten (when they are big enough) instead of fresh ones being allocated."""
        if isinstance(data, (str, os.PathLike)):
            with gc_paused():  # the parsed objects are freed by reference counting when read_facts returns
                data = read_facts(data, self.compiled.plan)
        batch = data if isinstance(data, FactBatch) else self.fact_batch(data)
        fired, keys = self.kernel.run(batch.columns, batch.n_transitions)
        block = out.memory if out is not None else None
        if block is None or block.shape[1] < batch.n_transitions:
            block = np.empty((7, batch.n_transitions))
        rewards = evaluate_rewards(
            fired, batch.episode_offsets, batch.env_reward, batch.task_group, keys,
            self.fire_weight, self.coverage_weight, self.config, out=block,
        )
        return ScoredBatch(batch, self.operator_names, fired, keys, rewards, block)


def score_file(scorer: RubricScorer, trajectories: str | os.PathLike[str],
               output: str | os.PathLike[str] | None) -> str:
    """`tracec score`: score a trajectory file and write every step to `output` (by suffix) or, if None, as JSONL
    to stdout; returns a one-line summary. The collector is paused throughout: nothing here makes cycles."""
    with gc_paused():
        result = scorer.score(trajectories)
        if output is None:
            write_score_lines(result, sys.stdout)
        else:
            write_scores(result, output)
    return f"{output}: {result.batch.n_transitions} steps of {len(result.batch.episodes)} episodes"


def default_cache() -> KernelCache:
    """The kernel cache folder: $TRACEC_CACHE_DIR, else ~/.cache/tracec."""
    return KernelCache(cache_root(os.environ))


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
        totals = scorer.score(episodes).episode_returns() if episodes else np.zeros(0)
        return [None if slot is None else float(totals[slot]) for slot in slots]

    reward.__name__ = f"tracec_{scorer.compiled.name}"
    return reward
