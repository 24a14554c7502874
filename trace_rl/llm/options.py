"""The command-line flags that pick an LLM backend, shared by `tracec analyze` and `tracec synth`.

    --llm transformers --model smollm2-135m-instruct   a local checkpoint (default; `tiny` builds the test model)
    --llm http --base-url URL --model NAME              any OpenAI-compatible server
    --llm vllm --model NAME_OR_FOLDER                   vLLM in-process (GPU)

Without `--llm`, a base URL (flag, `TRACEC_LLM_BASE_URL` or `OPENAI_BASE_URL`) means http, else transformers.
The model and key may also come from `TRACEC_LLM_MODEL` and `TRACEC_LLM_API_KEY` (or `OPENAI_API_KEY`): a key is
read from the environment only, never from a flag, so it stays out of shell history and process lists.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from tracec.trace_rl.llm.calls import LLMError
from tracec.trace_rl.llm.chat import SamplingBackend
from tracec.trace_rl.policy.catalog import require_device

from tracec.arguments import integer, number, torch_device

BACKENDS = ("transformers", "http", "vllm")
DEFAULT_LOCAL_MODEL = "smollm2-135m-instruct"


class BackendChoiceError(Exception):
    """Flags that do not name a usable backend (a usage error)."""


def add_llm_arguments(parser: argparse.ArgumentParser, *, tries: int = 3) -> None:
    group = parser.add_argument_group("the LLM")
    group.add_argument("--llm", choices=BACKENDS, help="backend (default: http when a base URL is set, else "
                       "transformers)")
    group.add_argument("--model", help=f"model: an installed name or checkpoint folder (default {DEFAULT_LOCAL_MODEL}), "
                       "or the served model's name for http (TRACEC_LLM_MODEL)")
    group.add_argument("--base-url", help="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 "
                       "(TRACEC_LLM_BASE_URL, OPENAI_BASE_URL); the key comes from TRACEC_LLM_API_KEY or OPENAI_API_KEY")
    group.add_argument("--timeout", type=number(0, above=True), default=120.0,
                       help="seconds per HTTP request (default 120)")
    group.add_argument("--retries", type=integer(0), default=4, help="HTTP retries on 429 / 5xx / timeouts (default 4)")
    group.add_argument("--device", type=torch_device, default="cpu",
                       help="torch device of a local transformers model: cpu, cuda or cuda:N (default cpu)")
    group.add_argument("--max-tokens", type=integer(1), default=None, help="reply length bound per call")
    group.add_argument("--temperature", type=number(0), default=None, help="sampling temperature (0: greedy)")
    group.add_argument("--seed", type=integer(0), default=0, help="sampling seed (default 0)")
    group.add_argument("--tries", type=integer(1), default=tries,
                       help=f"attempts per step of the repair loop (default {tries})")


def open_backend(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> SamplingBackend:
    """The backend the flags name; raises `BackendChoiceError` (usage) or `LLMError` / `ModelError` (loading)."""
    if args.tries < 1:
        raise BackendChoiceError(f"--tries must be at least 1, got {args.tries}")
    base_url = args.base_url or environ.get("TRACEC_LLM_BASE_URL") or environ.get("OPENAI_BASE_URL")
    kind = args.llm or ("http" if base_url else "transformers")
    if kind == "http":
        from tracec.trace_rl.llm.http import HTTPConfig, OpenAIChatBackend

        model = args.model or environ.get("TRACEC_LLM_MODEL")
        if not base_url or not model:
            missing = " and ".join(n for n, v in (("--base-url", base_url), ("--model", model)) if not v)
            raise BackendChoiceError(f"--llm http needs {missing} (or TRACEC_LLM_BASE_URL / TRACEC_LLM_MODEL)")
        key = environ.get("TRACEC_LLM_API_KEY") or environ.get("OPENAI_API_KEY")
        try:
            config = HTTPConfig(base_url=base_url, model=model, api_key=key, timeout_s=args.timeout,
                                retries=args.retries)
        except ValueError as error:
            raise BackendChoiceError(str(error)) from None
        return OpenAIChatBackend(config)
    model_name = args.model or DEFAULT_LOCAL_MODEL
    if kind == "vllm":
        from tracec.trace_rl.llm.vllm_backend import VLLMBackend, import_vllm
        from tracec.trace_rl.policy.catalog import resolve_model

        import_vllm()  # the install hint before any model lookup
        return VLLMBackend(resolve_model(model_name, environ), seed=args.seed)
    require_device(args.device, "--device")  # before the model loads
    return local_backend(model_name, device=args.device, seed=args.seed, environ=environ)


def local_backend(model_name: str, *, device: str = "cpu", seed: int = 0, max_new_tokens: int = 512,
                  environ: Mapping[str, str] = os.environ) -> SamplingBackend:
    """A transformers model by installed name or folder (`tiny`: the random test model built in code)."""
    from tracec.trace_rl.llm.local import SamplingConfig, TransformersBackend
    from tracec.trace_rl.policy.catalog import TINY, resolve_model

    config = SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)
    if model_name == TINY:
        from tracec.trace_rl.policy.tiny import build_tiny_model

        model, tokenizer = build_tiny_model(seed, max_positions=max(2048, max_new_tokens + 512))
        return TransformersBackend(model, tokenizer, config=config, name=TINY)
    return TransformersBackend.from_pretrained(resolve_model(model_name, environ), config=config, device=device)


__all__ = ["BACKENDS", "BackendChoiceError", "LLMError", "add_llm_arguments", "local_backend", "open_backend"]
