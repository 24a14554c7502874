"""The GRPO loss against a hand computation, and its aggregation and importance weights."""

from __future__ import annotations

import math

import pytest
import torch
from numerics import tolerance
from tracec.trace_rl.grpo.config import ConfigError, config_from_dict
from tracec.trace_rl.grpo.loss import (
    AGGREGATIONS,
    aggregation_weights,
    clipped_surrogate,
    sequence_importance_weights,
    sequence_mean,
    token_mean,
)

# Two sequences: A has two loss tokens with advantage +1, B two with advantage +0.5 (eps = 0.2).
LOGP = [-1.0, -2.0, -0.5, -0.3]
OLD = [-1.1, -1.5, -0.9, -0.3]
ADV = [1.0, 1.0, 0.5, 0.5]
REF = [-1.0, -1.0, -0.7, -0.3]
# The rule (tests/numerics.py) for the loss and its gradient in fp64 against the hand computation: ~10 roundings a
# token (the ratio's exp, the clip, k3's exp and sums, the weight) at values below 2, then a sum over 4 tokens.
LOSS_TOLERANCE = tolerance(4 * 10 + 4, 2.0, torch.float64)


def _by_hand(aggregation: str, beta: float) -> tuple[float, list[float], float]:
    """Loss, d loss / d logp, and clip fraction, token by token from the formulas."""
    eps = 0.2
    rho = [math.exp(a - b) for a, b in zip(LOGP, OLD)]  # 1.105, 0.607, 1.492, 1.0
    weights = {"sequence_mean": [1 / (2 * 2)] * 4, "token_mean": [1 / 4] * 4}[aggregation]
    objective, grad, clipped = [], [], 0.0
    for r, a, lp, ref, c in zip(rho, ADV, LOGP, REF, weights):
        bound = min(max(r, 1 - eps), 1 + eps)
        surrogate = min(r * a, bound * a)
        active = (r < 1 - eps and a < 0) or (r > 1 + eps and a > 0)
        kl = math.exp(ref - lp) - (ref - lp) - 1
        objective.append(c * (surrogate - beta * kl))
        # d/dlogp of rho*a is rho*a (where unclipped); of k3 it is 1 - exp(ref - logp)
        grad.append(-c * ((0.0 if active else r * a) - beta * (1 - math.exp(ref - lp))))
        clipped += c * active
    return -sum(objective), grad, clipped


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean"])
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_loss_and_gradient_match_a_hand_computation(aggregation: str, beta: float) -> None:
    logp = torch.tensor(LOGP, dtype=torch.float64, requires_grad=True)
    weights = aggregation_weights([2, 2], AGGREGATIONS[aggregation], total_tokens=4,
                                  total_sequences=2)  # 1/4: exact in fp32
    as_64 = {"dtype": torch.float64}
    terms = clipped_surrogate(logp, torch.tensor(OLD, **as_64), torch.tensor(ADV, **as_64), weights, clip_eps=0.2,
                              ref_logp=torch.tensor(REF, **as_64) if beta else None, kl_beta=beta)
    terms.loss.backward()
    loss, grad, clipped = _by_hand(aggregation, beta)
    assert terms.loss.dtype == torch.float64
    assert terms.loss.item() == pytest.approx(loss, abs=LOSS_TOLERANCE)
    assert logp.grad is not None and logp.grad.tolist() == pytest.approx(grad, abs=LOSS_TOLERANCE)
    assert float(terms.clipped) == clipped == 0.25  # sums of a weight 1/4: exact


def test_the_dual_clip_bounds_negative_advantages_by_c_times_a() -> None:
    """Tokens with A < 0 and a ratio far past 1 + eps: without the dual clip the term (and its gradient) grows with
    rho; with c = 3 it is c * A, constant in logp, exactly where rho * A < c * A; positive advantages are untouched."""
    logp_values, old_values = [0.0, 0.0, 0.0, -2.0], [-3.0, -0.5, -3.0, -2.0]  # rho = e^3, e^0.5, e^3, 1
    advantages = torch.tensor([-1.0, -1.0, 1.0, -0.5], dtype=torch.float64)
    weights = torch.full((4,), 0.25, dtype=torch.float64)

    def run(dual: float) -> tuple[float, list[float], float]:
        logp = torch.tensor(logp_values, dtype=torch.float64, requires_grad=True)
        terms = clipped_surrogate(logp, torch.tensor(old_values, dtype=torch.float64), advantages, weights,
                                  clip_eps=0.2, dual_clip=dual)
        terms.loss.backward()
        assert logp.grad is not None
        return terms.loss.item(), logp.grad.tolist(), float(terms.clipped)

    rho = [math.exp(a - b) for a, b in zip(logp_values, old_values)]
    by_hand = []
    for r, a in zip(rho, advantages.tolist()):
        surrogate = min(r * a, min(max(r, 0.8), 1.2) * a)
        by_hand.append(max(surrogate, 3 * a) if a < 0 else surrogate)
    loss, grad, clipped = run(3.0)
    # the rule (tests/numerics.py): ~6 roundings a token (exp, products, clips) at values up to e^3, a sum of 4
    close = tolerance(4 * 6 + 4, math.exp(3), torch.float64)
    assert loss == pytest.approx(-0.25 * sum(by_hand), abs=close)
    # token 0: rho * A = -20 < -3, bounded, no gradient; token 1: rho * A = -1.65 > -3, unbounded as before;
    # token 2 (A > 0) is clipped above as usual; token 3: rho = 1.
    assert grad == pytest.approx([0.0, 0.25 * rho[1], 0.0, 0.25 * 0.5], abs=close)
    assert clipped == 0.5  # tokens 0 (dual) and 2 (upper clip): sums of a weight 1/4, exact
    plain_loss, plain_grad, _ = run(0.0)
    assert plain_grad[0] == pytest.approx(0.25 * rho[0], abs=close) and plain_loss > loss + 4


def test_the_aggregations_weigh_long_sequences_differently() -> None:
    # a sequence of 3 loss tokens and one of 1, in a mini-batch of 4 tokens and 2 sequences
    # fp32 weights: a division in fp64 and the conversion, two roundings relative to the weight (tests/numerics.py)
    relative = tolerance(2, 1.0, torch.float32)
    assert aggregation_weights([3, 1], sequence_mean, total_tokens=4, total_sequences=2).tolist() == \
        pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2], rel=relative)
    assert aggregation_weights([3, 1], token_mean, total_tokens=4, total_sequences=2).tolist() == [0.25] * 4
    # the same two sequences seen by one of two ranks that share the mini-batch: the weights use the totals
    assert aggregation_weights([3], sequence_mean, total_tokens=4, total_sequences=2).tolist() == \
        pytest.approx([1 / 6] * 3, rel=relative)
    # every aggregation the config offers has its weights
    with pytest.raises(ConfigError, match="sequence_mean"):
        config_from_dict({"loss": {"aggregation": "mean"}})
    assert set(AGGREGATIONS) == {"sequence_mean", "token_mean"}


def test_sequence_importance_weights_are_masked_above_the_cap() -> None:
    as_64 = {"dtype": torch.float64}
    trainer = [torch.tensor([-1.0, -1.0], **as_64), torch.tensor([-0.5], **as_64), torch.tensor([-3.0], **as_64)]
    sampler = [torch.tensor([-1.2, -1.1], **as_64), torch.tensor([-2.0], **as_64), torch.tensor([-2.0], **as_64)]
    weights = sequence_importance_weights(trainer, sampler, cap=3.0)
    # relative to the weight: the inputs' and their differences' roundings at values up to 3, the sum, the exp
    relative = tolerance(8, 3.0, torch.float64)
    assert weights[0] == pytest.approx(math.exp(0.3), rel=relative)
    assert weights[1] == 0.0  # exp(1.5) = 4.5 > 3: masked out
    assert weights[2] == pytest.approx(math.exp(-1.0), rel=relative)
