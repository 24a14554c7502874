"""The LoRA adapter a policy trains: its settings, checked when made (the `[lora]` section of a run's config).

Kept apart from `model.py` so that reading a config imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracec.config_io import require


@dataclass(frozen=True, kw_only=True)
class LoraSection:
    rank: int = 16
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")

    def __post_init__(self) -> None:
        require(self.rank >= 1, "rank", self.rank, "a LoRA rank is an integer >= 1; try 16")
        require(self.alpha > 0, "alpha", self.alpha, "alpha scales the adapter (alpha / rank); try 16")
        require(0 <= self.dropout < 1, "dropout", self.dropout, "a probability in [0, 1); try 0")
        require(len(self.targets) > 0, "targets", self.targets, "name the modules to adapt, e.g. "
                 "[\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"]")
