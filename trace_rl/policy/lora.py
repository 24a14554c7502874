"""The LoRA adapter a policy trains: its settings, checked when made (the `[lora]` section of a run's config), and
`check_targets`, whether they name modules of a given model.

Kept apart from `model.py` so that reading and checking a config imports no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracec.config_io import FieldError, require


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


def check_targets(targets: Sequence[str], modules: Sequence[str], model: str) -> None:
    """A FieldError (key `lora.targets`) unless every target names one of `modules` (the full names of the model's
    weight matrices) as peft matches a list of targets: the full name, or its last dotted parts (`q_proj`,
    `self_attn.q_proj`); the error lists the names the model has."""
    missing = [t for t in targets if not any(m == t or m.endswith(f".{t}") for m in modules)]
    if not missing:
        return
    leaves = list(dict.fromkeys(m.rpartition(".")[2] for m in modules))
    example = next((m for m in modules if "." in m.partition(".")[2]), modules[0]) if modules else ""
    named = ", ".join(leaves[:_SHOWN]) + (f" and {len(leaves) - _SHOWN} more" if len(leaves) > _SHOWN else "")
    raise FieldError("lora.targets", tuple(targets),
                     f"the model \"{model}\" has no module named {', '.join(missing)}; LoRA can adapt its layers named "
                     f"{named} (full names like {example})" if modules else
                     f"the model \"{model}\" has no layer LoRA can adapt")


_SHOWN = 12  # layer names listed in the error: a model's few kinds of layer, not its every block
