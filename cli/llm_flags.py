"""The flags of the LLM that `tracec analyze` and `tracec synth` ask, and the backend settings they name.

    --llm transformers --model smollm2-135m-instruct   a local checkpoint (default; `tiny` builds the test model)
    --llm http --base-url URL --model NAME              any OpenAI-compatible server
    --llm vllm --model NAME_OR_FOLDER                   vLLM in-process (GPU)

What the backend flags mean, the environment's fallbacks included, is `trace_rl.llm.options.choose_backend`'s to say,
so that the pipeline's `[llm]` means the same. `--tries`, `--max-tokens` and `--temperature` are not the backend's:
each command passes them to its own settings.
"""

from __future__ import annotations

import argparse

from tracec.trace_rl.llm.options import BACKENDS, DEFAULT_LOCAL_MODEL, BackendSettings, choose_backend
from tracec.trace_rl.llm.repair import TRIES

from tracec.arguments import integer, number, torch_device


def add_llm_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the LLM")
    group.add_argument("--llm", choices=BACKENDS, help="backend (default: http when a base URL is set, else "
                       "transformers)")
    group.add_argument("--model", help="model: an installed name or checkpoint folder (default "
                       f"{DEFAULT_LOCAL_MODEL}), or the served model's name for http (TRACEC_LLM_MODEL)")
    group.add_argument("--base-url", help="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 "
                       "(TRACEC_LLM_BASE_URL, OPENAI_BASE_URL); the key comes from "
                       "TRACEC_LLM_API_KEY or OPENAI_API_KEY")
    group.add_argument("--timeout", type=number(0, above=True), default=120.0,
                       help="seconds per HTTP request (default 120)")
    group.add_argument("--retries", type=integer(0), default=4, help="HTTP retries on 429 / 5xx / timeouts (default 4)")
    group.add_argument("--device", type=torch_device, default="cpu",
                       help="torch device of a local transformers model: cpu, cuda or cuda:N (default cpu)")
    group.add_argument("--max-tokens", type=integer(1), default=None, help="reply length bound per call")
    group.add_argument("--temperature", type=number(0), default=None, help="sampling temperature (0: greedy)")
    group.add_argument("--seed", type=integer(0), default=0, help="sampling seed (default 0)")
    group.add_argument("--tries", type=integer(1), default=TRIES,
                       help=f"attempts per step of the repair loop (default {TRIES})")


def backend_settings(args: argparse.Namespace) -> BackendSettings:
    """The settings the flags name, checked to name a usable backend (`BackendChoiceError`, a usage error) now,
    before a command imports torch or reads its inputs."""
    settings = BackendSettings(backend=args.llm, model=args.model, base_url=args.base_url, timeout=args.timeout,
                               retries=args.retries, device=args.device, seed=args.seed)
    choose_backend(settings)
    return settings
