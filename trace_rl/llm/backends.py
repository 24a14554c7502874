"""The chat backend that `BackendSettings` choose (`llm/options.py`), opened: a local transformers model, an
OpenAI-compatible server, or vLLM. It imports torch and transformers (the local model, the tiny test model); what the
command line reads for `--help` (the settings, the errors, the choices) is in the torch-free `options`.

    backend = open_backend(BackendSettings(model="tiny"))
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tracec.trace_rl.llm.chat import SamplingBackend
from tracec.trace_rl.llm.http import OpenAIChatBackend
from tracec.trace_rl.llm.local import SamplingConfig, TransformersBackend
from tracec.trace_rl.llm.options import BackendSettings, choose_backend
from tracec.trace_rl.llm.vllm_backend import VLLMBackend, import_vllm
from tracec.trace_rl.policy.catalog import TINY, require_device, resolve_model
from tracec.trace_rl.policy.tiny import build_tiny_model


def open_backend(settings: BackendSettings, environ: Mapping[str, str] = os.environ) -> SamplingBackend:
    """The backend the settings name; raises `BackendChoiceError` (usage) or `LLMError` / `ModelError` (loading)."""
    choice = choose_backend(settings, environ)
    if choice.http is not None:
        return OpenAIChatBackend(choice.http)
    if choice.kind == "vllm":
        import_vllm()  # the install hint before any model lookup
        return VLLMBackend(resolve_model(choice.model, environ), seed=settings.seed)
    require_device(settings.device, "--device")  # before the model loads
    return local_backend(choice.model, device=settings.device, seed=settings.seed, environ=environ)


def local_backend(model_name: str, *, device: str = "cpu", seed: int = 0, max_new_tokens: int = 512,
                  environ: Mapping[str, str] = os.environ) -> SamplingBackend:
    """A transformers model by installed name or folder (`tiny`: the random test model built in code)."""
    config = SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)
    if model_name == TINY:
        model, tokenizer = build_tiny_model(seed, max_positions=max(2048, max_new_tokens + 512))
        return TransformersBackend(model, tokenizer, config=config, name=TINY)
    return TransformersBackend.from_pretrained(resolve_model(model_name, environ), config=config, device=device)


__all__ = ["local_backend", "open_backend"]
