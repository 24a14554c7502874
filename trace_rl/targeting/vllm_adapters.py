"""vLLM with several LoRA adapters: TRACE's routed inference with one `LoRARequest` per request.

    model = VLLMAdapters.load("smollm2-135m-instruct", {"precondition_verification": "runs/p/train/pv/adapter"})
    with model.active("precondition_verification"):   # every request in the block carries this adapter's LoRARequest
        text = model.generate(messages)

The `AdapterModel` of `tracec.trace_rl.targeting.adapters` on vLLM: one engine holds the base weights once, every
adapter is registered under its own name and integer id (`lora_requests`, ids from 1 as vLLM requires), and the
active adapter is the `lora_request` of each `generate`, so episodes routed to different adapters share the engine
and its batches without reloading anything. The base model is a request without a LoRARequest. Requests are token
ids encoded by `tracec.trace_rl.llm.conversation`, not messages for `LLM.chat`: vLLM then reads what the transformers
engine and the trainer read, and a tokenizer without a chat template (the small policy) gets the same fallback
template.

Routing reads the base model's distribution of the reply's first token over the label tokens. vLLM returns
log-probs, not logits, so each task is one request for one token with `logprob_token_ids` = the labels: the raw
log-probs of exactly those tokens at the reply's first position; log-probs differ from logits by the same constant at
one position, so the choice and the differences are the same. (Scoring the labels as prompt log-probs of prompt +
label fails on vLLM 0.32's CPU engine with LoRA on: its CPU LoRA kernels size the logits' mapping by requests, not by
prompt rows; `logprob_token_ids` is also one request where that was one a label.)

vLLM is optional (`pip install 'tracec[gpu]'` on a GPU; `make vllm-venv` for its CPU engine), imported when a model
is loaded; `gpu_memory` is vLLM's `gpu_memory_utilization` (on the CPU, the share of RAM it may hold, whose rest after
the weights is its KV cache). A model vLLM has no implementation of, or an adapter above the largest rank it serves,
is a located `AdapterError` before the engine starts. Tested on the CPU engine
(`tests/vllm_engine/test_vllm_routing.py`: `tracec evaluate --engine vllm` routes and decodes as the peft engine
does); `bench/gpu_check.sh` runs it on a GPU. A mixture (`mixed`) is served only where it is one
model vLLM has: `base` alone, or one adapter at full weight (a route's nucleus of one adapter); a request carries
one LoRA at its own scale, so a mixture of two adapters (or one with a share left to `base`) raises an
`AdapterError` that names the transformers engine.
`embed` (the retrieval pre-filter's) raises one too: vLLM's generate API gives no hidden states here.
Left out: adapters added after the engine starts (the engine is sized for the adapters it is given).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.trace_rl.llm import conversation
from tracec.trace_rl.llm.calls import LLMError
from tracec.trace_rl.llm.vllm_backend import (
    ENGINE_RANKS,
    check_engine_model,
    clean_model_folder,
    engine_rank,
    import_vllm,
)
from tracec.trace_rl.policy.catalog import TINY, resolve_model
from tracec.trace_rl.targeting.adapters import (
    AdapterError,
    adapter_config,
    check_adapter_name,
    chosen_adapter,
    is_single,
    mixture_deltas,
)

MAX_LOGPROBS = 20  # vLLM's default cap on log-probs a request; routing asks for one per option (adapters + base)


@dataclass(frozen=True)
class LoraSpec:
    """What vLLM's `LoRARequest(name, int_id, path)` takes for one adapter, and its rank."""

    name: str
    int_id: int
    path: str
    rank: int


def lora_specs(adapters: Mapping[str, str | Path]) -> list[LoraSpec]:
    """One spec per adapter, checked as `PeftAdapters` checks them: names other than `base`, LoRA folders with a
    rank."""
    specs = []
    for int_id, (name, folder) in enumerate(adapters.items(), start=1):
        check_adapter_name(name)
        rank = adapter_config(folder).get("r")
        if not isinstance(rank, int) or rank < 1:
            raise AdapterError(f"{folder}/adapter_config.json: `r` (the LoRA rank) must be a positive integer")
        if rank > ENGINE_RANKS[-1]:
            raise AdapterError(f"{folder}/adapter_config.json: r = {rank} is above the largest LoRA rank vLLM serves "
                               f"({ENGINE_RANKS[-1]}); decode it with the transformers engine (--engine transformers "
                               "or evaluate.engine = \"transformers\"), or train it at a lower lora.rank")
        specs.append(LoraSpec(name, int_id, str(Path(folder).resolve()), rank))
    return specs


def check_engine_inputs(model: str, adapters: Mapping[str, str | Path]) -> list[LoraSpec]:
    """What a vLLM engine for `model` with `adapters` would fail on, as an `AdapterError` that names the file: vLLM
    not installed, a model it cannot load, an adapter it cannot serve; else the adapters' specs. Seconds (vLLM's
    import), against the minute an engine takes to start."""
    if model == TINY:
        raise AdapterError("the vllm engine needs a model folder; the tiny model exists only in code")
    specs = lora_specs(adapters)
    try:
        check_engine_model(resolve_model(model))
    except LLMError as error:
        raise AdapterError(str(error)) from None
    return specs


class VLLMAdapters:
    """`AdapterModel` over one vLLM engine: greedy decoding with `max_new_tokens`, the active adapter per request."""

    def __init__(self, engine: Any, specs: Sequence[LoraSpec], *, max_new_tokens: int,
                 folder: tempfile.TemporaryDirectory[str] | None = None) -> None:
        lora_request = import_vllm("vllm.lora.request").LoRARequest
        self.engine, self.max_new_tokens = engine, max_new_tokens
        self._folder = folder  # the checkpoint as the engine read it, kept as long as the engine
        self._requests = {spec.name: lora_request(spec.name, spec.int_id, spec.path) for spec in specs}
        self._active: str | None = None

    @classmethod
    def load(cls, model: str, adapters: Mapping[str, str | Path], *, dtype: str = "float32",
             max_new_tokens: int = 128, gpu_memory: float = 0.3, **engine: Any) -> VLLMAdapters:
        """The base `model` (an installed name or a folder) in a vLLM engine sized for `adapters`, every input
        checked before the engine starts."""
        specs = check_engine_inputs(model, adapters)
        vllm = import_vllm()
        source = resolve_model(model)
        scratch = tempfile.TemporaryDirectory(prefix="tracec-vllm-")
        folder = clean_model_folder(source, Path(scratch.name) / source.name)
        lora = {"enable_lora": True, "max_loras": len(specs),
                "max_lora_rank": engine_rank(max(s.rank for s in specs))} if specs else {}
        llm = vllm.LLM(model=str(folder), tokenizer=str(folder), dtype=dtype, enable_prefix_caching=True,
                       gpu_memory_utilization=gpu_memory, max_logprobs=max(MAX_LOGPROBS, len(specs) + 1), **lora,
                       **engine)
        return cls(llm, specs, max_new_tokens=max_new_tokens, folder=scratch)

    @property
    def tokenizer(self) -> Any:
        return self.engine.get_tokenizer()

    @property
    def adapter_names(self) -> tuple[str, ...]:
        return tuple(self._requests)

    @property
    def active_name(self) -> str | None:
        return self._active

    @contextlib.contextmanager
    def active(self, name: str | None) -> Iterator[None]:
        previous, self._active = self._active, chosen_adapter(name, list(self._requests))
        try:
            yield
        finally:
            self._active = previous

    @contextlib.contextmanager
    def mixed(self, weights: Mapping[str, float]) -> Iterator[None]:
        deltas = mixture_deltas(weights, list(self._requests))
        if deltas and not is_single(deltas):
            shown = ", ".join(f"{name} {weight:.3f}" for name, weight in weights.items())
            raise AdapterError(f"the vllm engine serves one LoRA a request at its own scale, not the mixture {shown}; "
                               "mix adapters with the transformers engine (--engine transformers, or "
                               "evaluate.engine = \"transformers\"), or route to one adapter (the routed condition)")
        with self.active(next(iter(deltas), None)):
            yield

    def release_mixture(self) -> None:
        pass  # nothing is built for a mixture here

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise AdapterError("retrieval embeds with the transformers engine (--engine transformers, or evaluate.engine "
                           "= \"transformers\"); the vllm engine gives no hidden states")

    def generate(self, messages: list[dict[str, str]]) -> str:
        tokens_prompt, sampling_params = import_vllm("vllm.inputs").TokensPrompt, import_vllm().SamplingParams
        params = sampling_params(temperature=0.0, max_tokens=self.max_new_tokens, detokenize=False)
        lora = None if self._active is None else self._requests[self._active]
        prompt = tokens_prompt(prompt_token_ids=self.prompt_ids(messages))
        outputs = self.engine.generate([prompt], params, lora_request=lora, use_tqdm=False)
        return conversation.decode_reply(self.tokenizer, outputs[0].outputs[0].token_ids)

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return conversation.encode(self.tokenizer, messages)

    def next_token_scores(self, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        tokens_prompt, sampling_params = import_vllm("vllm.inputs").TokensPrompt, import_vllm().SamplingParams
        params = sampling_params(temperature=0.0, max_tokens=1, logprob_token_ids=list(token_ids), detokenize=False)
        prompt = tokens_prompt(prompt_token_ids=list(prompt_ids))
        output = self.engine.generate([prompt], params, use_tqdm=False)[0]  # no lora_request: the base model routes
        first = output.outputs[0].logprobs[0]
        return [float(first[token].logprob) for token in token_ids]
