"""The command-level loss of the admissible mode and the trust-region diagnostics of every update.

The tree re-scoring is checked against plain full-context forwards of each candidate (no cache, no tree), and the
loss, its ratio and its gradient against a direct transcription of the formulas on the tiny model; the diagnostics
on an update whose second mini-batch must move the ratio; the KL target on one that must stop.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch
from numerics import float64_model, forward_roundings, forward_size, tolerance
from test_admissible_mode import CommandEnv, _engine, _plain_scores
from tracec.trace_rl.grpo.config import ConfigError, TrainConfig, config_from_dict
from tracec.trace_rl.grpo.credit import GRPOCredit
from tracec.trace_rl.grpo.distributed import Distributed
from tracec.trace_rl.grpo.learner import Learner, LearnSequence, SequenceInfo
from tracec.trace_rl.grpo.loss_units import CommandUnits
from tracec.trace_rl.grpo.train import learn_sequence
from tracec.trace_rl.policy.choice_policy import (
    ChoiceTurn,
    choice_logprobs,
    choice_score_rule,
    choice_tree,
    tree_length,
)
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import EpisodeRollout, GroupTask

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _adapted(seed: int = 2) -> Policy:
    policy = Policy.load("tiny", LoraSection(rank=4, alpha=8), seed=seed)
    torch.manual_seed(seed)
    with torch.no_grad():  # a non-zero adapter: the scores are the adapted policy's
        for p in policy.trainable_parameters():
            p.normal_(0, 0.05)
    return policy


def _episodes(policy: Policy, score: str = "mean", groups: int = 2, size: int = 3) -> list[EpisodeRollout]:
    engine = _engine(policy, score=score, max_turns=3)
    with torch.no_grad():
        return engine.run([GroupTask(group=g, seed=g + 1) for g in range(groups)], group_size=size, seed=0,
                          iteration=0)


def _direct_token_logprobs(policy: Policy, episode: EpisodeRollout, turn: ChoiceTurn) -> list[torch.Tensor]:
    """Per candidate of the turn, its tokens' log-probs (in the model's dtype) from a plain forward of context +
    candidate."""
    context = episode.token_ids[:turn.start].tolist()
    out = []
    for choice in turn.choices:
        logprobs = torch.log_softmax(policy.model(input_ids=torch.tensor([context + list(choice)])).logits[0], dim=-1)
        out.append(torch.stack([logprobs[len(context) - 1 + j, t] for j, t in enumerate(choice)]))
    return out


def _direct_log_pi(policy: Policy, episode: EpisodeRollout, turn: ChoiceTurn, score: str) -> torch.Tensor:
    """log softmax over the turn's candidates of their scores, each from a plain forward of context + candidate."""
    tokens = _direct_token_logprobs(policy, episode, turn)
    return torch.log_softmax(torch.stack([t.mean() if score == "mean" else t.sum() for t in tokens]), dim=0)


def _log_pi_tolerance(per_token: float, turns: list[ChoiceTurn], score: str) -> float:
    """How far two computations of log pi(c|s), or of the entropy, may differ when each may be off by `per_token`
    in a token's log-prob: a sum score adds its tokens' errors, a mean keeps them; log pi subtracts two scores (the
    candidate's and the log-sum-exp of all), and the entropy weighs log pi by probabilities that sum to 1."""
    tokens = max(len(c) for t in turns for c in t.choices) if score == "sum" else 1
    return 2 * tokens * per_token


def _sampler_tolerance(policy: Policy, magnitude: float, turns: list[ChoiceTurn], score: str) -> float:
    """How far the sampler's log pi(c|s) may be from an fp64 forward's, for token log-probs of size <= `magnitude`:
    it rounds the logits to fp32 (`KVCacheSampler._run`) and takes their log-softmax in fp32, a sum over the
    vocabulary of terms <= 1 and a few roundings at the log-probs' size."""
    per_token = tolerance(policy.model.config.vocab_size, 1.0, torch.float32) + tolerance(8, magnitude, torch.float32)
    return _log_pi_tolerance(per_token, turns, score)


def _largest(tokens: list[list[torch.Tensor]]) -> float:
    """The size of the token log-probs (at least 1): the m of the rule (tests/numerics.py)."""
    return max(1.0, max(float(c.abs().max()) for candidates in tokens for c in candidates))


@pytest.mark.parametrize("score", ["mean", "sum"])
def test_the_tree_scores_every_candidate_as_a_plain_forward_would(score: str) -> None:
    policy = _adapted()
    float64_model(policy.model)  # the tree's and the plain forwards' orders of summation agree to ~1e-14
    episodes = _episodes(policy, score)
    turns = [t for e in episodes for t in e.choice_turns]
    tree = choice_tree([e.token_ids.tolist() for e in episodes], [e.choice_turns for e in episodes],
                       row_tokens=150, pad_id=policy.tokenizer.pad_token_id)
    assert tree.input_ids.shape[0] > 1  # several rows, several trees a row: the mask keeps them apart
    with torch.no_grad():
        scored = choice_logprobs(policy.model, tree, temperature=1.0, score=choice_score_rule(score))
        tokens = [_direct_token_logprobs(policy, e, t) for e in episodes for t in e.choice_turns]
    direct = [torch.log_softmax(torch.stack([c.mean() if score == "mean" else c.sum() for c in candidates]), dim=0)
              for candidates in tokens]
    chosen = torch.stack([d[t.chosen] for d, t in zip(direct, turns)])
    entropy = torch.stack([-(d.exp() * d).sum() for d in direct])
    old = torch.tensor([t.old_logprob for t in turns], dtype=torch.float64)
    # The rule (tests/numerics.py): a token's log-prob is one forward's output, its roundings at the size of the
    # forward's values. A leak of the tree's mask between candidates moves log pi by 5e-3 (mean) to 7e-2 (sum);
    # this fp64 bound is 6e-12 (mean) and 3e-10 (sum).
    magnitude = _largest(tokens)
    length = max(t.start + len(c) for t in turns for c in t.choices)
    size = max(magnitude, *(forward_size(policy.model, torch.tensor([e.token_ids.tolist()])) for e in episodes))
    forward = _log_pi_tolerance(tolerance(forward_roundings(policy.model.config, length), size, torch.float64),
                                turns, score)
    assert scored.chosen.dtype == torch.float64
    torch.testing.assert_close(scored.chosen, chosen, atol=forward, rtol=0)
    torch.testing.assert_close(scored.entropy, entropy, atol=forward, rtol=0)
    sampler = _sampler_tolerance(policy, magnitude, turns, score)  # what the sampler drew with
    torch.testing.assert_close(scored.chosen, old, atol=sampler, rtol=0)
    plain = _plain_scores(policy, episodes[0].token_ids[:turns[0].start].tolist(),
                          [list(c) for c in turns[0].choices], 1.0, score)
    torch.testing.assert_close(torch.log_softmax(torch.tensor(plain), 0), direct[0], atol=forward, rtol=0)


def _command_level(*, optim: dict[str, Any], loss: dict[str, Any] | None = None) -> TrainConfig:
    """A run's config at the command level (the admissible mode's loss) with these `[optim]` and `[loss]` keys."""
    return config_from_dict({"rollout": {"action_mode": "admissible"}, "optim": optim, "loss": loss or {}})


def _learn_batch(policy: Policy, shift: float) -> tuple[list[LearnSequence], list[SequenceInfo]]:
    """The episodes as learner sequences, their old log-probs moved by +-`shift` so that some ratios clip."""
    episodes = _episodes(policy, groups=2, size=3)
    advantages = GRPOCredit()(episodes)
    sequences = []
    for index, (episode, advantage) in enumerate(zip(episodes, advantages, strict=True)):
        sequence = learn_sequence(episode, advantage)
        moved = tuple(dataclasses.replace(t, old_logprob=t.old_logprob + shift * (-1) ** (index + k))
                      for k, t in enumerate(sequence.choice_turns))
        ramp = tuple(a + 0.5 * k - 0.5 for k, a in enumerate(sequence.choice_advantages))  # non-zero, mixed signs
        sequences.append(dataclasses.replace(sequence, choice_turns=moved, choice_advantages=ramp))
    table = [SequenceInfo(key=s.key, length=tree_length(len(s.token_ids), s.choice_turns),
                          loss_tokens=len(s.choice_turns), rank=0) for s in sequences]
    return sequences, table


def test_the_command_loss_its_ratio_and_gradient_match_a_direct_transcription() -> None:
    policy = _adapted()
    float64_model(policy.model)  # fp64 forwards: the rounding left is the learner's loss arithmetic, in fp32
    sequences, table = _learn_batch(policy, shift=0.3)
    eps, coef = 0.2, 0.01
    parameters = policy.trainable_parameters()
    # The direct transcription: per turn rho = pi / pi_old, min(rho A, clip(rho) A) + alpha H, a mean over each
    # episode's turns, then over episodes; each term of each turn kept apart, with its gradient.
    terms, logs = [], []
    for sequence in sequences:
        share = len(sequence.choice_turns) * len(sequences)
        for turn, advantage in zip(sequence.choice_turns, sequence.choice_advantages, strict=True):
            log_pi = _direct_log_pi(policy, _as_rollout(sequence), turn, "mean")
            rho = torch.exp(log_pi[turn.chosen] - turn.old_logprob)
            surrogate = torch.minimum(rho * advantage, torch.clamp(rho, 1 - eps, 1 + eps) * advantage)
            terms += [-surrogate / share, coef * (log_pi.exp() * log_pi).sum() / share]
            logs += [float(log_pi[turn.chosen]), turn.old_logprob]
    expected = float(sum(terms))
    by_term = [torch.autograd.grad(term, parameters, retain_graph=True) for term in terms]
    grads = [torch.stack(g).sum(dim=0) for g in zip(*by_term)]
    sizes = [torch.stack(g).abs().sum(dim=0) for g in zip(*by_term)]  # what each entry's sum accumulates
    before = [p.detach().clone() for p in parameters]
    learner = Learner(policy, torch.optim.SGD(parameters, lr=1.0),
                      _command_level(optim={"max_grad_norm": 0.0, "mini_batches": 1},
                                     loss={"clip_eps": eps, "entropy_coef": coef}), Distributed(), CommandUnits())
    stats = learner.update(sequences, table, seed=0, iteration=0)
    # The learner takes log pi to fp32 for the loss (`Learner._command_units`): ~16 roundings a term, at the size
    # of the log-probs (the casts, log pi - old, the ratio's exp, the clip, the weight), then the loss sums the
    # terms. The gradient carries those roundings to each term's share of it (`sizes`), relative to that share.
    relative = tolerance(16, max(1.0, *map(abs, logs)), torch.float32)
    assert stats.steps == 1
    assert stats.loss == pytest.approx(expected, abs=relative * sum(abs(float(t)) for t in terms))
    assert 0 < stats.clip_fraction < 1  # the shifted old log-probs put some turns outside the clip range
    for grad, size, old, new in zip(grads, sizes, before, parameters, strict=True):
        assert ((old - new.detach()) - grad).abs().le(relative * size).all()
    assert any(g.abs().max() > 1e-4 for g in grads)


def _as_rollout(sequence: LearnSequence) -> EpisodeRollout:
    return EpisodeRollout(group=0, member=0, seed=0, episode="e", token_ids=sequence.token_ids,
                          sampler_logprobs=sequence.old_logprobs, step_of_token=np.zeros(0, dtype=np.int32),
                          sampled=np.zeros(0, dtype=bool), trajectory={}, reward=0.0, success=False,
                          truncated=False, turns=len(sequence.choice_turns), choice_turns=sequence.choice_turns)


def test_the_second_mini_batch_sees_the_first_steps_ratio_and_the_diagnostics_say_so() -> None:
    policy = _adapted()
    float64_model(policy.model)  # fp64 forwards: the first step's ratio is 1 up to the sampler's fp32 rounding
    sequences, table = _learn_batch(policy, shift=0.0)
    turns = [t for s in sequences for t in s.choice_turns]
    with torch.no_grad():
        magnitude = _largest([_direct_token_logprobs(policy, _as_rollout(s), t) for s in sequences
                              for t in s.choice_turns])
    # the ratio exp(log pi - old) and its k3 KL, exp(-x) + x - 1, are computed in fp32 from log-probs this close
    ratio_error = _sampler_tolerance(policy, magnitude, turns, "mean") + tolerance(4, 1.0, torch.float32)
    learner = Learner(policy, torch.optim.Adam(policy.trainable_parameters(), lr=0.05),
                      _command_level(optim={"mini_batches": 2}), Distributed(), CommandUnits())
    stats = learner.update(sequences, table, seed=0, iteration=0)
    first, second = stats.per_step
    assert first.taken and second.taken and stats.steps == 2
    assert first.ratio_max == pytest.approx(1.0, abs=ratio_error)
    assert first.approx_kl == pytest.approx(0.0, abs=ratio_error ** 2 + tolerance(4, 1.0, torch.float32))
    assert abs(second.ratio_max - 1.0) > 1e-3 and second.approx_kl > 1e-6  # far past those bounds: a step moved
    assert second.ratio_p50 <= second.ratio_p99 <= second.ratio_max
    assert stats.ratio_max == max(first.ratio_max, second.ratio_max) and first.grad_norm > 0


def test_a_kl_target_ends_the_updates_at_the_first_mini_batch_past_it() -> None:
    policy = _adapted()
    sequences, table = _learn_batch(policy, shift=0.0)
    learner = Learner(policy, torch.optim.Adam(policy.trainable_parameters(), lr=0.05),
                      _command_level(optim={"mini_batches": 3}, loss={"target_kl": 1e-7}), Distributed(),
                      CommandUnits())
    stats = learner.update(sequences, table, seed=0, iteration=0)
    after_one = [p.detach().clone() for p in policy.trainable_parameters()]
    assert stats.early_stopped and stats.steps == 1
    assert [s.taken for s in stats.per_step] == [True, False]
    assert stats.per_step[1].approx_kl > 1e-7
    # the same update without the target takes the later steps, which move the weights further
    redo = _adapted()
    Learner(redo, torch.optim.Adam(redo.trainable_parameters(), lr=0.05),
            _command_level(optim={"mini_batches": 3}), Distributed(), CommandUnits()).update(
        sequences, table, seed=0, iteration=0)
    assert any(not torch.equal(a, b.detach()) for a, b in zip(after_one, redo.trainable_parameters()))


def test_the_loss_level_follows_the_action_mode_and_refuses_what_cannot_work() -> None:
    base = {"model": {"name": "tiny"}, "env": {"kind": "python", "python": {"factory": "m:f"}}}
    admissible = config_from_dict({**base, "rollout": {"action_mode": "admissible"}})
    assert admissible.loss_level == "command"
    assert config_from_dict(base).loss_level == "token"
    assert config_from_dict({**base, "rollout": {"action_mode": "admissible"},
                             "loss": {"level": "token"}}).loss_level == "token"
    with pytest.raises(ConfigError, match="loss.level"):
        config_from_dict({**base, "loss": {"level": "command"}})
    with pytest.raises(ConfigError, match="entropy_coef"):
        config_from_dict({**base, "loss": {"entropy_coef": 0.001}})


def test_every_turn_of_an_admissible_episode_is_a_choice_turn_with_its_sampled_odds() -> None:
    policy = _adapted()
    envs: list[CommandEnv] = []
    episodes = _engine(policy, envs, max_turns=3).run([GroupTask(group=0, seed=1)], group_size=2, seed=0,
                                                      iteration=0)
    for episode in episodes:
        assert len(episode.choice_turns) == episode.turns == 3
        for turn in episode.choice_turns:
            chosen = list(turn.choices[turn.chosen])
            assert episode.token_ids[turn.start:turn.start + len(chosen)].tolist() == chosen
            assert turn.old_logprob < 0
