"""Episodes per second of multi-turn rollouts on a TextWorld game with SmolLM2: the trainer's batched group decoding
with each episode's KV cache kept across its turns, against re-encoding the whole conversation every turn.

One group of K episodes of one `tw-simple` game (the same seed, as GRPO samples them), up to TURNS agent turns of up
to NEW_TOKENS tokens, temperature 1. Sides:
- `kv cache kept`: `RolloutEngine` + `KVCacheSampler`: the group decodes as one batch; after a turn only the
  observation's tokens are prefilled.
- `batched re-encode`: the same engine and batch, but the cache is dropped after every turn, so each turn prefills
  the whole conversation again (what a sampler without a kept cache pays).
- `text backend, one episode at a time`: `run_episode` with a `ChatAgent` over `TransformersBackend`
  (`model.generate` on the rendered conversation), the text-level path a user of the chat backend has.
Every side plays the same episodes' seeds; the sampled texts differ (independent draws), so tokens/s are reported
beside episodes/s. Sides interleave round by round (`bench/sides.py`); each figure is the side's best round.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from tracec.trace_rl.envs.agent import ChatAgent, run_episode
from tracec.trace_rl.envs.textworld.env import SimpleGame, TextWorldEnvironment, make_game
from tracec.trace_rl.llm.local import SamplingConfig, TransformersBackend
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler, SampledTurn, TurnRequest
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate

from bench.results import markdown_table, record
from bench.sides import best_times

K, TURNS, NEW_TOKENS, ROUNDS = 8, 3, 24, 2


class ReencodeSampler(KVCacheSampler):
    """The KV-cache sampler with its cache dropped after every turn: each turn prefills the whole context."""

    def sample(self, requests: Sequence[TurnRequest]) -> list[SampledTurn]:
        self.reset()
        return super().sample([TurnRequest(key=r.key, new_ids=r.context, context=r.context, generator=r.generator,
                                           max_new_tokens=r.max_new_tokens) for r in requests])

    def release(self, keys: Sequence[int]) -> None:
        """Nothing is kept between turns."""


@pytest.mark.slow
def test_rollouts_kv_cache_kept_vs_reencode(benchmark: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    game = make_game(SimpleGame(seed=2), tmp_path_factory.mktemp("tw-rollouts"))
    policy = Policy.load("smollm2-135m-instruct", LoraSection(), seed=0)
    template = TurnTemplate(policy.tokenizer)
    settings = RolloutSection(max_new_tokens=NEW_TOKENS, max_context_tokens=8192)
    pad = int(policy.tokenizer.pad_token_id)
    kept = RolloutEngine(KVCacheSampler(policy.model, temperature=1.0, end_of_turn_ids=template.end_of_turn_ids,
                                        pad_id=pad), template, lambda: TextWorldEnvironment(game), settings,
                          max_turns=TURNS)
    reencode = RolloutEngine(ReencodeSampler(policy.model, temperature=1.0, end_of_turn_ids=template.end_of_turn_ids,
                                             pad_id=pad), template, lambda: TextWorldEnvironment(game), settings,
                             max_turns=TURNS)
    backend = TransformersBackend(policy.model, policy.tokenizer,
                                  config=SamplingConfig(max_new_tokens=NEW_TOKENS, temperature=1.0))
    tokens: dict[str, list[int]] = {"kv cache kept": [], "batched re-encode": [], "text backend, one at a time": []}
    calls = {"n": 0}

    def engine_side(engine: RolloutEngine, name: str) -> None:
        calls["n"] += 1
        episodes = engine.run([GroupTask(group=0, seed=0)], group_size=K, seed=0, iteration=calls["n"])
        tokens[name].append(sum(int(e.sampled.sum()) for e in episodes))

    def text_side(episodes: int = K) -> None:
        total = 0
        with TextWorldEnvironment(game) as env:
            for member in range(episodes):
                record_ = run_episode(env, ChatAgent(backend), 0, TURNS, episode=f"m{member}")
                total += sum(len(policy.tokenizer(a["text"], add_special_tokens=False)["input_ids"])
                             for a in record_["actions"])
        tokens["text backend, one at a time"].append(total)

    sides = {"kv cache kept": (lambda: engine_side(kept, "kv cache kept"), 1),
             "batched re-encode": (lambda: engine_side(reencode, "batched re-encode"), 1),
             "text backend, one at a time": (text_side, 1)}
    torch.set_num_threads(1)  # the machine's two cores are shared: one thread each side, no waiting between threads
    with torch.no_grad():
        engine_side(kept, "kv cache kept")  # warm: the game loaded, kernels and allocator primed
        text_side(1)
        for values in tokens.values():
            values.clear()
        started = time.perf_counter()
        best = best_times(benchmark, sides, ROUNDS)
        wall = time.perf_counter() - started
    base = best["kv cache kept"]
    rows = [[name, f"{seconds:.1f}", f"{K / seconds:.3f}", f"{sum(tokens[name]) / len(tokens[name]) / seconds:.1f}",
             f"{seconds / base:.2f}x"] for name, seconds in best.items()]
    body = (f"One group of {K} episodes of a tw-simple game (seed 2), up to {TURNS} turns of up to {NEW_TOKENS} "
            f"tokens, SmolLM2-135M-Instruct + LoRA r16 (fp32, CPU, one torch thread), temperature 1. Best of {ROUNDS} interleaved "
            f"rounds ({wall:.0f} s in all); sampled tokens/s: the mean sampled tokens of a group over the rounds (the "
            "text backend's re-tokenized) / the best time.\n\n" + markdown_table(["side", "s per group", "episodes/s", "sampled tokens/s",
                                                   "time vs kv cache kept"], rows))
    record("rollouts", body, "pytest bench/test_rollout_bench.py --benchmark-only -p no:xdist")
