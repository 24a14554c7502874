"""A LoRA adapter with random A and B (the tiny model's by default, large): one that visibly changes what the model
computes, for the routing and mixture tests (and, on SmolLM2 at a small scale, the vLLM engine's)."""

from __future__ import annotations

from pathlib import Path

import torch
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import TRAINED, Policy


def random_adapter(folder: Path, seed: int, *, rank: int = 4, alpha: float | None = None, model: str = "tiny",
                   scale: float = 0.5) -> Path:
    """The adapter of `model` saved in `folder`: rank `rank`, lora_alpha `alpha` (default 2 * rank), entries
    N(0, scale^2)."""
    policy = Policy.load(model, LoraSection(rank=rank, alpha=2.0 * rank if alpha is None else alpha), seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if "lora_" in name and f".{TRAINED}." in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
    return policy.save_adapter(folder)
