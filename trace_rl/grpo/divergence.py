"""An update that diverged: a loss, gradient norm or weight that is no longer finite stops the run (`DivergedError`),
with the numbers that went and the config values that usually make them go (a temperature, a KL coefficient, a
learning rate or a weight decay far out of the range a run can use), so it is the user's error, located by the
trainer. The learner checks the loss and the gradient norm before each step (both are on the host already, summed
over ranks, so every rank stops at the same step) and the weights after it (one fused max-magnitude reduction)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor
from tracec.trace_rl.grpo.config import ConfigError, LossSection, OptimSection


class DivergedError(ConfigError):
    """An optimizer step met a non-finite loss, gradient or weight: the run cannot go on."""


def not_finite_update(totals: Tensor, norm: float, temperature: float, loss: LossSection,
                      optim: OptimSection) -> str | None:
    """What went non-finite before a step (None: nothing), from the step's totals (loss, clip fraction, KL to the
    base, ratio, KL to the sampler, ...) and its gradient norm."""
    value, _, kl, ratio, approx_kl = (float(v) for v in totals[:5])
    if math.isfinite(value) and math.isfinite(norm):
        return None
    quantity = f"the loss is {value}" if not math.isfinite(value) else f"the gradient norm is {norm} (loss {value})"
    return (f"{quantity}: ratio {ratio}, KL to the base {kl}, KL to the sampler {approx_kl}; check "
            f"rollout.temperature = {temperature} (log-probs are scaled by 1/T), loss.kl_beta = {loss.kl_beta}, "
            f"optim.lr = {optim.lr} and optim.weight_decay = {optim.weight_decay} (weights grown out of range)")


def require_finite_weights(parameters: Iterable[Tensor], where: str, loss: float, norm: float,
                           optim: OptimSection) -> None:
    """The adapter's weights after a step, checked by their largest magnitude."""
    largest = float(torch.nn.utils.get_total_norm(list(parameters), norm_type=math.inf))
    if not math.isfinite(largest):
        raise DivergedError(f"{where}: the adapter's weights are not finite after the step (loss {loss}, gradient "
                            f"norm {norm} before it); check optim.lr = {optim.lr}, optim.weight_decay = "
                            f"{optim.weight_decay} and optim.betas = {list(optim.betas)}")
