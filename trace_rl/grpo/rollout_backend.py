"""The turn sampler `rollout.backend` names, built once when a run is set up: the only place that reads the backend.

`transformers`: the KV-cache sampler over the training model itself (`rollouts.kv_sampler`); `vllm`: a vLLM engine
on the GPU that gets the adapter after every update (`rollouts.vllm_sampler`). What the trainer must do about each
(merge the adapter while it samples, recompute the old log-probs) the sampler says itself (`rollouts.sampler`).
Left out: samplers that a config cannot name (a script's: `train(make_sampler=...)`).
"""

from __future__ import annotations

from pathlib import Path

from tracec.trace_rl.grpo.config import TrainConfig
from tracec.trace_rl.llm.vllm_backend import import_vllm
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.sampler import TurnSampler
from tracec.trace_rl.rollouts.turns import TurnTemplate
from tracec.trace_rl.rollouts.vllm_sampler import VLLMSampler


def require_backend(config: TrainConfig) -> None:
    """The backend's install hint (an LLMError) before anything loads."""
    if config.rollout.backend == "vllm":
        import_vllm()


def make_sampler(config: TrainConfig, policy: Policy, template: TurnTemplate, run_dir: Path) -> TurnSampler:
    """The rollout backend: the KV-cache sampler over the training model itself, or vLLM (GPU)."""
    if config.rollout.backend == "vllm":
        return VLLMSampler.create(policy, template, run_dir / "vllm_adapters", model=config.model.name,
                                  lora_rank=config.lora.rank, dtype=config.model.dtype, seed=config.run.seed,
                                  temperature=config.rollout.temperature,
                                  max_context_tokens=config.rollout.max_context_tokens,
                                  gpu_memory=config.rollout.vllm_gpu_memory, eager=config.rollout.vllm_eager)
    pad = policy.tokenizer.pad_token_id
    return KVCacheSampler(policy.model, temperature=config.rollout.temperature,
                          end_of_turn_ids=template.end_of_turn_ids, pad_id=int(pad if pad is not None else 0),
                          choice_score=config.rollout.choice_score)
