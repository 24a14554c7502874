"""A base model with several LoRA adapters, one of them active at a time: what routing and evaluation decode with.

    model = PeftAdapters.load("smollm2-135m-instruct", {"precondition_verification": "runs/p/adapters/pv"})
    with model.active("precondition_verification"):   # this adapter decodes...
        text = model.generate(messages)
    with model.active(None):                             # ...and here the base model alone
        scores = model.next_token_scores(messages, [ids_of_a, ids_of_b])

`AdapterModel` is the protocol, with what every implementation checks of an adapter folder and a name:
`tracec.trace_rl.targeting.peft_adapters.PeftAdapters` (transformers, CPU or GPU) and
`tracec.trace_rl.targeting.vllm_adapters.VLLMAdapters` (vLLM), of which `peft_adapters.load_adapter_model`
picks one. This module imports neither torch nor vLLM: the command line names its `AdapterError` for `--help`.

A mixture of adapters (TRACE's nucleus composition) decodes with W' = W + sum_c alpha_c * scaling_c * B_c A_c over
the adapted layers: `with model.mixed({"pv": 0.7, "msc": 0.3}): ...`. The router's nucleus (`routing.nucleus`) gives
`base` alone or adapters whose alphas sum to 1, as TRACE does; `mixed` also reads a share left to `base` (no delta:
the adapters' alphas then sum to 1 - its share), which no route asks for.
`mixture_deltas` is the one reading of such weights every implementation uses; `release_mixture` frees what a
mixture built (the transformers engine's temporary adapter). `embed` is the base model's text embedding that
routing's retrieval pre-filter keys on.

`BaseModelUser` is the base model as a chat backend with every adapter off: the simulated user of tau2-bench is
"the same base model" as the agent (TRACE's protocol) without a second copy of the weights in memory.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from tracec.trace_rl.targeting.eval_table import BASE  # the name of "no adapter", as a condition or a route

ENGINES = ("transformers", "vllm")  # what decodes with the adapters: peft on torch, or vLLM
WEIGHTS = "adapter_model.safetensors"  # peft's weights file, as `Policy.save_adapter` writes it
_MAX_HEADER = 100_000_000  # bytes: safetensors' own bound on a header; a larger length is not a header


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

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text from the base model (every adapter off): its last hidden state
        mean-pooled over the text's tokens (a zero vector for a text of no tokens)."""

    def mixed(self, weights: Mapping[str, float]) -> contextlib.AbstractContextManager[None]:
        """Decode with the mixture `weights` (adapter or `base` -> alpha, summing to 1) inside the block."""

    def release_mixture(self) -> None:
        """Free what the last mixture built; the next `mixed` builds it again."""


def chosen_adapter(name: str | None, loaded: Sequence[str]) -> str | None:
    """The adapter `name` means among `loaded`: None for the base model (None or `base`); AdapterError if unknown."""
    if name in (None, BASE):
        return None
    if name not in loaded:
        raise AdapterError(f"no adapter {name!r}; loaded: {', '.join(loaded) or 'none'}")
    return name


def mixture_deltas(weights: Mapping[str, float], loaded: Sequence[str]) -> dict[str, float]:
    """The adapters a mixture adds a delta for, with their alphas: `base` and zero weights dropped; AdapterError for
    an unknown adapter, a negative or non-finite weight, or weights that do not sum to 1."""
    if any(not math.isfinite(w) or w < 0 for w in weights.values()) or abs(sum(weights.values()) - 1.0) > 1e-6:
        raise AdapterError(f"mixture weights are non-negative and sum to 1; got {dict(weights)}")
    deltas = {}
    for name, weight in weights.items():
        adapter = chosen_adapter(name, loaded)
        if adapter is not None and weight > 0:
            deltas[adapter] = float(weight)
    return deltas


def is_single(deltas: Mapping[str, float]) -> bool:
    """Whether a mixture is one adapter at its full weight: decoding with that adapter alone is the same model."""
    return len(deltas) == 1 and abs(next(iter(deltas.values())) - 1.0) < 1e-9


def check_adapter_name(name: str) -> None:
    """An adapter's name is not empty and not `base`, which means no adapter."""
    if name == BASE or not name:
        raise AdapterError(f"an adapter may not be called {name!r}: `{BASE}` means no adapter")


def adapter_config(folder: str | Path) -> dict[str, Any]:
    """An adapter folder's `adapter_config.json`, the folder checked to hold an adapter peft and vLLM load from disk:
    a LoRA config and whole weights (`adapter_shapes`). Given a folder without them, peft would look the name up
    on a model hub instead."""
    path = Path(folder) / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        why = "no adapter_config.json" if Path(folder).is_dir() else "no such folder"
        raise AdapterError(f"{folder}: not an adapter folder ({why}); name the `adapter` folder of a training "
                           "checkpoint") from None
    except json.JSONDecodeError as error:
        raise AdapterError(f"{path}:{error.lineno}:{error.colno}: not JSON: {error.msg}") from None
    targets = config.get("target_modules")
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not targets or config.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{path}: a LoRA adapter config with target_modules is expected")
    adapter_shapes(folder)
    return {**config, "target_modules": targets}


def adapter_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor of an adapter folder's weights, read from the safetensors header alone (no torch),
    the file checked to be as long as the header says; {} for peft's older pickled `adapter_model.bin`, whose
    shapes only torch can read. AdapterError naming the folder without weights, or the damaged file."""
    safetensors, pickled = Path(folder) / WEIGHTS, Path(folder) / "adapter_model.bin"
    if not safetensors.is_file():
        if pickled.is_file():
            return {}
        raise AdapterError(f"{folder}: not an adapter folder (adapter_config.json but no {WEIGHTS}); name the "
                           "`adapter` folder of a training checkpoint")
    length, header = _safetensors_header(safetensors)
    tensors = {key: entry for key, entry in header.items() if key != "__metadata__"}
    try:
        shapes = {key: tuple(int(n) for n in entry["shape"]) for key, entry in tensors.items()}
        data = max((int(entry["data_offsets"][1]) for entry in tensors.values()), default=0)
    except (TypeError, KeyError, IndexError, ValueError):
        raise AdapterError(f"{safetensors}: damaged adapter (its header does not describe tensors); save or copy "
                           "it again") from None
    size, expected = safetensors.stat().st_size, 8 + length + data
    if size != expected:
        raise AdapterError(f"{safetensors}: damaged adapter ({size} bytes where its header describes {expected}: "
                           "cut short, or written over); save or copy it again")
    return shapes


def _safetensors_header(path: Path) -> tuple[int, dict[str, Any]]:
    """A safetensors file's header: its length in bytes and its JSON (the file starts with the length, 8 bytes
    little-endian, then the JSON)."""
    with path.open("rb") as file:
        length = int.from_bytes(file.read(8), "little")
        raw = file.read(length) if 2 <= length <= _MAX_HEADER else b""
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        header = None
    if not isinstance(header, dict) or len(raw) != length:
        raise AdapterError(f"{path}: damaged adapter (no safetensors header: an empty, cut or foreign file); save or "
                           "copy it again")
    return length, header


def adapter_targets(folder: str | Path) -> tuple[str, ...]:
    """The modules an adapter folder adapts (its `adapter_config.json`), checked to be one peft can load."""
    return tuple(sorted(str(t) for t in adapter_config(folder)["target_modules"]))


class BaseModelUser:
    """`model`'s base (every adapter off) as a `ChatBackend`: a simulated user sharing the agent's weights. Made
    before the model loads (`model=None`) and given it by `bind`, it lets a command build the environments it plays
    in, and so check their files and settings, before it spends seconds on the weights."""

    def __init__(self, model: AdapterModel | None = None) -> None:
        self.model = model

    def bind(self, model: AdapterModel) -> None:
        self.model = model

    def generate(self, messages: list[dict[str, str]]) -> str:
        assert self.model is not None, "BaseModelUser.bind(model) before an episode plays"
        with self.model.active(None):
            return self.model.generate(messages)
