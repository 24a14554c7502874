"""The GRPO objective on loss units: a clipped surrogate, an optional k3 KL to the base model, an optional entropy
bonus, two aggregations.

A loss unit t is a token of an action (the token-level loss) or one chosen command with its log pi(c|s) (the
command-level loss of the admissible mode, `choice_policy`). With ratio rho_t = exp(logp_t - logp_old_t),
advantage A_t and (command level) the entropy H_t of the candidates' distribution:

    l_t = -( min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps) A_t)  -  beta * k3_t  +  alpha * H_t ),
    k3_t = exp(logp_ref_t - logp_t) - (logp_ref_t - logp_t) - 1            (Schulman's unbiased, positive estimate)

and the batch loss is `sum_t c_t w_s(t) l_t` with weights `c_t` from the aggregation, computed over the whole
mini-batch on every rank (so gradient accumulation over micro-batches and DDP's gradient average give exactly the
one-process gradient):
- `sequence_mean` (GRPO, TRACE): c_t = 1 / (n_loss_tokens(s) * n_sequences), a mean over each sequence, then over
  sequences;
- `token_mean` (DAPO): c_t = 1 / n_loss_tokens, one mean over all loss tokens (long sequences weigh more).
Sequences without loss tokens count in neither. `w_s` is 1, or the masked sequence-level importance weight of
rollouts from another engine (vLLM): `exp(sum_t (logp_old_t - logp_sampler_t))`, set to 0 above a cap, as TRL's
`sequence_mask` mode does.

With a dual clip c > 1 (Ye et al. 2020, "dual-clip PPO"), a token with A_t < 0 takes max(that min, c A_t): the min
alone is unbounded below when rho_t grows past 1 + eps on a negative advantage, and one such token's gradient can
outweigh the batch (TRCA's dense negative step advantages meet it far more often than sparse GRPO's).

The trust-region diagnostics come from the same terms: the approximate KL to the behaviour policy
(k3 with logp_old in place of logp_ref: what PPO's `target_kl` reads), the clip fraction, and the ratios themselves
(their quantiles). Left out: token-level importance weights, GSPO's sequence-level ratio, value baselines, and the
entropy bonus of the token-level loss (the chunked log-prob kernel returns the token entropy without a gradient).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True, kw_only=True)
class SurrogateTerms:
    """A micro-batch's weighted loss and the weighted sums behind the metrics (divide by the weights' sum)."""

    loss: Tensor  # scalar, with gradient
    clipped: Tensor  # sum_t c_t [the clip bound is active at t]
    kl: Tensor  # sum_t c_t k3_t (0 without a reference)
    ratio: Tensor  # sum_t c_t rho_t
    behaviour_kl: Tensor  # sum_t c_t k3(logp_old_t, logp_t): the approximate KL to the policy that sampled
    ratios: Tensor  # (N,) rho_t, detached: for quantiles


# c_t of each sequence's loss units, from its unit count and the mini-batch's totals over every rank.
Aggregation = Callable[[Sequence[int], int, int], list[float]]  # (counts, total units, total sequences) -> per sequence


def sequence_mean(loss_counts: Sequence[int], total_tokens: int, total_sequences: int) -> list[float]:
    """GRPO's and TRACE's: a mean over each sequence, then over the sequences."""
    return [1.0 / (count * total_sequences) if count else 0.0 for count in loss_counts]


def token_mean(loss_counts: Sequence[int], total_tokens: int, total_sequences: int) -> list[float]:
    """DAPO's: one mean over every loss unit of the mini-batch."""
    return [1.0 / total_tokens] * len(loss_counts)


AGGREGATIONS: dict[str, Aggregation] = {"sequence_mean": sequence_mean, "token_mean": token_mean}  # loss.aggregation


def aggregation_weights(loss_counts: Sequence[int], aggregation: Aggregation, *, total_tokens: int,
                        total_sequences: int) -> Tensor:
    """c_t for the loss tokens of these sequences, given the mini-batch's totals over every rank. (sum counts,)"""
    per_sequence = aggregation(loss_counts, total_tokens, total_sequences)
    return torch.repeat_interleave(torch.tensor(per_sequence, dtype=torch.float64),
                                   torch.tensor(list(loss_counts), dtype=torch.long)).float()


def clipped_surrogate(logp: Tensor, old_logp: Tensor, advantages: Tensor, weights: Tensor, *, clip_eps: float,
                      dual_clip: float = 0.0, ref_logp: Tensor | None = None, kl_beta: float = 0.0,
                      entropy: Tensor | None = None, entropy_coef: float = 0.0) -> SurrogateTerms:
    """The weighted loss of loss units (all (N,) fp32; `weights` = c_t w_s, with w_s folded in by the caller).
    `dual_clip` is c (> 1), or 0 for none; `entropy` (with gradient) is each unit's H_t for the bonus."""
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    objective = torch.minimum(unclipped, clipped)
    active = ((ratio < 1.0 - clip_eps) & (advantages < 0)) | ((ratio > 1.0 + clip_eps) & (advantages > 0))
    if dual_clip:
        floor = dual_clip * advantages
        bound = (advantages < 0) & (objective < floor)
        objective = torch.where(bound, floor, objective)
        active = active | bound
    kl = torch.zeros_like(logp)
    if ref_logp is not None:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1.0
        objective = objective - kl_beta * kl
    if entropy is not None and entropy_coef:
        objective = objective + entropy_coef * entropy
    loss = -(weights * objective).sum()
    with torch.no_grad():
        behaviour = torch.exp(-log_ratio) + log_ratio - 1.0
        return SurrogateTerms(loss=loss, clipped=(weights * active.float()).sum(), kl=(weights * kl).sum(),
                              ratio=(weights * ratio).sum(), behaviour_kl=(weights * behaviour).sum(),
                              ratios=ratio.detach())


def sequence_importance_weights(trainer_logp: Sequence[Tensor], sampler_logp: Sequence[Tensor], *,
                                cap: float) -> list[float]:
    """Per sequence, exp(sum of trainer - sampler log-probs over its loss tokens), or 0 where that exceeds `cap`."""
    weights = []
    for trainer, sampler in zip(trainer_logp, sampler_logp, strict=True):
        ratio = float(torch.exp((trainer.double() - sampler.double()).sum()))
        weights.append(ratio if ratio <= cap else 0.0)
    return weights
