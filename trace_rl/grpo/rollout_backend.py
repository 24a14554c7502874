"""The turn sampler `rollout.backend` names, built once when a run is set up: the only place that reads the backend.

`transformers`: the KV-cache sampler over the training model itself (`rollouts.kv_sampler`); `vllm`: a vLLM engine
(a GPU's, or the CPU build's) that gets the adapter after every update (`rollouts.vllm_sampler`). What the trainer
must do about each (merge the adapter while it samples, recompute the old log-probs) the sampler says itself
(`rollouts.sampler`).
Left out: samplers that a config cannot name (a script's: `train(make_sampler=...)`).
"""

from __future__ import annotations

from pathlib import Path

from tracec.trace_rl.grpo.config import TrainConfig
from tracec.trace_rl.llm.vllm_backend import ENGINE_RANKS, check_engine_model, import_vllm, vllm_installed
from tracec.trace_rl.policy.catalog import TINY, resolve_model
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.sampler import TurnSampler
from tracec.trace_rl.rollouts.turns import TurnTemplate
from tracec.trace_rl.rollouts.vllm_sampler import VLLMSampler

from tracec.config_io import ConfigError


def resolved_backend(config: TrainConfig) -> str:
    """`rollout.backend` with `auto` resolved. On the CPU: transformers, since vLLM's CPU engine samples at 0.44x
    (0.40-0.64) the KV-cache sampler's tokens/s on 2 cores and takes 1.26x (1.22-1.33) its time a TRCA iteration
    (bench/RESULTS.md, "vllm cpu rollouts"). On a CUDA device
    with vLLM installed: vllm, the design's rollout engine (not yet measured against the KV-cache sampler on a GPU:
    no GPU run so far had vLLM). The admissible-command mode scores commands with the transformers sampler."""
    if config.rollout.backend != "auto":
        return config.rollout.backend
    on_gpu = config.model.device.startswith("cuda") and config.rollout.action_mode != "admissible"
    return "vllm" if on_gpu and vllm_installed() else "transformers"


def require_backend(config: TrainConfig) -> None:
    """What the backend would fail on, before anything loads: vLLM's install hint, a model it cannot load (each an
    LLMError naming the fix), a LoRA rank it does not serve (a ConfigError)."""
    if resolved_backend(config) != "vllm":
        return
    import_vllm()
    if config.model.name == TINY:
        raise ConfigError(f"model.name = \"{TINY}\": rollout.backend = \"vllm\" needs a model folder; the tiny "
                          "model exists only in code (use rollout.backend = \"transformers\")")
    if config.lora.rank > ENGINE_RANKS[-1]:
        raise ConfigError(f"lora.rank = {config.lora.rank}: at most {ENGINE_RANKS[-1]}, the largest rank vLLM serves "
                          "(rollout.backend = \"vllm\")")
    check_engine_model(resolve_model(config.model.name))


def make_sampler(config: TrainConfig, policy: Policy, template: TurnTemplate, run_dir: Path) -> TurnSampler:
    """The rollout backend: the KV-cache sampler over the training model itself, or vLLM."""
    if resolved_backend(config) == "vllm":
        return VLLMSampler.create(policy, template, run_dir / "vllm_adapters", model=config.model.name,
                                  lora_rank=config.lora.rank, dtype=config.model.dtype, seed=config.run.seed,
                                  temperature=config.rollout.temperature,
                                  max_context_tokens=config.rollout.max_context_tokens,
                                  gpu_memory=config.rollout.vllm_gpu_memory, eager=config.rollout.vllm_eager)
    pad = policy.tokenizer.pad_token_id
    return KVCacheSampler(policy.model, temperature=config.rollout.temperature,
                          end_of_turn_ids=template.end_of_turn_ids, pad_id=int(pad if pad is not None else 0),
                          choice_score=config.rollout.choice_score)
