"""vLLM as the rollout engine: token prompts in, sampled ids and their log-probs out, the adapter synced by name.

    pip install 'tracec[gpu]'        # vLLM on a GPU; imported (`import_vllm`) only when rollout.backend = "vllm"
    make vllm-venv                   # vLLM's CPU engine, in a venv of its own (.venv-vllm/bin/tracec train ...)

`VLLMSampler` speaks the rollout engine's `TurnSampler` protocol (`sampler`). vLLM keeps no per-episode cache that
we manage: each turn sends the episode's whole token context (`TokensPrompt`, never text, so nothing is
re-tokenized) and its prefix cache (on) finds the earlier turns, which is what makes a growing episode cheap there.
The trained adapter
goes to vLLM as a LoRA folder under a fresh name and id after every update (`sync`), and the prefix cache is reset,
as vLLM's maintainers advise for RL: cached blocks computed with the old adapter must not serve the new one.
Log-probs are vLLM's processed ones (after temperature, `logprobs_mode="processed_logprobs"`), the distribution
the tokens were drawn from; the trainer recomputes its own and corrects by a masked sequence-level importance
weight (`grpo.loss.sequence_importance_weights`), since the two engines' numerics differ.

Tested on vLLM's CPU engine (`tests/vllm_engine`, SmolLM2: a multi-turn episode's tokens and log-probs against the
trainer's, the adapter's hot reload, `tracec train` through it); on the CPU `rollout.vllm_gpu_memory` is the share of
RAM its KV cache takes, and `VLLM_ENABLE_V1_MULTIPROCESSING=0` keeps the engine in the trainer's process. On a GPU
`bench/gpu_check.sh` exercises it. Left out: vLLM as a separate server, tensor parallelism, sleep mode between
rollouts.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tracec.trace_rl.llm.vllm_backend import clean_model_folder, engine_rank, import_vllm
from tracec.trace_rl.policy.catalog import TINY, resolve_model
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.sampler import SampledTurn, TurnRequest, TurnSampler
from tracec.trace_rl.rollouts.turns import TurnTemplate


class VLLMSampler(TurnSampler):
    decodes_with_training_weights = False  # its own copy of the weights, synced after every update
    recomputes_old_logprobs = True  # vLLM's numerics are not the trainer's

    def __init__(self, llm: Any, *, policy: Policy, temperature: float, end_of_turn_ids: frozenset[int],
                 adapters: Path) -> None:
        self.llm, self.policy, self.temperature = llm, policy, temperature
        self.end_of_turn_ids, self.adapters = end_of_turn_ids, adapters
        self.version = 0
        self.lora: Any = None
        self.sync(policy)

    @classmethod
    def create(cls, policy: Policy, template: TurnTemplate, adapters: Path, *, model: str, lora_rank: int,
               dtype: str, seed: int, temperature: float, max_context_tokens: int, gpu_memory: float,
               eager: bool) -> VLLMSampler:
        """An engine over the installed model `model` (the policy's base), sampling at `temperature`."""
        vllm = import_vllm()
        if model == TINY:
            raise ValueError("rollout.backend = \"vllm\" needs a model folder; the tiny model exists only in code")
        model_dir = clean_model_folder(resolve_model(model), adapters / "base")
        llm = vllm.LLM(model=str(model_dir), tokenizer=str(model_dir), enable_lora=True,
                       max_lora_rank=engine_rank(lora_rank), max_loras=1, enable_prefix_caching=True,
                       gpu_memory_utilization=gpu_memory, max_model_len=max_context_tokens, dtype=dtype, seed=seed,
                       logprobs_mode="processed_logprobs", enforce_eager=eager)
        return cls(llm, policy=policy, temperature=temperature, end_of_turn_ids=template.end_of_turn_ids,
                   adapters=adapters)

    def sync(self, policy: Policy) -> None:
        """Hand vLLM the adapter as it is now, under a name it has not seen, and drop its cached prefixes."""
        lora_request = import_vllm("vllm.lora.request").LoRARequest
        self.version += 1
        folder = policy.save_adapter(self.adapters / f"v{self.version:06d}")
        self.lora = lora_request(f"policy-v{self.version}", self.version, str(folder))
        self.llm.reset_prefix_cache()
        stale = self.adapters / f"v{self.version - 2:06d}"  # the one before the previous: vLLM is done with it
        shutil.rmtree(stale, ignore_errors=True)

    def reset(self) -> None:
        """Nothing per batch: the prefix cache serves every episode."""

    def release(self, keys: Sequence[int]) -> None:
        """Nothing to free: vLLM evicts cached blocks itself."""

    def sample(self, requests: Sequence[TurnRequest]) -> list[SampledTurn]:
        tokens_prompt, sampling_params = import_vllm("vllm.inputs").TokensPrompt, import_vllm().SamplingParams
        prompts = [tokens_prompt(prompt_token_ids=list(r.context)) for r in requests]
        params = [sampling_params(temperature=self.temperature, top_p=1.0, max_tokens=r.max_new_tokens, logprobs=0,
                                 stop_token_ids=sorted(self.end_of_turn_ids), detokenize=False,
                                 seed=int(torch.randint(0, 2**31 - 1, (1,), generator=r.generator)))
                  for r in requests]
        outputs = self.llm.generate(prompts, sampling_params=params, lora_request=self.lora, use_tqdm=False)
        turns = []
        for output in outputs:
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, ids, strict=True)]
            turns.append(SampledTurn(ids=ids, logprobs=logprobs, closed=bool(ids) and ids[-1] in self.end_of_turn_ids))
        return turns
