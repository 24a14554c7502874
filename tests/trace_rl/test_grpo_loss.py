"""The GRPO loss against a hand computation, and its aggregation and importance weights."""

from __future__ import annotations

import math

import pytest
import torch
from tracec.trace_rl.grpo_loss import aggregation_weights, clipped_surrogate, sequence_importance_weights

# Two sequences: A has two loss tokens with advantage +1, B two with advantage +0.5 (eps = 0.2).
LOGP = [-1.0, -2.0, -0.5, -0.3]
OLD = [-1.1, -1.5, -0.9, -0.3]
ADV = [1.0, 1.0, 0.5, 0.5]
REF = [-1.0, -1.0, -0.7, -0.3]


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
    logp = torch.tensor(LOGP, requires_grad=True)
    weights = aggregation_weights([2, 2], aggregation, total_tokens=4, total_sequences=2)
    terms = clipped_surrogate(logp, torch.tensor(OLD), torch.tensor(ADV), weights, clip_eps=0.2,
                              ref_logp=torch.tensor(REF) if beta else None, kl_beta=beta)
    terms.loss.backward()
    loss, grad, clipped = _by_hand(aggregation, beta)
    assert terms.loss.item() == pytest.approx(loss, abs=1e-6)
    assert logp.grad is not None and logp.grad.tolist() == pytest.approx(grad, abs=1e-6)
    assert float(terms.clipped) == pytest.approx(clipped) and clipped == pytest.approx(0.25)


def test_the_aggregations_weigh_long_sequences_differently() -> None:
    # a sequence of 3 loss tokens and one of 1, in a mini-batch of 4 tokens and 2 sequences
    assert aggregation_weights([3, 1], "sequence_mean", total_tokens=4, total_sequences=2).tolist() == \
        pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2])
    assert aggregation_weights([3, 1], "token_mean", total_tokens=4, total_sequences=2).tolist() == \
        pytest.approx([0.25] * 4)
    # the same two sequences seen by one of two ranks that share the mini-batch: the weights use the totals
    assert aggregation_weights([3], "sequence_mean", total_tokens=4, total_sequences=2).tolist() == \
        pytest.approx([1 / 6] * 3)
    with pytest.raises(ValueError, match="sequence_mean"):
        aggregation_weights([1], "mean", total_tokens=1, total_sequences=1)


def test_sequence_importance_weights_are_masked_above_the_cap() -> None:
    trainer = [torch.tensor([-1.0, -1.0]), torch.tensor([-0.5]), torch.tensor([-3.0])]
    sampler = [torch.tensor([-1.2, -1.1]), torch.tensor([-2.0]), torch.tensor([-2.0])]
    weights = sequence_importance_weights(trainer, sampler, cap=3.0)
    assert weights[0] == pytest.approx(math.exp(0.3))
    assert weights[1] == 0.0  # exp(1.5) = 4.5 > 3: masked out
    assert weights[2] == pytest.approx(math.exp(-1.0))
