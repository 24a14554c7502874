"""The base model with its LoRA adapters on peft: `PeftAdapters`, and `load_adapter_model`, which picks an engine.

`PeftAdapters` is the CPU implementation of `AdapterModel` (`tracec.trace_rl.targeting.adapters`): the trainer's
`Policy` (peft) with every adapter loaded beside the others under its own name, so switching is `set_adapter` (or
`disable_adapter` for the base) and never reloads the base weights. Decoding is greedy through `TransformersBackend`
over the peft model (the chat template renders the conversation, as in training), in eval mode; `--device cuda`
runs it on a GPU. `load_adapter_model` gives it, or `tracec.trace_rl.targeting.vllm_adapters.VLLMAdapters` (vLLM, one
`LoRARequest` per request) for the `vllm` engine.

A mixture (`mixed`) is peft's `add_weighted_adapter(..., combination_type="cat")` under the temporary adapter name
`MIXTURE`: it stacks the rows alpha_c * scaling_c * A_c and the columns B_c at scaling 1, so its delta is exactly
sum_c alpha_c * scaling_c * B_c A_c (peft takes the `linear` path for one adapter, also exact: sqrt(alpha_c *
scaling_c) on each factor). It is built when a new mixture is asked for and kept while the same one is asked again
(every turn of an episode), and deleted by `release_mixture` or the next mixture; one adapter at full weight is
simply that adapter, and `base` alone the base model. `embed` runs the base model with every adapter off and
mean-pools its last hidden state (after the final norm) over the text's tokens, one text at a time (no padding).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from tracec.trace_rl.llm import conversation
from tracec.trace_rl.llm.local import SamplingConfig, TransformersBackend
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.targeting.adapters import (
    ENGINES,
    WEIGHTS,
    AdapterError,
    AdapterModel,
    adapter_config,
    adapter_shapes,
    adapter_targets,
    check_adapter_name,
    chosen_adapter,
    is_single,
    mixture_deltas,
)
from tracec.trace_rl.targeting.vllm_adapters import VLLMAdapters

MIXTURE = "tracec-mixture"  # the temporary adapter a mixture is built under; no loaded adapter may have this name


def load_adapter_model(model: str, adapters: Mapping[str, str | Path], *, engine: str = "transformers",
                       device: str = "cpu", dtype: str = "float32", max_new_tokens: int = 128,
                       vllm_gpu_memory: float = 0.3) -> AdapterModel:
    """The base `model` with `adapters` loaded, on `engine` (`ENGINES`). vLLM runs on the device its build is for
    (CUDA, or the CPU build's), with `vllm_gpu_memory` of that device's memory; `device` places the peft engine."""
    if engine == "vllm":
        return VLLMAdapters.load(model, adapters, dtype=dtype, max_new_tokens=max_new_tokens,
                                 gpu_memory=vllm_gpu_memory)
    if engine != "transformers":
        raise AdapterError(f"unknown engine {engine!r}; engines: {', '.join(ENGINES)}")
    return PeftAdapters.load(model, adapters, device=device, dtype=dtype, max_new_tokens=max_new_tokens)


class PeftAdapters:
    """The trainer's `Policy` with named adapters loaded beside each other; greedy decoding with `max_new_tokens`."""

    def __init__(self, policy: Any, *, max_new_tokens: int = 128) -> None:
        self.policy = policy
        self.backend = TransformersBackend(policy.model, policy.tokenizer, name=policy.source,
                                           config=SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0))
        self._names: list[str] = []
        self._active: str | None = None
        self._mixture: tuple[tuple[str, float], ...] | None = None  # the deltas `MIXTURE` holds now

    @classmethod
    def load(cls, model: str, adapters: Mapping[str, str | Path], *, device: str = "cpu", dtype: str = "float32",
             max_new_tokens: int = 128) -> PeftAdapters:
        """The base `model` (an installed name, a folder, or `tiny`) with each adapter loaded under its name."""
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
        config = adapter_config(folder)
        if name == MIXTURE:
            raise AdapterError(f"an adapter may not be called {MIXTURE!r}: mixtures are built under that name")
        if name in self._names:
            raise AdapterError(f"adapter {name!r} is loaded already")
        misfit = _misfit(self.policy.model, adapter_shapes(folder))  # before peft, which would list every tensor
        if misfit:
            made_for = config.get("base_model_name_or_path") or "another model"
            raise AdapterError(f"{folder}: this adapter was made for {made_for}, not for the model "
                               f"{self.policy.source!r}: {misfit}")
        try:
            self.policy.load_adapter(folder, name)
        except SafetensorError as error:  # a header that reads well over tensors that do not
            raise AdapterError(f"{Path(folder) / WEIGHTS}: damaged adapter ({error}); save or copy it again") from None
        except (ValueError, RuntimeError, KeyError) as error:  # peft: what the shapes checked above do not catch
            raise AdapterError(f"{folder}: this adapter does not fit the model {self.policy.source!r}: "
                               f"{_first_lines(str(error))}") from None
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

    @contextlib.contextmanager
    def mixed(self, weights: Mapping[str, float]) -> Iterator[None]:
        deltas = mixture_deltas(weights, self._names)
        if not deltas or is_single(deltas):
            with self.active(next(iter(deltas), None)):
                yield
            return
        key = tuple(deltas.items())
        if self._mixture != key:
            self.release_mixture()
            model, previous = self.policy.model, self.policy.model.active_adapter
            special = [n for n in deltas if model.peft_config[n].use_rslora or model.peft_config[n].use_dora]
            if special:  # the stacked adapter's scaling would not be 1: its delta would not be the sum above
                raise AdapterError(f"adapters {', '.join(special)} use rsLoRA or DoRA; mixtures take plain LoRA")
            model.add_weighted_adapter(list(deltas), list(deltas.values()), MIXTURE, combination_type="cat")
            model.set_adapter(previous)  # adding does not activate it; keep whatever was active
            self._mixture = key
        previous_name, self._active = self._active, MIXTURE
        try:
            with self.policy.use_adapter(MIXTURE):
                yield
        finally:
            self._active = previous_name

    def release_mixture(self) -> None:
        if self._mixture is not None:
            self.policy.model.delete_adapter(MIXTURE)
            self._mixture = None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = []
        with torch.inference_mode(), self.active(None):
            for text in texts:
                pieces = list(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
                ids = torch.tensor([pieces[: self.backend.positions]], dtype=torch.long, device=self.policy.device)
                if not pieces:
                    vectors.append([0.0] * int(self.policy.model.config.hidden_size))
                    continue
                out = self.policy.model(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
                pooled = out.hidden_states[-1][0].float().mean(dim=0)
                vectors.append((pooled / pooled.norm().clamp_min(1e-12)).tolist())
        return vectors

    def generate(self, messages: list[dict[str, str]]) -> str:
        with torch.inference_mode():
            return self.backend.generate(messages)

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return conversation.encode(self.tokenizer, messages)

    def next_token_scores(self, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        if len(prompt_ids) >= self.backend.positions:
            raise AdapterError(f"the routing prompt has {len(prompt_ids)} tokens; the model reads at most "
                               f"{self.backend.positions - 1}: shorten the examples (routing.example_chars)")
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.policy.device)
        with torch.inference_mode(), self.active(None):
            logits = self.policy.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        last = logits[0, -1].float()  # the position after the prompt: the reply's first token
        return [float(last[i]) for i in token_ids]


def _misfit(model: Any, shapes: Mapping[str, tuple[int, ...]]) -> str:
    """Why LoRA factors of `shapes` (peft's keys, `<module>.lora_A.weight` (r, in) and `<module>.lora_B.weight`
    (out, r)) do not fit `model`'s layers, in one sentence; "" when they fit. A model of another size differs in
    every factor: the count and one example say so, where peft would list each."""
    modules = dict(model.named_modules())
    missing, differ = [], []
    for key, shape in sorted(shapes.items()):
        module_name, _, factor = key.removesuffix(".weight").rpartition(".")
        if factor not in ("lora_A", "lora_B") or len(shape) != 2:
            continue
        module = modules.get(module_name)
        if module is None:
            missing.append(module_name)
            continue
        features = getattr(module, "in_features" if factor == "lora_A" else "out_features", None)
        wanted = (shape[0], features) if factor == "lora_A" else (features, shape[1])
        if features is not None and wanted != shape:
            differ.append(f"{module_name.removeprefix('base_model.model.')}.{factor} is {list(shape)} where this "
                          f"model's layer needs {list(wanted)}")
    factors = sum(1 for key in shapes if ".lora_A." in key or ".lora_B." in key)
    said = []
    if differ:
        said.append(f"{len(differ)} of its {factors} LoRA factors differ in shape (e.g. {differ[0]})")
    if missing:
        said.append(f"it adapts {len(set(missing))} layers this model does not have (e.g. "
                    f"{missing[0].removeprefix('base_model.model.')})")
    return "; ".join(said)


def _first_lines(message: str, keep: int = 2) -> str:
    """The head of a library's error, with a count of the lines left out (torch lists every tensor)."""
    lines = message.strip().splitlines()
    left = f" ... ({len(lines) - keep} more lines)" if len(lines) > keep else ""
    return " ".join(line.strip() for line in lines[:keep]) + left
