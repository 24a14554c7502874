"""The policy: a causal LM with LoRA adapters (peft), its tokenizer, and the base model one context manager away.

    policy = Policy.load("smollm2-135m-instruct", LoraSection(rank=16), device="cpu")
    policy.trainable_parameters()          # only the adapter's A and B matrices
    with policy.base_model():              # the adapter disabled: the KL reference, the `base` route
        ...
    policy.save_adapter(folder)            # adapter_model.safetensors + adapter_config.json (peft's format)
    policy.load_adapter(folder, "cap1")    # a second adapter beside the trained one; `use_adapter("cap1")` routes

The model comes from an installed model's name (`tracec models`), a checkpoint folder, or `tiny` (built in code for
tests). Nothing downloads. The base weights are frozen; the LoRA initialisation is seeded and leaves the RNG as it
was. The installed SmolLM2 is a plain float checkpoint (`smollm2.install_smollm2` drops the GGUF origin).
Left out: quantized bases (QLoRA), adapters on the LM head (the packed log-prob kernel needs a plain head).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from tracec.trace_rl.policy.catalog import TINY, check_checkpoint, resolve_model
from tracec.trace_rl.policy.lora import LoraSection, check_targets
from tracec.trace_rl.policy.tiny import build_tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from tracec.config_io import ConfigError, FieldError

TRAINED = "default"  # peft's name for the first adapter: the one the trainer trains
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def import_peft() -> ModuleType:
    """The `peft` module, imported here and nowhere else in tracec: when a policy is built or its adapter read.
    peft takes seconds to import (accelerate and much of transformers with it), and every trainer and pipeline
    module imports this one, also in a process that never builds a policy (a run refused by its checks, a pipeline
    whose training steps are done)."""
    import peft

    return peft


class Policy:
    def __init__(self, model: Any, tokenizer: Any, *, source: str) -> None:
        self.model, self.tokenizer, self.source = model, tokenizer, source

    @classmethod
    def load(cls, name_or_path: str, lora: LoraSection, *, device: str = "cpu", dtype: str = "float32",
             seed: int = 0) -> Policy:
        peft = import_peft()
        base, tokenizer = _load_base(name_or_path, dtype)
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        matrices = [name for name, module in base.named_modules()
                    if isinstance(getattr(module, "weight", None), torch.Tensor) and module.weight.dim() == 2]
        try:
            check_targets(lora.targets, matrices, str(name_or_path))
        except FieldError as error:
            raise ConfigError(str(error)) from None
        # peft annotates lora_alpha as int, but it only scales the adapter (alpha / r): a float is as good.
        config = peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                 target_modules=list(lora.targets), bias="none", task_type="CAUSAL_LM")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                model = peft.get_peft_model(base, config)
            except ValueError as error:  # peft: a target it cannot adapt (a layer type it has no LoRA for)
                raise ConfigError(f"lora.targets = {list(lora.targets)}: {error}") from None
        return cls(model.to(device), tokenizer, source=str(name_or_path))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """The trained adapter's tensors (detached copies on the CPU), by peft's names."""
        state = import_peft().get_peft_model_state_dict(self.model, adapter_name=TRAINED)
        return {k: v.detach().cpu().clone() for k, v in state.items()}

    def load_adapter_state(self, state: dict[str, torch.Tensor]) -> None:
        result = import_peft().set_peft_model_state_dict(self.model, state, adapter_name=TRAINED)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ValueError(f"the adapter state does not fit this model: unexpected tensors {unexpected[:3]}")

    def save_adapter(self, folder: str | Path) -> Path:
        """The trained adapter in peft's format (loadable by peft, vLLM and `load_adapter`)."""
        path = Path(folder)
        self.model.save_pretrained(str(path), selected_adapters=[TRAINED], safe_serialization=True)
        return path

    def load_adapter(self, folder: str | Path, name: str) -> None:
        """Another adapter beside the trained one (for routing); the trained one stays active."""
        self.model.load_adapter(str(folder), adapter_name=name, is_trainable=False)
        self.model.set_adapter(TRAINED)

    @contextlib.contextmanager
    def use_adapter(self, name: str) -> Iterator[None]:
        """Decode with adapter `name` active; the trained adapter (and which tensors train) come back after."""
        flags = [p.requires_grad for p in self.model.parameters()]
        previous = self.model.active_adapter
        self.model.set_adapter(name)
        try:
            yield
        finally:
            self.model.set_adapter(previous)
            for parameter, flag in zip(self.model.parameters(), flags):  # set_adapter makes the active one trainable
                parameter.requires_grad_(flag)

    @contextlib.contextmanager
    def merged(self) -> Iterator[None]:
        """The trained adapter folded into the base weights, for decoding: each adapted layer is one matmul instead
        of three. The base weights are copied first and copied back after, so nothing drifts (merging and
        unmerging by subtraction would leave rounding in the base weights every iteration)."""
        lora_layer = import_peft().tuners.lora.LoraLayer
        saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        with torch.no_grad():
            for module in self.model.modules():
                if isinstance(module, lora_layer) and TRAINED in module.lora_A:
                    weight = module.get_base_layer().weight
                    assert isinstance(weight, torch.Tensor)  # Module.__getattr__ says Tensor | Module
                    saved.append((weight, weight.detach().clone()))
                    # peft's concrete LoRA layers (Linear, Embedding, Conv) define it; their base does not.
                    weight += module.get_delta_weight(TRAINED).to(weight.dtype)  # type: ignore[attr-defined]
        try:
            with self.model.disable_adapter():
                yield
        finally:
            with torch.no_grad():
                for weight, original in saved:
                    weight.copy_(original)

    @contextlib.contextmanager
    def base_model(self) -> Iterator[None]:
        """Every adapter disabled: the base model's outputs."""
        with self.model.disable_adapter():
            yield


def _load_base(name_or_path: str, dtype: str) -> tuple[Any, Any]:
    if name_or_path == TINY:
        model, tokenizer = build_tiny_model(0, max_positions=4096)
        return model.to(_DTYPES[dtype]), tokenizer
    folder = resolve_model(name_or_path)  # ModelError with the fix when it is neither installed nor a folder
    check_checkpoint(folder)  # a ModelError naming what the folder lacks, not transformers' traceback
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=_DTYPES[dtype])
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return model.eval(), tokenizer
