"""Multi-turn rollouts at the token level: the KV-cache sampler keeps exact ids and log-probs across turns."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from numerics import float64_model, forward_roundings, tolerance
from recompute import recomputed_logprobs
from toy_env import LetterEnv, capability_env
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts import kv_sampler
from tracec.trace_rl.rollouts.engine import EpisodeRollout, GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny() -> Policy:
    policy = Policy.load("tiny", LoraSection(rank=4, alpha=8), seed=1)
    with torch.no_grad():  # a non-zero adapter, so the sampled policy is the adapted one
        for p in policy.trainable_parameters():
            p.normal_(0, 0.05)
    float64_model(policy.model)  # the sampler's and the trainer's forwards then differ by fp64 rounding only
    return policy


def _engine(policy: Policy, make_env: Any = LetterEnv, *, max_turns: int, **settings: Any) -> RolloutEngine:
    rollout = RolloutSection(**settings)
    template = TurnTemplate(policy.tokenizer)
    sampler = KVCacheSampler(policy.model, temperature=rollout.temperature, end_of_turn_ids=template.end_of_turn_ids,
                             pad_id=policy.tokenizer.pad_token_id or 0)
    return RolloutEngine(sampler, template, make_env, rollout, max_turns=max_turns)


def _assert_the_trainer_recomputes_the_sampled_log_probs(policy: Policy, episodes: list[EpisodeRollout],
                                                          temperature: float) -> None:
    """The trainer's (packed, fp64) log-probs of the sampled tokens against the sampler's, within the rule's bound
    (tests/numerics.py): the sampler rounds the logits to fp32 (`KVCacheSampler._run`) and takes their log-softmax
    in fp32, a sum over the vocabulary of terms <= 1 and a few roundings at the log-probs' size, then records them
    in fp32; the two fp64 forwards add theirs. A cache that lost a position moves a log-prob by ~1e-1."""
    recomputed = recomputed_logprobs(policy, episodes, temperature)
    size = max(1.0, *(float(np.abs(r).max()) for r in recomputed))
    config = policy.model.config
    bound = tolerance(config.vocab_size, 1.0, torch.float32) + tolerance(8, size, torch.float32) + tolerance(
        forward_roundings(config, max(len(e.token_ids) for e in episodes)), size, torch.float64)
    gap = max(float(np.abs(r - e.sampler_logprobs[e.sampled]).max()) for r, e in zip(recomputed, episodes))
    assert gap <= bound, (gap, bound)


def test_the_trainer_recomputes_every_sampled_log_prob(tiny: Policy) -> None:
    engine = _engine(tiny, temperature=0.8, max_turns=2, max_new_tokens=20, loss_tokens="turn")
    episodes = engine.run([GroupTask(group=0, seed=3), GroupTask(group=1, seed=4)], group_size=3, seed=0, iteration=0)
    assert len(episodes) == 6 and all(e.turns == 2 for e in episodes)
    _assert_the_trainer_recomputes_the_sampled_log_probs(tiny, episodes, 0.8)


def test_compaction_of_the_cache_keeps_log_probs_exact(tiny: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kv_sampler, "_MIN_CAPACITY", 4)  # small buffers: they grow and shrink often
    compacted = []

    def always(self: KVCacheSampler) -> None:  # squeeze the holes out after every forward
        if self._valid.shape[0] and int(self._count.max()) < self._valid.shape[1]:
            compacted.append(self._valid.shape[1] - int(self._count.max()))
            self.compact()

    monkeypatch.setattr(KVCacheSampler, "_compact_if_sparse", always)
    engine = _engine(tiny, make_env=lambda: LetterEnv(turns=4), max_turns=4, max_new_tokens=12, loss_tokens="turn")
    # prompts of different lengths (seed 1, seed 1000): the shorter rows start with holes
    episodes = engine.run([GroupTask(group=0, seed=1), GroupTask(group=1, seed=1000)], group_size=3, seed=5,
                          iteration=1)
    assert compacted, "the test must exercise compaction"
    _assert_the_trainer_recomputes_the_sampled_log_probs(tiny, episodes, 1.0)


def test_an_episode_samples_alike_alone_or_in_a_batch(tiny: Policy) -> None:
    engine = _engine(tiny, max_turns=2, max_new_tokens=16)
    together = engine.run([GroupTask(group=0, seed=3), GroupTask(group=1, seed=8)], group_size=2, seed=0, iteration=2)
    alone = engine.run([GroupTask(group=1, seed=8)], group_size=2, seed=0, iteration=2)
    for a, b in zip(together[2:], alone):
        assert a.episode == b.episode and np.array_equal(a.token_ids, b.token_ids)
    # and a different iteration draws different episodes
    later = engine.run([GroupTask(group=1, seed=8)], group_size=2, seed=0, iteration=3)
    assert not np.array_equal(later[0].token_ids, alone[0].token_ids)


def test_the_stream_is_prompt_turns_and_observations(tiny: Policy) -> None:
    engine = _engine(tiny, max_turns=2, max_new_tokens=16)
    (episode, *_) = engine.run([GroupTask(group=0, seed=5)], group_size=2, seed=1, iteration=0)
    template = TurnTemplate(tiny.tokenizer)
    env = LetterEnv()
    prompt = template.prompt_ids(env.system_prompt, env.reset(5))
    assert episode.token_ids[: len(prompt)].tolist() == prompt
    assert not episode.sampled[: len(prompt)].any()
    # sampled runs: two turns, the observation between them is context
    runs = np.flatnonzero(np.diff(episode.sampled.astype(int)))
    assert len(runs) in (3, 4)
    assert set(episode.step_of_token[episode.sampled].tolist()) <= {-1, 0, 1}
    assert (episode.step_of_token[~episode.sampled] == -1).all()
    assert episode.trajectory["episode"] == episode.episode and len(episode.trajectory["actions"]) == 2


def test_episodes_end_before_the_context_overflows(tiny: Policy) -> None:
    engine = _engine(tiny, make_env=lambda: LetterEnv(turns=50), max_turns=50, max_new_tokens=16,
                     max_context_tokens=160)
    episodes = engine.run([GroupTask(group=0, seed=2)], group_size=3, seed=0, iteration=0)
    assert all(e.truncated and len(e.token_ids) <= 160 for e in episodes)
    with pytest.raises(ValueError, match="raise rollout.max_context_tokens"):
        _engine(tiny, max_turns=2, max_new_tokens=16, max_context_tokens=30).run([GroupTask(group=0, seed=2)],
                                                                                 group_size=2, seed=0, iteration=0)


def test_a_capability_environment_episode_records_one_action_per_turn(tiny: Policy) -> None:
    engine = _engine(tiny, make_env=capability_env, max_turns=3, max_new_tokens=24, max_context_tokens=1024)
    episodes = engine.run([GroupTask(group=0, seed=11)], group_size=2, seed=0, iteration=0)
    for episode in episodes:
        assert len(episode.trajectory["actions"]) == episode.turns
        assert len(episode.trajectory["states"]) == episode.turns + 1


@pytest.mark.slow
def test_smollm2_token_in_token_out_over_a_capability_environment() -> None:
    policy = Policy.load("smollm2-135m-instruct", LoraSection(), seed=0)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.01)
    float64_model(policy.model)  # in fp32 the rule's bound for 30 layers would say nothing
    engine = _engine(policy, make_env=capability_env, max_turns=2, max_new_tokens=24, loss_tokens="turn",
                     max_context_tokens=2048)
    episodes = engine.run([GroupTask(group=0, seed=4), GroupTask(group=1, seed=9)], group_size=2, seed=0, iteration=0)
    _assert_the_trainer_recomputes_the_sampled_log_probs(policy, episodes, 1.0)


def test_sampling_follows_the_tempered_distribution(tiny: Policy) -> None:
    sampler = KVCacheSampler(tiny.model, temperature=0.7, end_of_turn_ids=frozenset({1}), pad_id=0)
    logits = torch.tensor([[2.0, 0.5, -1.0, float("-inf"), 1.0]])
    expected = torch.softmax(logits[0] / 0.7, dim=-1)
    generator = torch.Generator().manual_seed(0)
    request = _request(generator)
    draws = [sampler._draw(logits, [0], [request])[0] for _ in range(20000)]
    counts = np.bincount([token for token, _ in draws], minlength=5) / len(draws)
    assert counts[3] == 0  # a token of probability 0 is never drawn
    assert np.abs(counts - expected.numpy()).max() < 0.012
    # fp32 both ways: a log-softmax over 5 logits against a softmax and a log, at the tempered logits' size
    close = tolerance(5 + 8, float(logits[logits.isfinite()].abs().max()) / 0.7, torch.float32)
    for token, logprob in draws[:50]:
        assert logprob == pytest.approx(float(torch.log(expected[token])), abs=close)


def _request(generator: torch.Generator) -> Any:
    from tracec.trace_rl.rollouts.sampler import TurnRequest

    return TurnRequest(key=0, new_ids=[1], context=[1], generator=generator, max_new_tokens=1)


def test_decoding_with_the_adapter_merged_samples_the_adapted_policy(tiny: Policy) -> None:
    before = {name: p.detach().clone() for name, p in tiny.model.named_parameters()}
    engine = _engine(tiny, max_turns=2, max_new_tokens=16, loss_tokens="turn")
    with tiny.merged():
        episodes = engine.run([GroupTask(group=0, seed=4)], group_size=3, seed=0, iteration=0)
    assert all(torch.equal(p, before[name]) for name, p in tiny.model.named_parameters())  # restored exactly
    _assert_the_trainer_recomputes_the_sampled_log_probs(tiny, episodes, 1.0)  # the unmerged trainer agrees
