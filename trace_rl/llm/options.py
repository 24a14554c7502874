"""The chat backend that `BackendSettings` name: a local transformers model, an OpenAI-compatible server, or vLLM.

    BackendSettings(model="smollm2-135m-instruct")                  a local checkpoint (default; `tiny`: the test model)
    BackendSettings(base_url="http://127.0.0.1:8000/v1", model="M")  any OpenAI-compatible server
    BackendSettings(backend="vllm", model="NAME_OR_FOLDER")          vLLM in-process (GPU)

Without a backend, a base URL (the settings', `TRACEC_LLM_BASE_URL` or `OPENAI_BASE_URL`) means http, else
transformers. The model and key may also come from `TRACEC_LLM_MODEL` and `TRACEC_LLM_API_KEY` (or
`OPENAI_API_KEY`): a key is read from the environment only, never from settings, so it stays out of shell history,
process lists and configs. The command line's flags for these are `tracec.cli.llm_flags`; the pipeline's `[llm]`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tracec.trace_rl.llm.chat import SamplingBackend
from tracec.trace_rl.llm.http import HTTPConfig, OpenAIChatBackend
from tracec.trace_rl.llm.vllm_backend import VLLMBackend, import_vllm
from tracec.trace_rl.policy.catalog import TINY, require_device, resolve_model

BACKENDS = ("transformers", "http", "vllm")
DEFAULT_LOCAL_MODEL = "smollm2-135m-instruct"


class BackendChoiceError(Exception):
    """Settings that do not name a usable backend (a usage error)."""


@dataclass(frozen=True, kw_only=True)
class BackendSettings:
    backend: str | None = None  # one of BACKENDS; None: http when a base URL is set, else transformers
    model: str | None = None  # a local model or checkpoint folder; for http the served model's name
    base_url: str | None = None  # http: the API root
    timeout: float = 120.0  # seconds per HTTP request
    retries: int = 4  # HTTP retries on 429 / 5xx / timeouts
    device: str = "cpu"  # torch device of a local transformers model
    seed: int = 0


def open_backend(settings: BackendSettings, environ: Mapping[str, str] = os.environ) -> SamplingBackend:
    """The backend the settings name; raises `BackendChoiceError` (usage) or `LLMError` / `ModelError` (loading).
    Messages name the command line's flags, which the pipeline's `[llm]` keys mirror."""
    base_url = settings.base_url or environ.get("TRACEC_LLM_BASE_URL") or environ.get("OPENAI_BASE_URL")
    kind = settings.backend or ("http" if base_url else "transformers")
    if kind == "http":
        model = settings.model or environ.get("TRACEC_LLM_MODEL")
        if not base_url or not model:
            missing = " and ".join(n for n, v in (("--base-url", base_url), ("--model", model)) if not v)
            raise BackendChoiceError(f"--llm http needs {missing} (or TRACEC_LLM_BASE_URL / TRACEC_LLM_MODEL)")
        key = environ.get("TRACEC_LLM_API_KEY") or environ.get("OPENAI_API_KEY")
        try:
            config = HTTPConfig(base_url=base_url, model=model, api_key=key, timeout_s=settings.timeout,
                                retries=settings.retries)
        except ValueError as error:
            raise BackendChoiceError(str(error)) from None
        return OpenAIChatBackend(config)
    model_name = settings.model or DEFAULT_LOCAL_MODEL
    if kind == "vllm":
        import_vllm()  # the install hint before any model lookup
        return VLLMBackend(resolve_model(model_name, environ), seed=settings.seed)
    require_device(settings.device, "--device")  # before the model loads
    return local_backend(model_name, device=settings.device, seed=settings.seed, environ=environ)


def local_backend(model_name: str, *, device: str = "cpu", seed: int = 0, max_new_tokens: int = 512,
                  environ: Mapping[str, str] = os.environ) -> SamplingBackend:
    """A transformers model by installed name or folder (`tiny`: the random test model built in code)."""
    # Lazy: both import torch and transformers, and the command line reads this module's settings for `--help`
    # (cli/llm_flags.py; cli/pipeline.py and cli/synth.py name BackendChoiceError).
    from tracec.trace_rl.llm.local import SamplingConfig, TransformersBackend
    from tracec.trace_rl.policy.tiny import build_tiny_model

    config = SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)
    if model_name == TINY:
        model, tokenizer = build_tiny_model(seed, max_positions=max(2048, max_new_tokens + 512))
        return TransformersBackend(model, tokenizer, config=config, name=TINY)
    return TransformersBackend.from_pretrained(resolve_model(model_name, environ), config=config, device=device)


__all__ = ["BACKENDS", "DEFAULT_LOCAL_MODEL", "BackendChoiceError", "BackendSettings", "local_backend", "open_backend"]
