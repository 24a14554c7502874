"""The admissible-command action mode: the policy chooses one of the environment's commands instead of writing one.

Checked on the tiny model and a small command environment (no game engine): the turn is exactly the chosen
command's tokens, carrying the sampler's log-probs, which the trainer's packed recomputation matches; the choice is
a draw from the softmax of the commands' scores as a plain full-context forward computes them; the advantage
reaches only the chosen command's tokens; the KV cache holds only the chosen command afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from numerics import float64_model, tolerance
from recompute import recomputed_logprobs
from tracec.trace_rl.envs.protocol import Environment, Observation, StepResult
from tracec.trace_rl.grpo.config import ConfigError, config_from_dict
from tracec.trace_rl.grpo.credit import GRPOCredit
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import EpisodeRollout, GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.sampler import TurnRequest
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate, action_span

COMMANDS = ("go north", "go south", "take the red apple from the wooden table", "look", "open door")


class CommandEnv(Environment):
    """Lists admissible commands that change with the turn; the reward is the share of turns that went north."""

    system_prompt = "Choose a command."

    def __init__(self, turns: int = 3) -> None:
        self.turns = turns

    def reset(self, seed: int) -> Observation:
        self.seed, self.played = seed, list[str]()
        return Observation(text=f"Room {seed}. Exits north and south.", role="user")

    @property
    def admissible_commands(self) -> tuple[str, ...]:
        count = 2 + (self.seed + len(self.played)) % (len(COMMANDS) - 1)
        return COMMANDS[:count]

    def step(self, action: str) -> StepResult:
        self.played.append(action)
        done = len(self.played) >= self.turns
        return StepResult(observation=Observation(text=f"You did {len(self.played)} things.", role="user"),
                          done=done, reward=self._reward() if done else 0.0, state={}, action={"text": action})

    def _reward(self) -> float:
        return sum("go north" in text for text in self.played) / max(len(self.played), 1)

    def trajectory(self, episode: str) -> dict[str, Any]:
        reward = self._reward()
        return {"episode": episode, "task": f"room{self.seed}", "instruction": "go north",
                "states": [{}] * (len(self.played) + 1), "actions": [{"text": t} for t in self.played],
                "env_reward": reward, "success": reward > 0.5}


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _adapted_tiny() -> Policy:
    policy = Policy.load("tiny", LoraSection(rank=4, alpha=8), seed=2)
    with torch.no_grad():  # a non-zero adapter: the scores are the adapted policy's
        for p in policy.trainable_parameters():
            p.normal_(0, 0.05)
    return policy


@pytest.fixture(scope="module")
def tiny() -> Policy:
    return _adapted_tiny()


@pytest.fixture(scope="module")
def tiny_fp64() -> Policy:
    """The same policy in fp64: two orders of summation agree to ~1e-14 there, so a comparison can be tight."""
    policy = _adapted_tiny()
    float64_model(policy.model)
    return policy


def _engine(policy: Policy, envs: list[CommandEnv] | None = None, *, score: str = "mean", max_turns: int,
            **settings: Any) -> RolloutEngine:
    rollout = RolloutSection(action_mode="admissible", choice_score=score, **settings)
    template = TurnTemplate(policy.tokenizer)
    sampler = KVCacheSampler(policy.model, temperature=rollout.temperature, end_of_turn_ids=template.end_of_turn_ids,
                             pad_id=policy.tokenizer.pad_token_id, choice_score=rollout.choice_score)

    def make() -> CommandEnv:
        env = CommandEnv()
        if envs is not None:
            envs.append(env)
        return env

    return RolloutEngine(sampler, template, make, rollout, max_turns=max_turns)


def _turn_spans(episode: EpisodeRollout) -> list[tuple[int, int]]:
    """[start, stop) of each sampled run (one per turn)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], episode.sampled.astype(int), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def test_each_turn_is_a_chosen_command_and_the_environment_plays_it(tiny: Policy) -> None:
    envs: list[CommandEnv] = []
    template = TurnTemplate(tiny.tokenizer)
    episodes = _engine(tiny, envs, max_turns=3).run([GroupTask(group=0, seed=1), GroupTask(group=1, seed=2)],
                                                    group_size=3, seed=0, iteration=0)
    assert len(episodes) == 6 and all(e.turns == 3 for e in episodes)
    for episode, env in zip(episodes, envs, strict=True):
        spans = _turn_spans(episode)
        assert len(spans) == 3
        for (start, stop), played in zip(spans, env.played, strict=True):
            command = played.removeprefix("<action>").removesuffix("</action>")
            assert command in COMMANDS
            assert episode.token_ids[start:stop].tolist() == template.choice_ids(command)
    assert len({tuple(env.played) for env in envs}) > 1  # the draws differ between members


@pytest.mark.parametrize("score", ["mean", "sum"])
def test_the_chosen_tokens_carry_log_probs_the_trainer_recomputes(tiny_fp64: Policy, score: str) -> None:
    engine = _engine(tiny_fp64, score=score, temperature=0.8, max_turns=3)
    episodes = engine.run([GroupTask(group=0, seed=3), GroupTask(group=1, seed=4)], group_size=4, seed=1, iteration=2)
    for episode, recomputed in zip(episodes, recomputed_logprobs(tiny_fp64, episodes, 0.8), strict=True):
        sampled = episode.sampler_logprobs[episode.sampled]
        assert (sampled < 0).all()
        # The trainer's fp64 log-probs against the sampler's, which rounds the logits to fp32 and takes their
        # log-softmax in fp32 (`KVCacheSampler._run`): the rule (tests/numerics.py) for a sum over the vocabulary
        # of terms <= 1, a few roundings at the log-probs' size, and the fp32 record.
        magnitude = max(1.0, float(np.abs(recomputed).max()))
        vocab = tiny_fp64.model.config.vocab_size
        assert np.abs(recomputed - sampled).max() <= tolerance(vocab, 1.0, np.float32) + tolerance(
            8, magnitude, np.float32)


def test_the_advantage_reaches_only_the_chosen_command(tiny: Policy) -> None:
    template = TurnTemplate(tiny.tokenizer)
    episodes = _engine(tiny, max_turns=3).run([GroupTask(group=0, seed=5)], group_size=6, seed=2, iteration=0)
    advantages = GRPOCredit()(episodes)
    assert any(np.abs(a).max() > 0 for a in advantages)
    for episode, advantage in zip(episodes, advantages, strict=True):
        expected = np.zeros(len(episode.token_ids), dtype=bool)
        for start, stop in _turn_spans(episode):
            ids = episode.token_ids[start:stop].tolist()
            first, last = template.action_token_range(ids)
            text = template.turn_text(ids)
            assert action_span(text) == (0, len(text))  # the whole command, <action>...</action>
            assert last == len(ids) - 1  # every token but the end of the turn
            expected[start + first:start + last] = True
        assert np.array_equal(episode.loss_mask, expected)
        assert (advantage[~expected] == 0).all()
        assert (advantage[expected] == advantage[expected][0]).all()  # GRPO: one value an episode, copied


def _plain_scores(policy: Policy, context: list[int], choices: list[list[int]], temperature: float,
                  score: str) -> np.ndarray:
    """Each choice's score from one full forward over context + choice (no cache, no tree)."""
    values = []
    with torch.no_grad():
        for choice in choices:
            ids = torch.tensor([context + choice])
            logits = policy.model(input_ids=ids).logits[0]  # the model's dtype: fp64 if it is in fp64
            logprobs = torch.log_softmax(logits / temperature, dim=-1)
            token_lps = [float(logprobs[len(context) - 1 + j, t]) for j, t in enumerate(choice)]
            values.append(np.mean(token_lps) if score == "mean" else np.sum(token_lps))
    return np.array(values)


@pytest.mark.parametrize("score", ["mean", "sum"])
def test_choices_are_drawn_from_the_softmax_of_their_scores(tiny: Policy, score: str) -> None:
    template = TurnTemplate(tiny.tokenizer)
    context = template.prompt_ids("Choose a command.", Observation(text="A room with a door.", role="user"))
    choices = [template.choice_ids(c) for c in COMMANDS]
    expected = torch.softmax(torch.tensor(_plain_scores(tiny, context, choices, 0.9, score)), dim=0).numpy()
    sampler = KVCacheSampler(tiny.model, temperature=0.9, end_of_turn_ids=template.end_of_turn_ids,
                             pad_id=tiny.tokenizer.pad_token_id, choice_score=score)
    # Eight rows decode together (the tree of each row beside the others); each row's draws follow the softmax.
    counts = np.zeros(len(choices))
    generators = [torch.Generator().manual_seed(row) for row in range(8)]
    with torch.no_grad():
        for _ in range(150):
            sampler.reset()
            requests = [TurnRequest(key=row, new_ids=context, context=context, generator=generators[row],
                                    max_new_tokens=1, choices=choices) for row in range(8)]
            for turn in sampler.sample(requests):
                assert turn.choice is not None and turn.closed
                assert turn.ids == choices[turn.choice]
                counts[turn.choice] += 1
    assert np.abs(counts / counts.sum() - expected).max() < 0.04
    assert score == "sum" or expected.max() < 0.5  # a random policy's mean scores are close: no choice dominates


def test_the_cache_keeps_only_the_chosen_command(tiny: Policy) -> None:
    template = TurnTemplate(tiny.tokenizer)
    context = template.prompt_ids("Choose a command.", Observation(text="A room.", role="user"))
    choices = [template.choice_ids(c) for c in COMMANDS]
    sampler = KVCacheSampler(tiny.model, temperature=1.0, end_of_turn_ids=template.end_of_turn_ids,
                             pad_id=tiny.tokenizer.pad_token_id)
    requests = [TurnRequest(key=row, new_ids=context[: len(context) - row], context=context[: len(context) - row],
                            generator=torch.Generator().manual_seed(row), max_new_tokens=1, choices=choices)
                for row in range(3)]  # prompts of different lengths: the rows hold holes
    with torch.no_grad():
        turns = sampler.sample(requests)
    for row, turn in enumerate(turns):
        # every real position but the last drawn token (fed with the next turn, as after decoding)
        assert int(sampler._count[row]) == len(requests[row].new_ids) + len(turn.ids) - 1
        assert sampler._unfed[row] == [turn.ids[-1]]
    longest = max(len(r.new_ids) for r in requests)
    assert sampler._valid.shape[1] == longest + max(len(t.ids) - 1 for t in turns)  # the other choices are gone


def test_a_batch_cannot_mix_choosing_and_decoding(tiny: Policy) -> None:
    sampler = KVCacheSampler(tiny.model, temperature=1.0, end_of_turn_ids=frozenset({1}), pad_id=0)
    generator = torch.Generator().manual_seed(0)
    requests = [TurnRequest(key=0, new_ids=[5, 6], context=[5, 6], generator=generator, max_new_tokens=2,
                            choices=[[7, 1]]),
                TurnRequest(key=1, new_ids=[5, 6], context=[5, 6], generator=generator, max_new_tokens=2)]
    with pytest.raises(ValueError, match="not both"):
        sampler.sample(requests)


def test_an_environment_without_admissible_commands_is_refused(tiny: Policy) -> None:
    from toy_env import LetterEnv

    template = TurnTemplate(tiny.tokenizer)
    sampler = KVCacheSampler(tiny.model, temperature=1.0, end_of_turn_ids=template.end_of_turn_ids, pad_id=0)
    engine = RolloutEngine(sampler, template, LetterEnv, RolloutSection(action_mode="admissible"), max_turns=8)
    with pytest.raises(TypeError, match="admissible_commands"):
        engine.run([GroupTask(group=0, seed=0)], group_size=2, seed=0, iteration=0)


def test_the_config_offers_the_mode_and_refuses_it_with_vllm() -> None:
    config = config_from_dict({"rollout": {"action_mode": "admissible", "choice_score": "sum"}})
    assert config.rollout.action_mode == "admissible" and config.rollout.choice_score == "sum"
    with pytest.raises(ConfigError, match="action_mode"):
        config_from_dict({"rollout": {"action_mode": "choose"}})
    with pytest.raises(ConfigError, match="transformers"):
        config_from_dict({"model": {"device": "cuda"}, "rollout": {"backend": "vllm", "action_mode": "admissible"}})
