"""Which sampler a run's `rollout.backend` builds: `auto` resolved by where the rollouts run and what is installed,
and vLLM's install hint said before anything loads (with vLLM installed: tests/vllm_engine/test_vllm_routing.py)."""

from __future__ import annotations

from dataclasses import replace
from importlib.util import find_spec

import pytest
from tracec.trace_rl.grpo.config import load_config
from tracec.trace_rl.grpo.rollout_backend import require_backend, resolved_backend
from tracec.trace_rl.llm.calls import LLMError


def test_auto_is_the_kv_cache_sampler_on_the_cpu_and_where_vllm_is_missing() -> None:
    assert find_spec("vllm") is None  # the main venv; the CPU build lives in .venv-vllm
    config = load_config(None)
    assert config.rollout.backend == "auto" and resolved_backend(config) == "transformers"
    on_gpu = config.replace(model=replace(config.model, device="cuda"))
    assert resolved_backend(on_gpu) == "transformers"  # a GPU without vLLM
    require_backend(on_gpu)  # nothing to install: the KV-cache sampler
    for backend in ("transformers", "vllm"):
        assert resolved_backend(config.replace(rollout=replace(config.rollout, backend=backend))) == backend
    with pytest.raises(LLMError, match="make vllm-venv"):
        require_backend(config.replace(rollout=replace(config.rollout, backend="vllm")))
