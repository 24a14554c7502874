"""A base model with several LoRA adapters, one of them active at a time: what routing and evaluation decode with.

    model = PeftAdapters.load("smollm2-135m-instruct", {"precondition_verification": "runs/p/adapters/pv"})
    with model.active("precondition_verification"):   # this adapter decodes...
        text = model.generate(messages)
    with model.active(None):                             # ...and here the base model alone
        scores = model.next_token_scores(messages, [ids_of_a, ids_of_b])

`AdapterModel` is the protocol; `PeftAdapters` is its CPU implementation: the trainer's `Policy` (peft) with every
adapter loaded beside the others under its own name, so switching is `set_adapter` (or `disable_adapter` for the
base) and never reloads the base weights. Decoding is greedy through `TransformersBackend` over the peft model
(the chat template renders the conversation, as in training), in eval mode; `--device cuda` runs it on a GPU.

`BaseModelUser` is the base model as a chat backend with every adapter off: the simulated user of tau2-bench is
"the same base model" as the agent (TRACE's protocol) without a second copy of the weights in memory.
`load_adapter_model` picks the implementation: `PeftAdapters` (transformers, CPU or GPU) or
`tracec.trace_rl.trace.vllm_adapters.VLLMAdapters` (vLLM on a GPU, one `LoRARequest` per request).
Left out: weighted mixtures of adapters (TRACE's nucleus composition): one adapter is active per episode.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from tracec.trace_rl.llm import conversation
from tracec.trace_rl.trace.eval_table import BASE  # the name of "no adapter", as a condition or a route

ENGINES = ("transformers", "vllm")  # what decodes with the adapters: peft on torch, or vLLM (GPU)


class AdapterError(ValueError):
    """An adapter folder that cannot be used; the message names it and says why."""


class AdapterModel(Protocol):
    @property
    def tokenizer(self) -> Any: ...

    @property
    def adapter_names(self) -> tuple[str, ...]: ...

    def active(self, name: str | None) -> contextlib.AbstractContextManager[None]:
        """Decode with adapter `name` (None or `base`: the base model alone) inside the block."""

    def generate(self, messages: list[dict[str, str]]) -> str:
        """The greedy reply to `messages` under the active adapter."""

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The token ids of `messages` rendered up to where the assistant's reply begins (no truncation)."""

    def next_token_scores(self, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        """The base model's scores (logits, or log-probs) of each of `token_ids` at the position after
        `prompt_ids`: the distribution of the first token of the reply."""


def chosen_adapter(name: str | None, loaded: Sequence[str]) -> str | None:
    """The adapter `name` means among `loaded`: None for the base model (None or `base`); AdapterError if unknown."""
    if name in (None, BASE):
        return None
    if name not in loaded:
        raise AdapterError(f"no adapter {name!r}; loaded: {', '.join(loaded) or 'none'}")
    return name


def check_adapter_name(name: str) -> None:
    """An adapter's name is not empty and not `base`, which means no adapter."""
    if name == BASE or not name:
        raise AdapterError(f"an adapter may not be called {name!r}: `{BASE}` means no adapter")


def adapter_config(folder: str | Path) -> dict[str, Any]:
    """An adapter folder's `adapter_config.json`, checked to be a LoRA config peft can load."""
    path = Path(folder) / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterError(f"{folder}: not an adapter folder (no adapter_config.json); name the `adapter` folder "
                           "of a training checkpoint") from None
    except json.JSONDecodeError as error:
        raise AdapterError(f"{path}:{error.lineno}:{error.colno}: not JSON: {error.msg}") from None
    targets = config.get("target_modules")
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not targets or config.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{path}: a LoRA adapter config with target_modules is expected")
    return {**config, "target_modules": targets}


def adapter_targets(folder: str | Path) -> tuple[str, ...]:
    """The modules an adapter folder adapts (its `adapter_config.json`), checked to be one peft can load."""
    return tuple(sorted(str(t) for t in adapter_config(folder)["target_modules"]))


def load_adapter_model(model: str, adapters: Mapping[str, str | Path], *, engine: str = "transformers",
                       device: str = "cpu", dtype: str = "float32", max_new_tokens: int = 128) -> AdapterModel:
    """The base `model` with `adapters` loaded, on `engine` (`ENGINES`); vLLM needs a CUDA device."""
    if engine == "vllm":
        from tracec.trace_rl.trace.vllm_adapters import VLLMAdapters

        if not device.startswith("cuda"):
            raise AdapterError("the vllm engine runs on GPUs: give a cuda device, or use the transformers engine")
        return VLLMAdapters.load(model, adapters, dtype=dtype, max_new_tokens=max_new_tokens)
    if engine != "transformers":
        raise AdapterError(f"unknown engine {engine!r}; engines: {', '.join(ENGINES)}")
    return PeftAdapters.load(model, adapters, device=device, dtype=dtype, max_new_tokens=max_new_tokens)


class PeftAdapters:
    """The trainer's `Policy` with named adapters loaded beside each other; greedy decoding with `max_new_tokens`."""

    def __init__(self, policy: Any, *, max_new_tokens: int = 128) -> None:
        from tracec.trace_rl.llm.local import SamplingConfig, TransformersBackend

        self.policy = policy
        self.backend = TransformersBackend(policy.model, policy.tokenizer, name=policy.source,
                                           config=SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0))
        self._names: list[str] = []
        self._active: str | None = None

    @classmethod
    def load(cls, model: str, adapters: Mapping[str, str | Path], *, device: str = "cpu", dtype: str = "float32",
             max_new_tokens: int = 128) -> PeftAdapters:
        """The base `model` (an installed name, a folder, or `tiny`) with each adapter loaded under its name."""
        from tracec.trace_rl.policy.lora import LoraSection
        from tracec.trace_rl.policy.model import Policy

        for name in adapters:
            check_adapter_name(name)
        folders = {name: Path(folder) for name, folder in adapters.items()}
        # peft needs a first adapter to wrap the model; it is the trainer's zero-initialised one, never activated.
        targets = adapter_targets(next(iter(folders.values()))) if folders else LoraSection().targets
        policy = Policy.load(model, LoraSection(targets=targets), device=device, dtype=dtype)
        loaded = cls(policy, max_new_tokens=max_new_tokens)
        for name, folder in folders.items():
            loaded.add(name, folder)
        return loaded

    def add(self, name: str, folder: str | Path) -> None:
        """Load one more adapter; the base weights are shared, not copied."""
        adapter_targets(folder)
        if name in self._names:
            raise AdapterError(f"adapter {name!r} is loaded already")
        try:
            self.policy.load_adapter(folder, name)
        except (ValueError, RuntimeError, KeyError) as error:  # peft: shapes or modules that do not fit the base
            raise AdapterError(f"{folder}: this adapter does not fit the model {self.policy.source!r}: {error}") \
                from None
        self._names.append(name)

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    @property
    def adapter_names(self) -> tuple[str, ...]:
        return tuple(self._names)

    @property
    def active_name(self) -> str | None:
        return self._active

    @contextlib.contextmanager
    def active(self, name: str | None) -> Iterator[None]:
        previous, self._active = self._active, chosen_adapter(name, self._names)
        try:
            with self.policy.base_model() if self._active is None else self.policy.use_adapter(self._active):
                yield
        finally:
            self._active = previous

    def generate(self, messages: list[dict[str, str]]) -> str:
        import torch

        with torch.inference_mode():
            return self.backend.generate(messages)

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return conversation.encode(self.tokenizer, messages)

    def next_token_scores(self, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        import torch

        if len(prompt_ids) >= self.backend.positions:
            raise AdapterError(f"the routing prompt has {len(prompt_ids)} tokens; the model reads at most "
                               f"{self.backend.positions - 1}: shorten the examples (routing.example_chars)")
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.policy.device)
        with torch.inference_mode(), self.active(None):
            logits = self.policy.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        last = logits[0, -1].float()  # the position after the prompt: the reply's first token
        return [float(last[i]) for i in token_ids]


class BaseModelUser:
    """`model`'s base (every adapter off) as a `ChatBackend`: a simulated user sharing the agent's weights."""

    def __init__(self, model: AdapterModel) -> None:
        self.model = model

    def generate(self, messages: list[dict[str, str]]) -> str:
        with self.model.active(None):
            return self.model.generate(messages)
