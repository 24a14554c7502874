"""The settings that name a chat backend, and which backend they choose: a local transformers model, an
OpenAI-compatible server, or vLLM. Torch-free: the command line reads it for `--help`; `llm/backends.py` opens them.

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

from tracec.trace_rl.llm.http import HTTPConfig

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


@dataclass(frozen=True)
class BackendChoice:
    """The backend settings name, the environment's fallbacks read: its kind, its model, and for http the server."""

    kind: str  # http, vllm, or else a local transformers model
    model: str  # an installed model or checkpoint folder; for http the served model's name
    http: HTTPConfig | None = None  # kind http: the server, the model and the key


def choose_backend(settings: BackendSettings, environ: Mapping[str, str] = os.environ) -> BackendChoice:
    """The backend the settings name; raises `BackendChoiceError` (usage) when they name no usable one. Messages
    name the command line's flags, which the pipeline's `[llm]` keys mirror."""
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
        return BackendChoice(kind, model, config)
    return BackendChoice(kind, settings.model or DEFAULT_LOCAL_MODEL)


__all__ = ["BACKENDS", "DEFAULT_LOCAL_MODEL", "BackendChoice", "BackendChoiceError", "BackendSettings",
           "choose_backend"]
