"""One policy update from a batch of episodes: epochs x mini-batches of AdamW steps on the GRPO loss, as the run's
config says (`[optim]`, `[loss]`, and `[rollout]` for how the tokens were sampled).

Each episode is ONE sequence (its prompt, turns and observations, exactly the sampled ids); its loss tokens are the
action tokens of its turns, each with its step's advantage. Per epoch the batch's sequences are shuffled (seeded
by run seed, iteration, epoch) and split into `mini_batches` parts, one optimizer step each: after the first step
the ratio moves away from 1 and the clip acts. A part is run as micro-batches of at most `micro_batch_tokens`
tokens, each packed into rows (`packing.pack_sequences`) and scored by the packed log-prob kernel
(`logprobs.sequence_logprobs`: no padding, only the loss positions reach the LM head); gradients accumulate.
Old log-probs are the sampler's (the same weights drew the tokens) or, for rollouts from another engine, the
trainer's own, recomputed before the update, with each sequence weighted by its masked importance weight.
A hinted episode (sampled with expert guidance, learned from on the plain prompt) takes the same path, recomputed
on the plain context, but keeps weight 1: its importance weight against the hinted sampler, pi(turns | plain) /
pi(turns | hinted) over every loss token of the episode, would all but zero (or, past the cap, drop) exactly the
guided episodes the hint is there to supply; the ratio and its clip then keep the update near the plain policy.
What one term of the loss is, the learner is given (`LossUnits`, resolved from the config once, `loss_units`): a
loss token with its log-prob from the packed forward, or, at the command level (the admissible mode), a turn with
log pi(c|s) re-scored over the tree of the turn's candidates (`choice_policy`), not the chosen command's tokens.

Every optimizer step reports its trust-region diagnostics (`StepStats`): the ratio's median, 99th percentile and
maximum over the mini-batch's loss units, the approximate KL to the behaviour policy, the clip fraction and the
gradient norm before clipping. With `target_kl`, a step whose mini-batch already sits further than that from the
behaviour policy is not taken, and the iteration's updates end there (PPO's early stop): the first step of an
iteration always runs, at ratio 1. A non-finite loss, gradient or weight stops the run (`divergence`).

The sequence table (which sequences exist, their lengths and loss-token counts, who owns them) is global: every
rank plans every part and micro-batch alike, runs its own sequences of each, and pads with empty micro-batches to
the longest rank's count, so DDP sees the same number of backward passes everywhere. Loss weights use the part's
totals over all ranks, which makes the averaged gradient equal to the one-process gradient.
An update also reports where its time went (`LearnStats.time_*`): forward (packing, the model and the loss),
backward, and the optimizer (gradient clipping, the step, zeroing the gradients); host wall time, so on a GPU,
whose kernels run asynchronously, work lands in the phase that next waits for it.
Left out: gradient checkpointing, mixed precision on CPU, learning-rate schedules per optimizer step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor
from tracec.trace_rl.grpo.config import TrainConfig
from tracec.trace_rl.grpo.distributed import Distributed
from tracec.trace_rl.grpo.divergence import DivergedError, not_finite_update, require_finite_weights
from tracec.trace_rl.grpo.loss import AGGREGATIONS, aggregation_weights, clipped_surrogate, sequence_importance_weights
from tracec.trace_rl.policy.choice_policy import ChoiceTree, ChoiceTurn, choice_logprobs, choice_score_rule
from tracec.trace_rl.policy.logprobs import sequence_logprobs
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.policy.packing import PackedBatch, first_fit_decreasing, pack_sequences
from tracec.trace_rl.rollouts.engine import EpisodeRollout

ROW_TARGET = 512  # tokens a packed row aims at: attention in a row costs its width squared (a dense mask)


@dataclass(frozen=True, kw_only=True)
class LearnSequence:
    """One episode to learn from, held by the rank that sampled it."""

    key: tuple[int, int]  # (group, member): its place in the batch, the same on every rank
    token_ids: np.ndarray  # (T,) int64
    loss_mask: np.ndarray  # (T,) bool
    advantages: np.ndarray  # (T,) float32, read at loss tokens
    old_logprobs: np.ndarray  # (T,) float32, read at loss tokens
    weight: float = 1.0  # importance weight of the sequence (1 for on-policy rollouts)
    choice_turns: tuple[ChoiceTurn, ...] = ()  # the command level's loss units, in turn order
    choice_advantages: tuple[float, ...] = ()  # each turn's advantage
    hinted: bool = False  # sampled with expert guidance that `token_ids` no longer hold (see `off_policy_correction`)


@dataclass(frozen=True, kw_only=True)
class SequenceInfo:
    key: tuple[int, int]
    length: int  # tokens its forward takes (a tree's, at the command level)
    loss_tokens: int  # its loss units: tokens, or (command level) turns
    rank: int


@dataclass(frozen=True, kw_only=True)
class ScoredUnits:
    """A micro-batch's loss units, flat over its sequences in order: (N,) each."""

    logp: Tensor  # with gradient
    old: Tensor
    advantages: Tensor
    counts: list[int]  # units per sequence
    ref: Tensor | None  # the base model's log-probs (no gradient); None without kl_beta
    entropy: Tensor | None  # H_t with gradient, for the entropy bonus (the command level's); None: no bonus
    entropy_sum: tuple[float, float]  # the entropy's sum and count, for the metrics (0, 0: not measured)


class LossUnits(Protocol):
    """What one term of the loss is (`loss_units`: a token, or a chosen command)."""

    def size(self, episode: EpisodeRollout) -> tuple[int, int]:
        """The episode's forward length and its count of loss units."""

    def score(self, sequences: list[LearnSequence], learner: Learner, with_entropy: bool) -> ScoredUnits:
        """The units of `sequences` under the learner's model (`Learner.forward`, `Learner.reference`)."""


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """One optimizer step's trust-region diagnostics, measured on its mini-batch before the step."""

    loss: float
    clip_fraction: float
    kl: float  # to the base model (0 without kl_beta)
    approx_kl: float  # k3 to the behaviour policy
    ratio_mean: float
    ratio_p50: float
    ratio_p99: float
    ratio_max: float
    grad_norm: float  # before clipping
    taken: bool  # False: target_kl stopped the iteration here


@dataclass(frozen=True, kw_only=True)
class LearnStats:
    steps: int  # optimizer steps taken
    loss: float
    clip_fraction: float
    kl: float
    ratio: float
    entropy: float
    grad_norm: float
    loss_tokens: int
    approx_kl: float = 0.0
    ratio_p50: float = 1.0
    ratio_p99: float = 1.0  # the largest of the steps'
    ratio_max: float = 1.0
    early_stopped: bool = False
    per_step: tuple[StepStats, ...] = ()
    time_forward: float = 0.0  # seconds in the micro-batches' forwards (packing, the model, the loss)
    time_backward: float = 0.0  # in their backwards
    time_optimizer: float = 0.0  # in gradient clipping, the optimizer's steps and zeroing the gradients


def row_width(lengths: Sequence[int], most: int) -> int:
    """The width to pack sequences of `lengths` into: rows of about ROW_TARGET tokens, as few as fit, filled evenly.

    Too wide wastes attention (a row's block-diagonal mask is dense: 2048 columns for sequences of 60 tokens spend
    more on masked attention than on the model); too narrow or uneven wastes padding (eight sequences of 67 tokens
    in rows of 512 leave a second row of one sequence padded to 469)."""
    longest, total = max(lengths), sum(lengths)
    rows = max(1, math.ceil(total / ROW_TARGET))
    width = max(longest, math.ceil(total / rows))
    while width < most and _rows_needed(lengths, width) > rows:
        width += max(1, longest // 8)
    return min(width, most)


def micro_batches(lengths: Sequence[int], most: int) -> list[list[int]]:
    """Consecutive runs of sequence indices of at most `most` tokens each (a longer sequence is a run of its own)."""
    batches: list[list[int]] = []
    tokens = 0
    for index, length in enumerate(lengths):
        if not batches or tokens + length > most:
            batches.append([])
            tokens = 0
        batches[-1].append(index)
        tokens += length
    return batches


def _rows_needed(lengths: Sequence[int], width: int) -> int:
    """Rows first-fit decreasing fills at `width` (the packer's own rule)."""
    return len(first_fit_decreasing(list(lengths), width)[2])


class PackedLogprobs(torch.nn.Module):
    """`sequence_logprobs` (or, given a tree, `choice_logprobs`) as a module, so that DDP's forward (which arms the
    gradient all-reduce) runs it."""

    def __init__(self, model: torch.nn.Module, temperature: float, choice_score: str = "mean") -> None:
        super().__init__()
        self.model, self.temperature, self.choice_score = model, temperature, choice_score_rule(choice_score)

    def forward(self, batch: PackedBatch | ChoiceTree, with_entropy: bool) -> Any:
        if isinstance(batch, ChoiceTree):
            return choice_logprobs(self.model, batch, temperature=self.temperature, score=self.choice_score)
        if with_entropy:
            logprobs, entropy = sequence_logprobs(self.model, batch, temperature=self.temperature, with_entropy=True)
            return logprobs, entropy
        return sequence_logprobs(self.model, batch, temperature=self.temperature), None  # type: ignore[return-value]


class Learner:
    def __init__(self, policy: Policy, optimizer: torch.optim.Optimizer, config: TrainConfig, dist: Distributed,
                 units: LossUnits) -> None:
        self.policy, self.optimizer, self.dist, self.units = policy, optimizer, dist, units
        self.optim, self.loss = config.optim, config.loss
        self.aggregate = AGGREGATIONS[config.loss.aggregation]
        # Tokens are scored as they were sampled; a packed row is at most one full context wide.
        self.scorer = PackedLogprobs(policy.model, config.rollout.temperature, config.rollout.choice_score)
        self.row_tokens = config.rollout.max_context_tokens
        self.module = dist.wrap(self.scorer, policy.device)
        pad = policy.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else 0)

    def update(self, local: Sequence[LearnSequence], table: Sequence[SequenceInfo], *, seed: int,
               iteration: int) -> LearnStats:
        """Train on the batch whose sequences `table` lists (every rank's); `local` are this rank's."""
        by_key = {s.key: s for s in local}
        order = sorted(table, key=lambda info: info.key)
        steps: list[StepStats] = []
        entropy_sum = entropy_count = 0.0
        stopped = False
        seconds = np.zeros(3)  # forward, backward, optimizer
        for epoch in range(self.optim.epochs):
            permutation = np.random.default_rng([seed, iteration, epoch]).permutation(len(order))
            for part in np.array_split(permutation, self.optim.mini_batches):
                members = [order[i] for i in part]
                total_tokens = sum(m.loss_tokens for m in members)
                if total_tokens == 0:
                    continue
                step, entropy = self._step(members, by_key, total_tokens, with_entropy=epoch == 0,
                                           may_stop=bool(steps), seconds=seconds,
                                           where=f"iteration {iteration + 1}, optimizer step {len(steps) + 1}")
                steps.append(step)
                entropy_sum, entropy_count = entropy_sum + entropy[0], entropy_count + entropy[1]
                if not step.taken:
                    stopped = True
                    break
            if stopped:
                break
        taken = [step for step in steps if step.taken]
        mean = {name: float(np.mean([getattr(step, name) for step in taken])) if taken else 0.0
                for name in ("loss", "clip_fraction", "kl", "approx_kl", "ratio_mean", "grad_norm")}
        return LearnStats(steps=len(taken), loss=mean["loss"], clip_fraction=mean["clip_fraction"], kl=mean["kl"],
                          ratio=mean["ratio_mean"] if taken else 1.0, grad_norm=mean["grad_norm"],
                          entropy=float(entropy_sum) / max(entropy_count, 1),
                          loss_tokens=sum(m.loss_tokens for m in order), approx_kl=mean["approx_kl"],
                          ratio_p50=float(np.median([s.ratio_p50 for s in steps])) if steps else 1.0,
                          ratio_p99=max((s.ratio_p99 for s in steps), default=1.0),
                          ratio_max=max((s.ratio_max for s in steps), default=1.0), early_stopped=stopped,
                          per_step=tuple(steps), time_forward=float(seconds[0]), time_backward=float(seconds[1]),
                          time_optimizer=float(seconds[2]))

    def _step(self, members: list[SequenceInfo], by_key: dict[tuple[int, int], LearnSequence], total_tokens: int, *,
              with_entropy: bool, may_stop: bool, seconds: np.ndarray,
              where: str) -> tuple[StepStats, tuple[float, float]]:
        """One optimizer step on a mini-batch (not taken when `may_stop` and its KL is past `target_kl`); its
        diagnostics and entropy sums. Adds the seconds of its forwards, backwards and optimizer to `seconds`.
        A non-finite loss or gradient norm raises DivergedError before the step, non-finite weights after it."""
        total_sequences = sum(1 for m in members if m.loss_tokens)
        plans = [self._micro_batches([m for m in members if m.rank == rank]) for rank in range(self.dist.world)]
        mine = plans[self.dist.rank]
        count = max(len(plan) for plan in plans)
        terms = torch.zeros(5, dtype=torch.float64)
        ratios: list[Tensor] = []
        entropy_sum = entropy_count = 0.0
        for index in range(count):
            last = index == count - 1
            sequences = [by_key[m.key] for m in mine[index]] if index < len(mine) else []
            sync = contextlib.nullcontext() if last or not self.dist.active else self.module.no_sync()  # type: ignore[operator]
            with sync:
                started = time.perf_counter()
                loss, parts, unit_ratios, entropy = self._micro_batch(sequences, total_tokens, total_sequences,
                                                                      with_entropy)
                forward = time.perf_counter()
                loss.backward()
                seconds[:2] += forward - started, time.perf_counter() - forward
            terms += parts
            ratios.append(unit_ratios)
            entropy_sum, entropy_count = entropy_sum + entropy[0], entropy_count + entropy[1]
        totals = self._sum_over_ranks(torch.cat([terms, torch.tensor([entropy_sum, entropy_count])]))
        spread = self._ratio_quantiles(torch.cat(ratios))
        taken = not (may_stop and self.loss.target_kl and float(totals[4]) > self.loss.target_kl)
        started = time.perf_counter()
        norm = torch.nn.utils.clip_grad_norm_(self.policy.trainable_parameters(),
                                              self.optim.max_grad_norm or float("inf"))
        diverged = not_finite_update(totals, float(norm), self.scorer.temperature, self.loss, self.optim)
        if diverged is not None:
            raise DivergedError(f"{where}: {diverged}")
        if taken:
            self.optimizer.step()
            require_finite_weights(self.policy.trainable_parameters(), where, float(totals[0]), float(norm),
                                   self.optim)
        self.optimizer.zero_grad(set_to_none=True)
        seconds[2] += time.perf_counter() - started
        stats = StepStats(loss=float(totals[0]), clip_fraction=float(totals[1]), kl=float(totals[2]),
                          ratio_mean=float(totals[3]), approx_kl=float(totals[4]), ratio_p50=spread[0],
                          ratio_p99=spread[1], ratio_max=spread[2], grad_norm=float(norm), taken=taken)
        return stats, (float(totals[5]), float(totals[6]))

    def _ratio_quantiles(self, ratios: Tensor) -> tuple[float, float, float]:
        """The median, 99th percentile and maximum of the mini-batch's ratios over every rank."""
        values = ratios.double().cpu().numpy()
        if self.dist.active:
            values = np.concatenate([np.asarray(v) for v in self.dist.gather(values.tolist())])
        if not len(values):
            return 1.0, 1.0, 1.0
        return float(np.median(values)), float(np.quantile(values, 0.99)), float(values.max())

    def _micro_batches(self, members: list[SequenceInfo]) -> list[list[SequenceInfo]]:
        return [[members[i] for i in part]
                for part in micro_batches([m.length for m in members], self.optim.micro_batch_tokens)]

    def _micro_batch(self, sequences: list[LearnSequence], total_tokens: int, total_sequences: int,
                     with_entropy: bool) -> tuple[Tensor, Tensor, Tensor, tuple[float, float]]:
        """The weighted loss of a micro-batch; its metric sums (loss, clipped, kl, ratio, behaviour kl), its units'
        ratios and its entropy sum and count."""
        if not sequences:  # this rank has nothing here: a zero-weight pass keeps DDP's backward count in step
            batch = pack_sequences([[self.pad_id, self.pad_id]], [[False, True]],
                                   max_tokens_per_row=self.row_tokens, pad_id=self.pad_id)
            logprobs, _ = self.module(batch, False)
            return logprobs[0].sum() * 0.0, torch.zeros(5, dtype=torch.float64), torch.ones(0), (0.0, 0.0)
        units = self.units.score(sequences, self, with_entropy)
        weights = aggregation_weights(units.counts, self.aggregate, total_tokens=total_tokens,
                                      total_sequences=total_sequences)
        weights = weights * torch.repeat_interleave(torch.tensor([s.weight for s in sequences], dtype=torch.float32),
                                                    torch.tensor(units.counts))
        terms = clipped_surrogate(units.logp, units.old, units.advantages, weights.to(units.logp.device),
                                  clip_eps=self.loss.clip_eps, dual_clip=self.loss.dual_clip, ref_logp=units.ref,
                                  kl_beta=self.loss.kl_beta, entropy=units.entropy,
                                  entropy_coef=self.loss.entropy_coef)
        # DDP averages gradients over ranks; the weights already divide by the totals of every rank.
        loss = terms.loss * self.dist.world
        parts = torch.tensor([float(terms.loss.detach()), float(terms.clipped), float(terms.kl), float(terms.ratio),
                              float(terms.behaviour_kl)], dtype=torch.float64)
        return loss, parts, terms.ratios, units.entropy_sum

    def forward(self, batch: PackedBatch | ChoiceTree, with_entropy: bool) -> Any:
        """The scorer's forward with gradient, through DDP (whose forward arms the gradient all-reduce)."""
        return self.module(batch, with_entropy)

    def reference(self, batch: PackedBatch | ChoiceTree) -> Any:
        """The base model's scores of `batch` (the adapter off, no gradient) for the KL term; None without it."""
        if not self.loss.kl_beta > 0:
            return None
        with torch.no_grad(), self.policy.base_model():
            return self.scorer(batch, False)

    @torch.no_grad()
    def off_policy_correction(self, sequences: Sequence[LearnSequence], *, cap: float) -> list[LearnSequence]:
        """For rollouts another engine sampled: old log-probs recomputed by this model, and each sequence weighted
        by its masked importance weight against the sampler's (`grpo.loss.sequence_importance_weights`); a hinted
        sequence's old log-probs are recomputed on its plain prompt and its weight stays 1 (see the module)."""
        by_key = {s.key: s for s in sequences}
        infos = [SequenceInfo(key=s.key, length=len(s.token_ids), loss_tokens=0, rank=0) for s in sequences]
        out = []
        for chunk in self._micro_batches(infos):
            members = [by_key[info.key] for info in chunk]
            batch = self.pack(members)
            trainer = [logp.cpu() for logp in self.scorer(batch, False)[0]]
            sampler = [torch.from_numpy(s.old_logprobs[s.loss_mask]) for s in members]
            weights = sequence_importance_weights(trainer, sampler, cap=cap)
            for member, recomputed, weight in zip(members, trainer, weights, strict=True):
                old = member.old_logprobs.copy()
                old[member.loss_mask] = recomputed.numpy()
                out.append(dataclasses.replace(member, old_logprobs=old, weight=1.0 if member.hinted else weight))
        return out

    def pack(self, sequences: Sequence[LearnSequence]) -> PackedBatch:
        return pack_sequences([s.token_ids.tolist() for s in sequences], [s.loss_mask.tolist() for s in sequences],
                              max_tokens_per_row=row_width([len(s.token_ids) for s in sequences],
                                                           self.row_tokens),
                              pad_id=self.pad_id)

    def _sum_over_ranks(self, values: Tensor) -> Tensor:
        if not self.dist.active:
            return values
        return torch.tensor(np.sum(self.dist.gather(values.tolist()), axis=0), dtype=torch.float64)
