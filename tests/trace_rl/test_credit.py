"""Credit assignment: GRPO's group advantage per episode, TRCA's per step, each on its own action tokens only."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import rounding_error, standardized_tolerance, tolerance
from toy_env import capability_env
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.grpo.credit import (
    GRPOCredit,
    TRCACredit,
    constant_groups,
    trca_step_advantages,
)
from tracec.trace_rl.grpo.standardize import standardize_in_groups
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import EpisodeRollout, GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate

REPO = Path(__file__).resolve().parents[2]


@settings(max_examples=50, deadline=None)
@given(rewards=st.lists(st.floats(-5, 5), min_size=2, max_size=12), groups=st.integers(1, 3),
       scale=st.sampled_from(["std", "none"]))
def test_grpo_credit_is_the_group_normalised_reward(rewards: list[float], groups: int, scale: str) -> None:
    ids = np.arange(len(rewards)) % groups
    got = standardize_in_groups(np.array(rewards), ids, divide_by_std=scale == "std")  # GRPOCredit's per episode
    for i, reward in enumerate(rewards):
        members = [r for r, g in zip(rewards, ids) if g == ids[i]]
        mean = sum(members) / len(members)
        std = (sum((r - mean) ** 2 for r in members) / len(members)) ** 0.5
        expected = (reward - mean) / (std + 1e-6) if scale == "std" else reward - mean
        close = standardized_tolerance(members, 1e-6, divide=scale == "std")  # the rule (tests/numerics.py)
        assert got[i] == pytest.approx(expected, abs=close)


@pytest.fixture(scope="module")
def episodes() -> Iterator[list[EpisodeRollout]]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    policy = Policy.load("tiny", LoraSection(rank=4), seed=0)
    template = TurnTemplate(policy.tokenizer)
    sampler = KVCacheSampler(policy.model, temperature=1.0, end_of_turn_ids=template.end_of_turn_ids, pad_id=0)
    engine = RolloutEngine(sampler, template, capability_env,
                           RolloutSection(max_new_tokens=24, max_context_tokens=1024), max_turns=3)
    yield engine.run([GroupTask(group=0, seed=5), GroupTask(group=1, seed=6)], group_size=3, seed=0, iteration=0)
    torch.set_num_threads(before)


def test_trca_gives_each_step_its_own_advantage_on_its_action_tokens(episodes: list[EpisodeRollout]) -> None:
    scorer = RubricScorer.from_file(REPO / "examples" / "toolenv.rubric")
    steps = trca_step_advantages(scorer, episodes)
    tokens = TRCACredit(scorer)(episodes)
    for episode, per_step, per_token in zip(episodes, steps, tokens):
        assert len(per_step) == episode.turns
        for t in range(episode.turns):
            assert np.all(per_token[episode.step_of_token == t] == np.float32(per_step[t]))
        assert np.all(per_token[~episode.loss_mask] == 0)
    # the rubric's task groups are the rollout groups: a group scores alike alone or beside another
    alone = trca_step_advantages(scorer, [e for e in episodes if e.group == 1])
    for together, single in zip([s for e, s in zip(episodes, steps) if e.group == 1], alone):
        assert np.array_equal(together, single)  # bit for bit: a group's statistics depend on its contents only


def test_lambda_and_gamma_overrides_change_the_returns(episodes: list[EpisodeRollout]) -> None:
    path = REPO / "examples" / "toolenv.rubric"
    plain, overridden = RubricScorer.from_file(path), RubricScorer.from_file(path, lam=0.0, gamma=0.5)
    assert (overridden.config.lam, overridden.config.gamma) == (0.0, 0.5)
    assert plain.config.lam == 0.8
    a = trca_step_advantages(plain, episodes)
    b = trca_step_advantages(overridden, episodes)
    assert any(not np.allclose(x, y) for x, y in zip(a, b))


def test_the_step_scale_override_reaches_the_step_advantages(episodes: list[EpisodeRollout]) -> None:
    path = REPO / "examples" / "toolenv.rubric"
    plain, centred = RubricScorer.from_file(path), RubricScorer.from_file(path, step_scale="none")
    assert (plain.config.step_scale, centred.config.step_scale) == ("std", "none")
    a, b = trca_step_advantages(plain, episodes), trca_step_advantages(centred, episodes)
    assert any(not np.allclose(x, y) for x, y in zip(a, b))


def test_grpo_gives_every_action_token_the_episode_advantage(episodes: list[EpisodeRollout]) -> None:
    rewarded = [_with_reward(e, float(e.member)) for e in episodes]  # rewards 0, 1, 2 in each group
    tokens = GRPOCredit(divide_by_std=False)(rewarded)
    for episode, per_token in zip(rewarded, tokens):
        assert np.all(per_token[episode.loss_mask] == np.float32(episode.member - 1.0))
        assert np.all(per_token[~episode.loss_mask] == 0)
    assert constant_groups(rewarded, tokens) == set()
    flat = [_with_reward(e, 1.0) for e in episodes]
    assert constant_groups(flat, GRPOCredit()(flat)) == {0, 1}


def _with_reward(episode: EpisodeRollout, reward: float) -> EpisodeRollout:
    return dataclasses.replace(episode, reward=reward)


def test_the_oracle_credit_is_the_plan_indicator_standardized_over_its_group() -> None:
    import numpy as np
    from tracec.trace_rl.grpo.credit import oracle_advantages, signed_plan_credit
    from tracec.trace_rl.rollouts.engine import EpisodeRollout

    def episode(group: int, on_plan: list[bool]) -> EpisodeRollout:
        return EpisodeRollout(group=group, member=0, seed=0, episode=f"g{group}", token_ids=np.zeros(1, dtype=np.int64),
                              sampler_logprobs=np.zeros(1, dtype=np.float32), step_of_token=np.zeros(1, dtype=np.int32),
                              sampled=np.zeros(1, dtype=bool), trajectory={"on_plan": on_plan}, reward=0.0,
                              success=False, truncated=False, turns=len(on_plan))

    advantages = oracle_advantages([episode(0, [True, False, False]), episode(0, [False]), episode(1, [True, True])],
                                   signed_plan_credit)
    signs = np.array([1.0, -1.0, -1.0, -1.0])  # the direct transcription: (x - mean) / (std + 1e-6) over the group
    expected = (signs - signs.mean()) / (signs.std() + 1e-6)
    close = standardized_tolerance(signs, 1e-6)  # the rule (tests/numerics.py)
    np.testing.assert_allclose(np.concatenate(advantages[:2]), expected, atol=close, rtol=0)
    assert advantages[0][0] > 0 > advantages[0][1]
    assert np.array_equal(advantages[2], [0.0, 0.0])  # every step on the plan: nothing to tell apart


def test_the_imitation_weighted_oracle_weighs_a_plan_step_by_one_over_its_old_probability() -> None:
    from tracec.trace_rl.grpo.credit import imitation_plan_credit, oracle_advantages
    from tracec.trace_rl.policy.choice_policy import ChoiceTurn

    def episode(group: int, on_plan: list[bool], old_probs: list[float]) -> EpisodeRollout:
        turns = tuple(ChoiceTurn(start=0, choices=((1,), (2,)), chosen=0, old_logprob=float(np.log(p)))
                      for p in old_probs)
        return EpisodeRollout(group=group, member=0, seed=0, episode=f"g{group}", token_ids=np.zeros(1, dtype=np.int64),
                              sampler_logprobs=np.zeros(1, dtype=np.float32), step_of_token=np.zeros(1, dtype=np.int32),
                              sampled=np.zeros(1, dtype=bool), trajectory={"on_plan": on_plan}, reward=0.0,
                              success=False, truncated=False, turns=len(on_plan), choice_turns=turns)

    played = [episode(0, [True, False], [0.25, 0.5]), episode(0, [True], [0.8])]
    advantages = oracle_advantages(played, imitation_plan_credit)
    raw = np.array([1 / 0.25, 0.0, 1 / 0.8])  # the direct transcription: 1[c = c*] / pi_old(c|s), standardized
    # 1 / exp(log p) against 1 / p: a few roundings (the log's, the exp's, the division's) in each raw value
    close = standardized_tolerance(raw, 1e-6, input_error=rounding_error(5, float(raw.max()), np.float64))
    np.testing.assert_allclose(np.concatenate(advantages), (raw - raw.mean()) / (raw.std() + 1e-6), atol=close, rtol=0)
    assert advantages[0][0] > advantages[1][0] > advantages[0][1]  # the rarer plan command gets the more credit
    with pytest.raises(ValueError, match="admissible mode"):
        oracle_advantages([dataclasses.replace(played[0], choice_turns=())], imitation_plan_credit)


def test_the_imitation_weights_make_the_expected_policy_gradient_that_of_log_pi_of_the_plan_command() -> None:
    """Over every command c of one state, sum_c pi(c) w(c) grad log pi(c) with w = 1[c = c*] / pi(c) equals
    grad log pi(c*), cloning's gradient, where the signed +1 / -1 credit gives 2 grad pi(c*)."""
    logits = torch.tensor([0.3, -1.2, 2.0, 0.1], dtype=torch.float64, requires_grad=True)
    plan = 1
    log_pi = torch.log_softmax(logits, dim=0)
    pi = log_pi.exp().detach()
    grads = [torch.autograd.grad(log_pi[c], logits, retain_graph=True)[0] for c in range(4)]
    imitation = sum(pi[c] * (float(c == plan) / pi[plan]) * grads[c] for c in range(4))
    signed = sum(pi[c] * (1.0 if c == plan else -1.0) * grads[c] for c in range(4))
    # the rule (tests/numerics.py): sums of 4 terms pi(c) w(c) grad, each a few products, of size <= 1
    close = tolerance(4 * 4, 1.0, torch.float64)
    torch.testing.assert_close(imitation, grads[plan], atol=close, rtol=0)
    torch.testing.assert_close(signed, 2 * pi[plan] * grads[plan], atol=close, rtol=0)
